import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { compileConfig, ConfigError } from './config.js';

const dir = mkdtempSync(join(tmpdir(), 'fnts-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
/** A fleet role's gRPC port on loopback: plaintext allowed. */
const LOOPBACK = { FNTS_GRPC_LISTEN_HOST: '127.0.0.1' };

describe('compileConfig', () => {
  it.each([
    ['FN_HOT_START_TIMEOUT_MSECS', '-1', 'FN_HOT_START_TIMEOUT_MSECS=-1 is out of range; use a value from 1 to 86400000 milliseconds'],
    ['FN_HOT_START_TIMEOUT_MSECS', '0', 'FN_HOT_START_TIMEOUT_MSECS=0 is out of range; use a value from 1 to 86400000 milliseconds'],
    ['FN_HOT_PULL_TIMEOUT_MSECS', '-5', 'FN_HOT_PULL_TIMEOUT_MSECS=-5 is out of range; use a value from 1 to 86400000 milliseconds'],
    ['FN_EJECT_IDLE_MSECS', '-1', 'FN_EJECT_IDLE_MSECS=-1 is out of range; use a value from 0 to 86400000 milliseconds'],
    ['FN_HOT_POLL_MSECS', '-1', 'FN_HOT_POLL_MSECS=-1 is out of range; use a value from 10 to 60000 milliseconds'],
    ['FNTS_DRAIN_TIMEOUT_MSECS', 'soon', 'FNTS_DRAIN_TIMEOUT_MSECS=soon is not a whole number of milliseconds; use a value from 0 to 86400000'],
  ])('refuses %s=%s, saying what to use', (name, value, message) => {
    expect(() => compileConfig({ [name]: value }, dir)).toThrow(new ConfigError(message));
  });

  it('reads FNTS_CONSOLE_FLEET as the base URLs of nodes, each once, and refuses anything else, or a role without a console', () => {
    expect(compileConfig({}, dir).consoleFleet).toEqual([]);
    expect(compileConfig({ FNTS_CONSOLE_FLEET: ' http://10.0.0.5:8080/, https://lb.example.com ,http://10.0.0.5:8080' }, dir).consoleFleet).toEqual(['http://10.0.0.5:8080', 'https://lb.example.com']);
    expect(compileConfig({ FN_NODE_TYPE: 'api', FNTS_CONSOLE_FLEET: 'http://runner:8080' }, dir).consoleFleet).toEqual(['http://runner:8080']);
    for (const bad of ['runner:8080', 'ftp://runner', 'http://user:pw@runner', 'http://runner/metrics', 'http://runner?x=1']) {
      expect(() => compileConfig({ FNTS_CONSOLE_FLEET: bad }, dir)).toThrow(
        new ConfigError(
          `FNTS_CONSOLE_FLEET has ${bad}, which is not a node's base URL; list the HTTP port (FN_PORT) of each LB, pure runner and pool manager, e.g. http://10.0.0.5:8080,http://10.0.0.6:8080`,
        ),
      );
    }
    expect(() => compileConfig({ FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: 'http://api:8080', FN_RUNNER_ADDRESSES: 'r:9190', FNTS_CONSOLE_FLEET: 'http://r:8080' }, dir)).toThrow(
      'FNTS_CONSOLE_FLEET is read by the console of an API or full node only; unset it for FN_NODE_TYPE=lb',
    );
  });

  it('switches freezing and stats sampling off with a negative value, as Fn documents', () => {
    const a = compileConfig({ FN_FREEZE_IDLE_MSECS: '-1', FNTS_STATS_INTERVAL_MSECS: '-1' }, dir).agent;
    expect(a.freezeIdleMs).toBe(Infinity);
    expect(a.statsIntervalMs).toBe(Infinity);
  });

  it("gives a pure runner without FN_DB_URL an owner of its own (its gRPC port), not the default data directory's", () => {
    const full = compileConfig({}, dir).agent.owner;
    const runner = compileConfig({ FN_NODE_TYPE: 'pure-runner', ...LOOPBACK }, dir).agent.owner;
    expect(runner).not.toBe(full);
    expect(compileConfig({ FN_NODE_TYPE: 'pure-runner', ...LOOPBACK }, join(dir, 'elsewhere')).agent.owner).toBe(runner);
    expect(compileConfig({ FN_NODE_TYPE: 'pure-runner', FN_GRPC_PORT: '9192', ...LOOPBACK }, dir).agent.owner).not.toBe(runner);
    expect(compileConfig({ FN_NODE_TYPE: 'pure-runner', FN_DB_URL: 'sqlite3:///srv/r1/fn.db', ...LOOPBACK }, dir).agent.owner).toBe(
      compileConfig({ FN_DB_URL: 'sqlite3:///srv/r1/fn.db' }, dir).agent.owner,
    );
  });

  it("reads FN_IOFS_TMPFS as auto (the default), or Fn's boolean, and refuses anything else", () => {
    expect(compileConfig({}, dir).agent.iofsTmpfs).toBe('auto');
    expect(compileConfig({ FN_IOFS_TMPFS: 'AUTO' }, dir).agent.iofsTmpfs).toBe('auto');
    expect(compileConfig({ FN_IOFS_TMPFS: '1' }, dir).agent.iofsTmpfs).toBe('true');
    expect(compileConfig({ FN_IOFS_TMPFS: 'false' }, dir).agent.iofsTmpfs).toBe('false');
    expect(() => compileConfig({ FN_IOFS_TMPFS: 'maybe' }, dir)).toThrow(new ConfigError('FN_IOFS_TMPFS=maybe is not supported; use auto, true or false'));
  });

  it("puts the data directory at FNTS_DATA_DIR, else beside FN_DB_URL's SQLite file, and nowhere for an in-memory database", () => {
    expect(compileConfig({}, dir).dataDir).toBe(join(dir, 'data'));
    expect(compileConfig({ FN_DB_URL: 'sqlite3:///srv/fnts/fn.db' }, dir).dataDir).toBe('/srv/fnts');
    expect(compileConfig({ FN_DB_URL: 'sqlite://rel/db/fn.db' }, dir).dataDir).toBe(join(dir, 'rel', 'db'));
    expect(compileConfig({ FN_DB_URL: 'sqlite3://:memory:' }, dir).dataDir).toBeUndefined();
    expect(compileConfig({ FN_DB_URL: 'sqlite3://:memory:', FNTS_DATA_DIR: 'keys' }, dir).dataDir).toBe(join(dir, 'keys'));
    expect(compileConfig({ FNTS_DATA_DIR: '/var/lib/fnts' }, dir).dataDir).toBe('/var/lib/fnts');
  });

  it('reads FNTS_SECRET_KEY as 64 hex characters or base64 of 32 bytes, and never shows it', () => {
    const key = Buffer.from(Array.from({ length: 32 }, (_, i) => i * 7));
    expect(compileConfig({}, dir).secretKey).toBeUndefined();
    expect(compileConfig({ FNTS_SECRET_KEY: key.toString('hex') }, dir).secretKey!.bytes()).toEqual(key);
    expect(compileConfig({ FNTS_SECRET_KEY: key.toString('hex').toUpperCase() }, dir).secretKey!.bytes()).toEqual(key);
    expect(compileConfig({ FNTS_SECRET_KEY: key.toString('base64') }, dir).secretKey!.bytes()).toEqual(key);
    expect(compileConfig({ FNTS_SECRET_KEY: key.toString('base64url') }, dir).secretKey!.bytes()).toEqual(key);
    const config = compileConfig({ FNTS_SECRET_KEY: key.toString('hex') }, dir);
    expect(JSON.stringify(config)).not.toContain(key.toString('hex'));
    expect(JSON.stringify(config)).toContain('"secretKey":"[secret key]"');
    expect(`${config.secretKey}`).toBe('[secret key]');
  });

  it.each([
    ['too short', 'ab'.repeat(31)],
    ['too long', 'ab'.repeat(33)],
    ['not hex', 'zz'.repeat(32)],
    ['base64 of 31 bytes', Buffer.alloc(31, 1).toString('base64')],
    ['base64 of 33 bytes', Buffer.alloc(33, 1).toString('base64')],
    ['a passphrase', 'correct horse battery staple'],
  ])('refuses a FNTS_SECRET_KEY that is %s, without repeating it', (_what, value) => {
    let message = '';
    try {
      compileConfig({ FNTS_SECRET_KEY: value }, dir);
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      message = (err as Error).message;
    }
    expect(message).toMatch(/^FNTS_SECRET_KEY is not a key of 32 bytes \(its value is not shown\); give 64 hex characters or 32 bytes in base64 \(make one with: openssl rand -hex 32\)/);
    expect(message).not.toContain(value);
  });

  it('gives one data directory one owner identity, however its path is spelled', () => {
    const data = join(dir, 'data');
    mkdirSync(data);
    symlinkSync(data, join(dir, 'link'));
    const owner = (url: string, cwd = dir) => compileConfig({ FN_DB_URL: url }, cwd).agent.owner;
    const plain = owner(`sqlite3://${data}/fn.db`);
    expect(owner(`sqlite3://${data}/./fn.db`)).toBe(plain);
    expect(owner(`sqlite3://${dir}/other/../data/fn.db`)).toBe(plain);
    expect(owner(`sqlite3://${dir}/link/fn.db`)).toBe(plain);
    expect(owner('sqlite3://data/fn.db')).toBe(plain);
    expect(owner('sqlite3://fn.db', data)).toBe(plain);
    expect(owner(`sqlite3://${data}/other.db`)).not.toBe(plain);
  });

  it('takes FN_CONTAINER_LABEL_TAG as a label value, and refuses one Docker could not use', () => {
    expect(compileConfig({ FN_CONTAINER_LABEL_TAG: 'blue-1' }, dir).agent.containerTag).toBe('blue-1');
    expect(compileConfig({}, dir).agent.containerTag).toBeUndefined();
    expect(() => compileConfig({ FN_CONTAINER_LABEL_TAG: 'a b' }, dir)).toThrow(/FN_CONTAINER_LABEL_TAG=a b is not a valid label value/);
  });

  it("fences functions' network by default; reads FNTS_FUNCTION_NETWORK, its name and its blocked ranges, and refuses what the fence could not use", () => {
    const a = compileConfig({}, dir).agent;
    expect([a.functionNetwork, a.functionNetworkName, a.functionNetworkBlock]).toEqual(['isolated', 'fnts-functions', { defaults: true, cidrs: [] }]);
    const b = compileConfig({ FNTS_FUNCTION_NETWORK: 'OPEN', FNTS_FUNCTION_NETWORK_NAME: 'fns.blue', FNTS_FUNCTION_NETWORK_BLOCK: 'default, 10.0.0.0/8 192.168.7.9' }, dir).agent;
    expect([b.functionNetwork, b.functionNetworkName, b.functionNetworkBlock]).toEqual(['open', 'fns.blue', { defaults: true, cidrs: ['10.0.0.0/8', '192.168.7.9/32'] }]);
    // Without the word default, the list replaces it.
    expect(compileConfig({ FNTS_FUNCTION_NETWORK_BLOCK: '169.254.169.254' }, dir).agent.functionNetworkBlock).toEqual({ defaults: false, cidrs: ['169.254.169.254/32'] });
    expect(() => compileConfig({ FNTS_FUNCTION_NETWORK: 'closed' }, dir)).toThrow(new ConfigError('FNTS_FUNCTION_NETWORK=closed is not supported; use one of: isolated, open'));
    expect(() => compileConfig({ FNTS_FUNCTION_NETWORK_NAME: '-x' }, dir)).toThrow(/FNTS_FUNCTION_NETWORK_NAME=-x is not a network name; use up to 63 letters/);
    expect(() => compileConfig({ FNTS_FUNCTION_NETWORK_BLOCK: 'default,10.0.0.0/33' }, dir)).toThrow(
      /FNTS_FUNCTION_NETWORK_BLOCK has 10.0.0.0\/33, which is not an IPv4 range; list ranges such as 10.0.0.0\/8/,
    );
    expect(() => compileConfig({ FNTS_FUNCTION_NETWORK_BLOCK: 'fd00::/8' }, dir)).toThrow(/fd00::\/8, which is not an IPv4 range \(IPv6 ranges are not needed/);
    expect(() => compileConfig({ FNTS_FUNCTION_NETWORK_BLOCK: '300.1.1.1' }, dir)).toThrow(/300.1.1.1, which is not an IPv4 range/);
  });

  it('takes FN_MQ_URL as a Redis URL, and refuses another queue with what to use instead', () => {
    expect(compileConfig({}, dir).mqUrl).toBeUndefined();
    expect(compileConfig({ FN_MQ_URL: 'redis://queue:6379/2' }, dir).mqUrl).toBe('redis://queue:6379/2');
    expect(() => compileConfig({ FN_MQ_URL: 'bolt:///tmp/mq.db' }, dir)).toThrow(/FN_MQ_URL=bolt:\/\/\/tmp\/mq.db is not supported; use redis:\/\/host:6379\/0/);
    expect(() => compileConfig({ FN_MQ_URL: 'redis://u:secret@q:6379' }, dir)).not.toThrow();
  });

  it("takes the detached calls' limits and the queue's durability switch, with their defaults, and refuses values out of range", () => {
    expect(compileConfig({}, dir).detached).toEqual({ maxBodyBytes: 6 * 1024 * 1024, maxRedeliveries: 3, allowVolatile: false });
    expect(compileConfig({ FNTS_ASYNC_MAX_BODY_SIZE: '1024', FNTS_ASYNC_MAX_REDELIVERIES: '1', FNTS_MQ_ALLOW_VOLATILE: 'true' }, dir).detached).toEqual({
      maxBodyBytes: 1024,
      maxRedeliveries: 1,
      allowVolatile: true,
    });
    expect(() => compileConfig({ FNTS_ASYNC_MAX_BODY_SIZE: '0' }, dir)).toThrow(/FNTS_ASYNC_MAX_BODY_SIZE=0 is out of range; use a value from 1 to 1073741824/);
    expect(() => compileConfig({ FNTS_ASYNC_MAX_REDELIVERIES: '0' }, dir)).toThrow(/FNTS_ASYNC_MAX_REDELIVERIES=0 is out of range; use a value from 1 to 100/);
    expect(() => compileConfig({ FNTS_MQ_ALLOW_VOLATILE: 'maybe' }, dir)).toThrow(/FNTS_MQ_ALLOW_VOLATILE=maybe is not a boolean/);
  });

  it('takes FN_LOG_FORMAT as json (the default) or text, in any case, and refuses anything else saying what to use', () => {
    expect(compileConfig({}, dir).logFormat).toBe('json');
    expect(compileConfig({ FN_LOG_FORMAT: 'text' }, dir).logFormat).toBe('text');
    expect(compileConfig({ FN_LOG_FORMAT: ' JSON ' }, dir).logFormat).toBe('json');
    expect(() => compileConfig({ FN_LOG_FORMAT: 'logfmt' }, dir)).toThrow(new ConfigError('FN_LOG_FORMAT=logfmt is not supported; use one of: json, text'));
  });

  it('turns tracing on with the standard OTLP endpoint variables, and metrics off with FNTS_METRICS=off', () => {
    expect(compileConfig({}, dir).otlpTracesUrl).toBeUndefined();
    expect(compileConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' }, dir).otlpTracesUrl).toBe('http://collector:4318/v1/traces');
    expect(compileConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://b/traces' }, dir).otlpTracesUrl).toBe('https://b/traces');
    expect(() => compileConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4317' }, dir)).toThrow(/OTEL_EXPORTER_OTLP_ENDPOINT=collector:4317 is not an http\(s\) URL/);
    expect(compileConfig({}, dir).otelServiceName).toBe('fnts');
    expect(compileConfig({}, dir).otelSampler).toEqual({ kind: 'parentbased_always_on', ratio: 1 });
    expect(compileConfig({ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.1' }, dir).otelSampler).toEqual({ kind: 'parentbased_traceidratio', ratio: 0.1 });
    expect(() => compileConfig({ OTEL_TRACES_SAMPLER_ARG: '10' }, dir)).toThrow(/OTEL_TRACES_SAMPLER_ARG=10 is not a ratio between 0 and 1/);
    // OTLP over HTTP, protobuf by default as the standard says; JSON on request; gRPC refused with what to use instead.
    expect(compileConfig({}, dir).otlpProtocol).toBe('http/protobuf');
    expect(compileConfig({ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }, dir).otlpProtocol).toBe('http/json');
    expect(compileConfig({ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf' }, dir).otlpProtocol).toBe('http/protobuf');
    expect(() => compileConfig({ OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, dir)).toThrow(/OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported: .* use http\/protobuf/);
    expect(() => compileConfig({ OTEL_TRACES_SAMPLER: 'sometimes' }, dir)).toThrow(/OTEL_TRACES_SAMPLER/);
    expect(compileConfig({}, dir).metrics).toBe(true);
    expect(compileConfig({ FNTS_METRICS: 'off' }, dir).metrics).toBe(false);
  });

  it('reads FN_CALL_RETENTION as a Go duration, days or seconds, and refuses less than a second', () => {
    expect(compileConfig({}, dir).callRetentionMs).toBe(7 * 24 * 3600_000);
    expect(compileConfig({ FN_CALL_RETENTION: '1h30m' }, dir).callRetentionMs).toBe(5400_000);
    expect(compileConfig({ FN_CALL_RETENTION: '2d' }, dir).callRetentionMs).toBe(2 * 24 * 3600_000);
    expect(compileConfig({ FN_CALL_RETENTION: '60' }, dir).callRetentionMs).toBe(60_000);
    expect(() => compileConfig({ FN_CALL_RETENTION: '10ms' }, dir)).toThrow(/FN_CALL_RETENTION=10ms is not a duration of at least a second/);
    expect(() => compileConfig({ FN_CALL_RETENTION: 'forever' }, dir)).toThrow(/FN_CALL_RETENTION/);
  });

  describe('fleet roles', () => {
    it("reads an LB's API node, runners and placer with Fn's variables (wait by default)", () => {
      const f = compileConfig({ FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: 'http://api:8080/', FN_RUNNER_ADDRESSES: '10.0.0.5:9190, runner-2:9191' }, dir).fleet;
      expect(f.runnerApiUrl).toBe('http://api:8080');
      expect(f.runnerAddresses).toEqual(['10.0.0.5:9190', 'runner-2:9191']);
      expect(f.placer).toBe('wait');
      expect(compileConfig({ FN_PLACER: 'ch' }, dir).fleet.placer).toBe('ch');
      expect(compileConfig({ FN_NODE_TYPE: 'pure-runner', ...LOOPBACK }, dir).fleet.grpcPort).toBe(9190);
    });

    it("takes an LB's runners from a pool manager with Fn's FN_NPM_ADDRESS instead, polled and told every second by default", () => {
      const f = compileConfig({ FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: 'http://api:8080', FN_NPM_ADDRESS: 'fn-npm:9190' }, dir).fleet;
      expect(f.npmAddress).toBe('fn-npm:9190');
      expect(f.runnerAddresses).toEqual([]);
      expect([f.npmPollMs, f.npmAdvertiseMs]).toEqual([1000, 1000]);
      const fast = compileConfig({ FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: 'http://api:8080', FN_NPM_ADDRESS: '10.0.0.9:9190', FNTS_NPM_POLL_MSECS: '200', FNTS_NPM_ADVERTISE_MSECS: '250' }, dir).fleet;
      expect([fast.npmPollMs, fast.npmAdvertiseMs]).toEqual([200, 250]);
      expect(compileConfig({ FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: 'http://api:8080', FN_RUNNER_ADDRESSES: 'r:9190' }, dir).fleet.npmAddress).toBeUndefined();
    });

    it("reads the pool manager's settings, its gRPC port 9191 unless FN_GRPC_PORT says otherwise", () => {
      const p = compileConfig({ FN_NODE_TYPE: 'poolmanager', FNTS_CONTROL_PLANE: 'swarm', FNTS_MIN_RUNNERS: '0', FNTS_PREDICTOR: 'conservative', FNTS_GRPC_INSECURE: 'true' }, dir).pool;
      expect(p).toMatchObject({ grpcPort: 9191, controlPlane: 'swarm', minRunners: 0, maxRunners: 10, predictor: 'conservative', runnerImage: 'fnts/fnts:latest', runnerMemMb: 4096 });
      expect(compileConfig({ FN_NODE_TYPE: 'poolmanager', FN_GRPC_PORT: '7000', ...LOOPBACK }, dir).pool.grpcPort).toBe(7000);
      // In a pod: the cluster and service account client-node finds there.
      const k8s = compileConfig(
        { FN_NODE_TYPE: 'poolmanager', FNTS_CONTROL_PLANE: 'kubernetes', KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443', FNTS_K8S_NAMESPACE: 'fn', FNTS_GRPC_INSECURE: 'true' },
        dir,
      ).pool;
      expect(k8s.k8sApiUrl).toBeUndefined();
      expect(k8s.k8sNamespace).toBe('fn');
      expect(compileConfig({ FN_NODE_TYPE: 'poolmanager', FNTS_CONTROL_PLANE: 'kubernetes', FNTS_K8S_API_URL: 'https://k8s:6443/', FNTS_GRPC_INSECURE: 'true' }, dir).pool.k8sApiUrl).toBe(
        'https://k8s:6443',
      );
      // The engine of the docker and swarm planes: DOCKER_HOST, as docker's own client reads it.
      expect(p.engine).toEqual({ kind: 'unix', path: '/var/run/docker.sock' });
      const engine = (DOCKER_HOST: string, more: Record<string, string> = {}) => compileConfig({ FN_NODE_TYPE: 'poolmanager', DOCKER_HOST, ...LOOPBACK, ...more }, dir).pool.engine;
      expect(engine('unix:///run/user/1000/docker.sock')).toEqual({ kind: 'unix', path: '/run/user/1000/docker.sock' });
      expect(engine('tcp://10.0.0.5:2375')).toEqual({ kind: 'tcp', host: '10.0.0.5', port: 2375, tls: false });
      expect(engine('tcp://[fd00::5]', { DOCKER_TLS_VERIFY: '1' })).toEqual({ kind: 'tcp', host: 'fd00::5', port: 2375, tls: true });
      expect(engine('ssh://me@host')).toEqual({ kind: 'other', url: 'ssh://me@host' });
      // Runner ports: the engine's choice, or a range.
      expect(p.runnerPorts).toBeUndefined();
      expect(compileConfig({ FN_NODE_TYPE: 'poolmanager', FNTS_RUNNER_PORT_RANGE: '9200-9299', ...LOOPBACK }, dir).pool.runnerPorts).toEqual({ first: 9200, last: 9299 });
      // No cluster to be found: say the three ways to give one.
      expect(() => compileConfig({ FN_NODE_TYPE: 'poolmanager', FNTS_CONTROL_PLANE: 'kubernetes', KUBECONFIG: join(dir, 'none') }, dir)).toThrow(
        /needs a cluster: run the manager in a pod .*KUBECONFIG or ~\/.kube\/config\), or set FNTS_K8S_API_URL/,
      );
    });

    describe('plaintext gRPC where the network reaches it', () => {
      const pem = (name: string): string => {
        const path = join(dir, name);
        writeFileSync(path, '-----BEGIN CERTIFICATE-----\n');
        return path;
      };
      const TLS = { FNTS_GRPC_TLS_CERT: pem('node.pem'), FNTS_GRPC_TLS_KEY: pem('node.key'), FNTS_GRPC_TLS_CA: pem('ca.pem') };

      it.each(['pure-runner', 'poolmanager'])('refuses a %s on 0.0.0.0 without TLS, naming the three files, loopback and FNTS_GRPC_INSECURE=true', (role) => {
        for (const host of [undefined, '0.0.0.0', '::', '10.0.0.5']) {
          const env = { FN_NODE_TYPE: role, ...(host ? { FNTS_GRPC_LISTEN_HOST: host } : {}) };
          expect(() => compileConfig(env, dir)).toThrow(ConfigError);
          expect(() => compileConfig(env, dir)).toThrow(
            /in plaintext on .* \(FNTS_GRPC_LISTEN_HOST\).*set FNTS_GRPC_TLS_CERT, FNTS_GRPC_TLS_KEY and FNTS_GRPC_TLS_CA for mutual TLS \(fnts certs makes them\), or FNTS_GRPC_LISTEN_HOST=127.0.0.1 .*, or FNTS_GRPC_INSECURE=true/,
          );
        }
      });

      it.each(['pure-runner', 'poolmanager'])('starts a %s on loopback without TLS, anywhere with TLS, or anywhere with FNTS_GRPC_INSECURE=true', (role) => {
        expect(compileConfig({ FN_NODE_TYPE: role, FNTS_GRPC_LISTEN_HOST: '127.0.0.1' }, dir).fleet).toMatchObject({ grpcListenHost: '127.0.0.1', insecure: false, tls: undefined });
        expect(compileConfig({ FN_NODE_TYPE: role, FNTS_GRPC_LISTEN_HOST: '::1' }, dir).fleet.grpcListenHost).toBe('::1');
        const withTls = compileConfig({ FN_NODE_TYPE: role, ...TLS }, dir).fleet;
        expect(withTls.grpcListenHost).toBe('0.0.0.0');
        expect(withTls.tls).toEqual({ cert: TLS.FNTS_GRPC_TLS_CERT, key: TLS.FNTS_GRPC_TLS_KEY, ca: TLS.FNTS_GRPC_TLS_CA, runnerName: undefined });
        expect(compileConfig({ FN_NODE_TYPE: role, FNTS_GRPC_INSECURE: 'true' }, dir).fleet).toMatchObject({ grpcListenHost: '0.0.0.0', insecure: true });
      });

      it('leaves the HTTP port to FN_LISTEN_HOST, and other roles alone', () => {
        const c = compileConfig({ FN_NODE_TYPE: 'pure-runner', FN_LISTEN_HOST: '10.0.0.5', ...LOOPBACK }, dir);
        expect([c.listenHost, c.fleet.grpcListenHost]).toEqual(['10.0.0.5', '127.0.0.1']);
        expect(() => compileConfig({ FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: 'http://api:8080', FN_RUNNER_ADDRESSES: 'r:9190' }, dir)).not.toThrow();
        expect(() => compileConfig({}, dir)).not.toThrow();
      });

      it('refuses a pool manager whose plaintext runners the network would reach, saying what to set', () => {
        const manager = { FN_NODE_TYPE: 'poolmanager', ...LOOPBACK };
        // The docker plane publishes on 127.0.0.1 by default: this machine only.
        expect(() => compileConfig(manager, dir)).not.toThrow();
        expect(() => compileConfig({ ...manager, FNTS_RUNNER_PUBLISH_HOST: 'localhost' }, dir)).not.toThrow();
        expect(() => compileConfig({ ...manager, FNTS_RUNNER_PUBLISH_HOST: '10.0.0.5' }, dir)).toThrow(
          /FNTS_CONTROL_PLANE=docker would start runners serving the runner protocol in plaintext published on 10.0.0.5 \(FNTS_RUNNER_PUBLISH_HOST\).*set FNTS_GRPC_TLS_CERT, FNTS_GRPC_TLS_KEY and FNTS_GRPC_TLS_CA .*or FNTS_RUNNER_PUBLISH_HOST=127.0.0.1 .*or FNTS_GRPC_INSECURE=true/,
        );
        expect(() => compileConfig({ ...manager, FNTS_CONTROL_PLANE: 'swarm' }, dir)).toThrow(
          /FNTS_CONTROL_PLANE=swarm would start runners .* published on every swarm node's addresses.*FNTS_GRPC_INSECURE=true/,
        );
        expect(() => compileConfig({ ...manager, FNTS_CONTROL_PLANE: 'swarm', FNTS_SWARM_NETWORK: 'fnts' }, dir)).toThrow(/on the swarm network fnts/);
        expect(() => compileConfig({ ...manager, FNTS_CONTROL_PLANE: 'kubernetes', FNTS_K8S_API_URL: 'https://k8s:6443' }, dir)).toThrow(/at their pod addresses/);
        // Either way out: TLS (the runners get the files) or the operator's word.
        expect(() => compileConfig({ ...manager, FNTS_CONTROL_PLANE: 'swarm', ...TLS }, dir)).not.toThrow();
        expect(() => compileConfig({ ...manager, FNTS_CONTROL_PLANE: 'swarm', FNTS_GRPC_INSECURE: 'true' }, dir)).not.toThrow();
      });

      it('needs the Secret runner pods mount on the kubernetes plane with TLS, and takes a name to check runners against', () => {
        const k8s = { FN_NODE_TYPE: 'poolmanager', FNTS_CONTROL_PLANE: 'kubernetes', FNTS_K8S_API_URL: 'https://k8s:6443', ...TLS };
        expect(() => compileConfig(k8s, dir)).toThrow(/FNTS_CONTROL_PLANE=kubernetes with FNTS_GRPC_TLS_\* needs FNTS_K8S_TLS_SECRET: the Secret \(keys tls.crt, tls.key, ca.crt\)/);
        expect(compileConfig({ ...k8s, FNTS_K8S_TLS_SECRET: 'fnts-poolmanager-tls' }, dir).pool.k8sTlsSecret).toBe('fnts-poolmanager-tls');
        expect(() => compileConfig({ ...k8s, FNTS_K8S_TLS_SECRET: 'Not_A_Name' }, dir)).toThrow(/FNTS_K8S_TLS_SECRET=Not_A_Name is not a Secret's name/);
        expect(compileConfig({ ...k8s, FNTS_K8S_TLS_SECRET: 's', FNTS_GRPC_TLS_RUNNER_NAME: 'fnts-poolmanager' }, dir).fleet.tls?.runnerName).toBe('fnts-poolmanager');
        expect(() => compileConfig({ FNTS_GRPC_TLS_RUNNER_NAME: 'poolmanager' }, dir)).toThrow(/FNTS_GRPC_TLS_RUNNER_NAME checks runners under mutual TLS: set FNTS_GRPC_TLS_CERT/);
        expect(() => compileConfig({ ...TLS, FNTS_GRPC_TLS_RUNNER_NAME: 'a b' }, dir)).toThrow(/FNTS_GRPC_TLS_RUNNER_NAME=a b is not a DNS name or an IP address/);
      });

      it('keeps TLS files by their absolute paths (a pool manager hands them to its runners by path)', () => {
        const rel = { FNTS_GRPC_TLS_CERT: 'node.pem', FNTS_GRPC_TLS_KEY: 'node.key', FNTS_GRPC_TLS_CA: 'ca.pem' };
        expect(compileConfig(rel, dir).fleet.tls).toMatchObject({ cert: TLS.FNTS_GRPC_TLS_CERT, key: TLS.FNTS_GRPC_TLS_KEY, ca: TLS.FNTS_GRPC_TLS_CA });
      });
    });

    it.each([
      [{ FN_NODE_TYPE: 'lb', FN_RUNNER_ADDRESSES: 'r:9190' }, 'FN_NODE_TYPE=lb needs FN_RUNNER_API_URL'],
      [{ FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: 'http://api:8080' }, 'or FN_NPM_ADDRESS, a pool manager that lists them'],
      [
        { FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: 'http://api:8080', FN_RUNNER_ADDRESSES: 'r:9190', FN_NPM_ADDRESS: 'npm:9190' },
        'FN_RUNNER_ADDRESSES and FN_NPM_ADDRESS both set: an LB takes its runners from one of them',
      ],
      [{ FN_NPM_ADDRESS: 'http://npm:9190' }, 'FN_NPM_ADDRESS=http://npm:9190 is not host:port'],
      [{ FNTS_NPM_ADVERTISE_MSECS: '10' }, 'FNTS_NPM_ADVERTISE_MSECS=10 is out of range; use a value from 50 to 600000 milliseconds'],
      [{ FNTS_NPM_POLL_MSECS: 'often' }, 'FNTS_NPM_POLL_MSECS=often is not a whole number of milliseconds'],
      [{ FN_NODE_TYPE: 'lb', FN_RUNNER_API_URL: 'http://api:8080' }, 'FN_NODE_TYPE=lb needs FN_RUNNER_ADDRESSES'],
      [{ FN_RUNNER_ADDRESSES: 'r:9190,nope' }, 'FN_RUNNER_ADDRESSES has nope, which is not host:port'],
      [{ FN_RUNNER_API_URL: 'api:8080' }, 'FN_RUNNER_API_URL=api:8080 is not an http(s) URL'],
      [{ FN_PLACER: 'random' }, 'FN_PLACER=random is not supported; use one of: naive, ch, wait'],
      [{ FNTS_GRPC_TLS_CERT: '/etc/hostname' }, 'go together: set all three'],
      [{ FNTS_GRPC_TLS_CERT: '/no/such/cert.pem' }, 'FNTS_GRPC_TLS_CERT=/no/such/cert.pem cannot be read'],
      [{ FN_NODE_TYPE: 'runner' }, 'FN_NODE_TYPE=runner is not available in this fnts release'],
      [{ FN_NODE_TYPE: 'poolmanager', FNTS_CONTROL_PLANE: 'kubernetes', KUBECONFIG: '/nonexistent/kubeconfig' }, 'FNTS_CONTROL_PLANE=kubernetes needs a cluster'],
      [{ FNTS_CONTROL_PLANE: 'nomad' }, 'FNTS_CONTROL_PLANE=nomad is not supported; use one of: docker, swarm, kubernetes'],
      [{ FNTS_MIN_RUNNERS: '5', FNTS_MAX_RUNNERS: '2' }, 'FNTS_MIN_RUNNERS=5 is more than FNTS_MAX_RUNNERS=2'],
      [{ FNTS_POOL_IOFS_PATH: '/tmp/a/very/long/folder/for/the/runners/sockets' }, "is too long for the runners' unix sockets"],
      [{ FNTS_PREDICTOR: 'oracle' }, 'FNTS_PREDICTOR=oracle is not supported; use one of: conservative, forecast'],
      [{ FNTS_RUNNER_PORT_RANGE: '9299-9200' }, 'FNTS_RUNNER_PORT_RANGE=9299-9200 is not a range of ports; use first-last, e.g. 9200-9299'],
      [{ FNTS_RUNNER_PORT_RANGE: '9200' }, 'FNTS_RUNNER_PORT_RANGE=9200 is not a range of ports'],
      [{ FNTS_RUNNER_PORT_RANGE: '0-10' }, 'FNTS_RUNNER_PORT_RANGE=0-10 is not a range of ports'],
      [{ FN_NODE_TYPE: 'poolmanager', FNTS_RUNNER_PORT_RANGE: '9200-9204' }, 'FNTS_RUNNER_PORT_RANGE=9200-9204 holds 5 port(s), fewer than FNTS_MAX_RUNNERS=10; widen it or lower FNTS_MAX_RUNNERS'],
      [{ FN_NODE_TYPE: 'poolmanager', FNTS_CONTROL_PLANE: 'swarm', FNTS_RUNNER_PORT_RANGE: '9200-9299' }, 'FNTS_RUNNER_PORT_RANGE applies to the docker control plane only'],
      [{ FN_IOFS_PATH: `/tmp/${'x'.repeat(56)}` }, 'is too long for unix sockets (at most 60 bytes)'],
    ])('refuses %o, saying what to do', (env, message) => {
      expect(() => compileConfig(env, dir)).toThrow(message);
    });
  });
});

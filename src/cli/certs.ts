/**
 * `fnts certs`: the certificates a fleet's mutual TLS needs (FNTS_GRPC_TLS_*),
 * made without openssl: a small CA, and for each named node a key and a
 * certificate the CA signs, good for both ends of a connection (server and
 * client auth), since each node shows the same certificate whether it
 * listens (a runner, a pool manager) or dials (an LB, a manager's probes).
 *
 *   <out>/ca.crt          the CA's certificate: every node's FNTS_GRPC_TLS_CA
 *   <out>/ca.key          the CA's key (0600): only to sign more nodes later
 *   <out>/<name>.crt      a node's certificate: CN and a DNS name <name>, plus --hosts
 *   <out>/<name>.key      its key (0600)
 *
 * A folder that already holds ca.crt and ca.key signs with that CA, so
 * nodes can be added later; a node's files are never overwritten.
 *
 * Keys are ECDSA P-256, made by Node's WebCrypto; the certificates are
 * written by @peculiar/x509 (which needs the reflect-metadata polyfill: this
 * module is loaded only when the command runs, never by a server).
 */
import 'reflect-metadata';
import { randomBytes, webcrypto } from 'node:crypto';
import { chmod, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import { join, resolve } from 'node:path';
import * as x509 from '@peculiar/x509';

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;

// Node's WebCrypto is the standard's Crypto; the library names the DOM's type, which this build does not load.
x509.cryptoProvider.set(webcrypto as unknown as ReturnType<typeof x509.cryptoProvider.get>);

/** Bad input to the command: the message says what to give instead. */
export class CertsError extends Error {
  override readonly name = 'CertsError';
}

export interface CertsOptions {
  /** The folder the files go to (made if missing). */
  readonly out: string;
  /** The nodes to make a certificate for: each becomes its CN and a DNS name in it. */
  readonly names: readonly string[];
  /** More DNS names or IP addresses every node's certificate carries (the addresses nodes are dialled at). */
  readonly hosts?: readonly string[];
  /** How long the nodes' certificates last (days; default 825). */
  readonly days?: number;
  /** How long a new CA lasts (days; default 3650). */
  readonly caDays?: number;
  /** Told one line per file written, and what to set. */
  readonly say?: (line: string) => void;
}

export interface CertsResult {
  readonly ca: string;
  /** Each node's files, by name. */
  readonly nodes: ReadonlyMap<string, { readonly cert: string; readonly key: string }>;
}

const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const DAY_MS = 24 * 3600_000;
/** A DNS name: labels of letters, digits and inner dashes. */
const DNS_NAME = /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

function checkNames(names: readonly string[], hosts: readonly string[]): void {
  if (names.length === 0) throw new CertsError('--names lists no node; name each node that needs a certificate, e.g. --names lb,runner-1,runner-2');
  const seen = new Set<string>();
  for (const name of names) {
    if (!DNS_NAME.test(name) || isIP(name) !== 0) {
      throw new CertsError(`--names has '${name}', which is not a DNS name (it names the node's files and goes in its certificate); use letters, digits, '-' and '.', e.g. runner-1`);
    }
    if (seen.has(name)) throw new CertsError(`--names has '${name}' twice; name each node once`);
    seen.add(name);
  }
  for (const host of hosts) {
    if (isIP(host) === 0 && !DNS_NAME.test(host))
      throw new CertsError(`--hosts has '${host}', which is neither a DNS name nor an IP address; list the names and addresses nodes are dialled at, e.g. runner-1.internal,10.0.0.5`);
  }
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/** A random positive serial number (RFC 5280: at most 20 octets), as hex. */
function serial(): string {
  const bytes = randomBytes(16);
  bytes[0]! &= 0x7f;
  return bytes.toString('hex');
}

function pem(label: string, der: ArrayBuffer): string {
  const b64 = Buffer.from(der).toString('base64');
  return `-----BEGIN ${label}-----\n${b64.replace(/(.{64})/g, '$1\n').replace(/\n$/, '')}\n-----END ${label}-----\n`;
}

/** Writes `text` to `path` with `mode` (a key 0600), and says so. */
async function write(path: string, text: string, mode: number, what: string, say: (line: string) => void): Promise<void> {
  await writeFile(path, text, { mode, flag: 'wx' });
  // The umask may have narrowed a certificate's mode; a key's is never wider than asked.
  await chmod(path, mode);
  say(`wrote ${path} (${what})`);
}

interface Ca {
  readonly cert: x509.X509Certificate;
  readonly key: CryptoKey;
}

async function loadCa(certPath: string, keyPath: string): Promise<Ca> {
  try {
    const cert = new x509.X509Certificate(await readFile(certPath, 'utf8'));
    const der = x509.PemConverter.decode(await readFile(keyPath, 'utf8'))[0]!;
    const key = await webcrypto.subtle.importKey('pkcs8', der, ALGORITHM, false, ['sign']);
    return { cert, key };
  } catch (err) {
    throw new CertsError(`the CA in ${certPath} and ${keyPath} cannot be used (${(err as Error).message}); give an empty folder to make a new CA, or the folder of a CA fnts certs made`);
  }
}

async function makeCa(out: string, days: number, say: (line: string) => void): Promise<Ca> {
  const keys = (await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify'])) as CryptoKeyPair;
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: `CN=fnts fleet CA ${randomBytes(4).toString('hex')}`,
    notBefore: new Date(now - 5 * 60_000),
    notAfter: new Date(now + days * DAY_MS),
    keys,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  await write(join(out, 'ca.key'), pem('PRIVATE KEY', await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)), 0o600, "the CA's key: keep it private, it signs nodes", say);
  await write(join(out, 'ca.crt'), cert.toString('pem') + '\n', 0o644, "the CA's certificate: every node's FNTS_GRPC_TLS_CA", say);
  return { cert, key: keys.privateKey };
}

async function makeNode(ca: Ca, out: string, name: string, hosts: readonly string[], days: number, say: (line: string) => void): Promise<{ cert: string; key: string }> {
  const keys = (await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify'])) as CryptoKeyPair;
  const sans = [name, ...hosts.filter((h) => h !== name)].map((h) => (isIP(h) === 0 ? { type: 'dns' as const, value: h } : { type: 'ip' as const, value: h }));
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(),
    subject: `CN=${name}`,
    issuer: ca.cert.subject,
    notBefore: new Date(now - 5 * 60_000),
    notAfter: new Date(Math.min(now + days * DAY_MS, ca.cert.notAfter.getTime())),
    publicKey: keys.publicKey,
    signingKey: ca.key,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      // Both ways: a node shows this certificate when it serves and when it dials.
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth]),
      new x509.SubjectAlternativeNameExtension(sans),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      await x509.AuthorityKeyIdentifierExtension.create(ca.cert),
    ],
  });
  const keyPath = join(out, `${name}.key`);
  const certPath = join(out, `${name}.crt`);
  await write(keyPath, pem('PRIVATE KEY', await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)), 0o600, `${name}'s key`, say);
  await write(certPath, cert.toString('pem') + '\n', 0o644, `${name}'s certificate, for ${sans.map((s) => s.value).join(', ')}`, say);
  return { cert: certPath, key: keyPath };
}

/** Makes (or reuses) the CA in `out` and a certificate and key for each name; says what to set on each node. */
export async function makeCerts(o: CertsOptions): Promise<CertsResult> {
  const say = o.say ?? ((line: string) => void process.stdout.write(`${line}\n`));
  const hosts = o.hosts ?? [];
  const days = o.days ?? 825;
  const caDays = o.caDays ?? 3650;
  for (const [flag, n] of [
    ['--days', days],
    ['--ca-days', caDays],
  ] as const) {
    if (!Number.isInteger(n) || n < 1 || n > 36500) throw new CertsError(`${flag}=${n} is not a number of days from 1 to 36500`);
  }
  checkNames(o.names, hosts);
  const out = resolve(o.out);
  await mkdir(out, { recursive: true, mode: 0o700 });
  const caCert = join(out, 'ca.crt');
  const caKey = join(out, 'ca.key');
  const [hasCert, hasKey] = await Promise.all([exists(caCert), exists(caKey)]);
  if (hasCert !== hasKey) throw new CertsError(`${out} holds ${hasCert ? 'ca.crt without ca.key' : 'ca.key without ca.crt'}; give an empty folder, or one with both`);
  for (const name of o.names) {
    for (const file of [`${name}.crt`, `${name}.key`]) {
      if (await exists(join(out, file))) throw new CertsError(`${join(out, file)} exists already; remove ${name}'s files to make them again, or give another --out`);
    }
  }
  let ca: Ca;
  if (hasCert) {
    ca = await loadCa(caCert, caKey);
    say(`signing with the CA in ${caCert}`);
  } else {
    ca = await makeCa(out, caDays, say);
  }
  const nodes = new Map<string, { cert: string; key: string }>();
  for (const name of o.names) nodes.set(name, await makeNode(ca, out, name, hosts, days, say));
  say('');
  say('Set on each node its own files (every node trusts the same CA):');
  for (const [name, files] of nodes) say(`  ${name}: FNTS_GRPC_TLS_CERT=${files.cert} FNTS_GRPC_TLS_KEY=${files.key} FNTS_GRPC_TLS_CA=${caCert}`);
  say(`A node is dialled at a name or address its certificate must carry (${[...new Set(['<its name>', ...hosts])].join(', ')}); runners whose addresses are not known`);
  say("in advance (a pool manager's on swarm or kubernetes) are checked against FNTS_GRPC_TLS_RUNNER_NAME on the LBs and the manager instead.");
  return { ca: caCert, nodes };
}

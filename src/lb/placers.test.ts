import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { Placer, RunnerView } from './placer.js';
import { PLACER_NAMES } from './placer.js';
import { ConsistentHashPlacer, createPlacer, jumpHash, NaivePlacer, WaitPlacer } from './placers.js';
import { seededRandom } from '../../test/support/random.js';

interface TestRunner {
  address: string;
  up: boolean;
  inFlight: number;
}

function pool(n: number): TestRunner[] {
  return Array.from({ length: n }, (_, i) => ({ address: `10.0.0.${i}:9190`, up: true, inFlight: 0 }));
}

function addresses(round: readonly RunnerView[]): string[] {
  return round.map((r) => r.address);
}

/** Fn ids shaped like Fn's (ULIDs). */
const FN_IDS = Array.from({ length: 64 }, (_, i) => `01J${createHash('md5').update(String(i)).digest('hex').slice(0, 23).toUpperCase()}`);

/** The home runner index ch gives `fnId` with all of `runners` up. */
function chHome(fnId: string, runners: readonly RunnerView[]): number {
  const first = new ConsistentHashPlacer().order(fnId, runners)[0];
  return runners.findIndex((r) => r === first);
}

describe('jumpHash', () => {
  /** The published algorithm, verbatim, in BigInt. */
  function reference(key: bigint, buckets: number): number {
    let b = -1n;
    let j = 0n;
    while (j < BigInt(buckets)) {
      b = j;
      key = (key * 2862933555777941757n + 1n) & 0xffff_ffff_ffff_ffffn;
      j = BigInt(Math.floor(Number(b + 1n) * (2 ** 31 / Number((key >> 33n) + 1n))));
    }
    return Number(b);
  }

  it('matches Lamping & Veach for random keys and bucket counts', () => {
    const random = seededRandom(7);
    const word = (): number => Math.floor(random() * 2 ** 32) >>> 0;
    const edges = [0, 1, 0xffffffff];
    for (let t = 0; t < 2000; t++) {
      const hi = t < 9 ? edges[t % 3]! : word();
      const lo = t < 9 ? edges[Math.floor(t / 3)]! : word();
      const buckets = 1 + Math.floor(random() * (t % 2 === 0 ? 10 : 5000));
      expect(jumpHash(hi, lo, buckets)).toBe(reference((BigInt(hi) << 32n) | BigInt(lo), buckets));
    }
  });

  it('returns -1 for no buckets', () => {
    expect(jumpHash(1, 2, 0)).toBe(-1);
  });
});

describe('NaivePlacer', () => {
  it('starts successive calls on successive runners and lists every runner each round', () => {
    const runners = pool(4);
    const placer = new NaivePlacer({ random: () => 0 });
    const firsts: string[] = [];
    for (let call = 0; call < 12; call++) {
      const round = placer.order('fn', runners);
      const start = call % 4;
      expect(addresses(round)).toEqual([0, 1, 2, 3].map((k) => runners[(start + k) % 4]!.address));
      firsts.push(round[0]!.address);
    }
    for (const r of runners) expect(firsts.filter((a) => a === r.address)).toHaveLength(3);
  });

  it('starts at a random offset, so LBs do not all hit the same runner first', () => {
    const runners = pool(4);
    const seeded = (): NaivePlacer => new NaivePlacer({ random: () => 0.37 });
    expect(seeded().order('fn', runners)[0]).toBe(seeded().order('fn', runners)[0]);
    const firsts = new Set<string>();
    for (let lb = 0; lb < 40; lb++) firsts.add(new NaivePlacer().order('fn', runners)[0]!.address);
    expect(firsts.size).toBeGreaterThan(1);
  });

  it('spreads evenly over the runners that are up and never returns a down one', () => {
    const runners = pool(5);
    runners[1]!.up = false;
    runners[3]!.up = false;
    const placer = new NaivePlacer({ random: () => 0.3 });
    const counts = new Map<string, number>();
    for (let call = 0; call < 30; call++) {
      const round = placer.order('fn', runners);
      expect(addresses(round).sort()).toEqual([runners[0]!, runners[2]!, runners[4]!].map((r) => r.address).sort());
      counts.set(round[0]!.address, (counts.get(round[0]!.address) ?? 0) + 1);
    }
    expect([...counts.values()]).toEqual([10, 10, 10]);
  });
});

describe('ConsistentHashPlacer', () => {
  it('sends a fn to the same runner every time, on every LB', () => {
    const runners = pool(5);
    const a = new ConsistentHashPlacer();
    const b = new ConsistentHashPlacer();
    for (const fnId of FN_IDS.slice(0, 10)) {
      const home = a.order(fnId, runners)[0];
      for (let call = 0; call < 20; call++) expect(a.order(fnId, runners)[0]).toBe(home);
      expect(b.order(fnId, runners)[0]).toBe(home);
    }
  });

  it('spreads different fns over the runners', () => {
    const runners = pool(3);
    const homes = new Set(FN_IDS.slice(0, 12).map((fnId) => chHome(fnId, runners)));
    expect([...homes].sort()).toEqual([0, 1, 2]);
  });

  it('goes around the ring from the home, skipping runners that are down', () => {
    const runners = pool(5);
    const placer = new ConsistentHashPlacer();
    for (const fnId of FN_IDS.slice(0, 10)) {
      const home = chHome(fnId, runners);
      runners[(home + 2) % 5]!.up = false;
      expect(placer.order(fnId, runners)).toEqual([0, 1, 3, 4].map((k) => runners[(home + k) % 5]));
      runners[(home + 2) % 5]!.up = true;
    }
  });

  it('moves only the fns whose home went down, to the next runner', () => {
    const runners = pool(4);
    const placer = new ConsistentHashPlacer();
    const before = FN_IDS.map((fnId) => chHome(fnId, runners));
    for (let down = 0; down < 4; down++) {
      runners[down]!.up = false;
      FN_IDS.forEach((fnId, f) => {
        const expected = before[f] === down ? (down + 1) % 4 : before[f]!;
        expect(placer.order(fnId, runners)[0]).toBe(runners[expected]);
      });
      runners[down]!.up = true;
    }
  });

  it('moves only the fns of a runner removed from the end of the list, and only fns to one added there', () => {
    const four = pool(4);
    const three = four.slice(0, 3);
    const five = [...four, { address: '10.0.0.9:9190', up: true, inFlight: 0 }];
    const placer = new ConsistentHashPlacer();
    let moved = 0;
    for (const fnId of FN_IDS) {
      const home = placer.order(fnId, four)[0]!;
      if (home !== four[3]) expect(placer.order(fnId, three)[0]).toBe(home);
      const grown = placer.order(fnId, five)[0]!;
      if (grown !== home) {
        expect(grown).toBe(five[4]);
        moved++;
      }
    }
    // About a fifth of the fns move to the new runner; none move between old ones.
    expect(moved).toBeGreaterThan(0);
    expect(moved).toBeLessThan(FN_IDS.length / 2);
  });
});

describe('WaitPlacer', () => {
  const fnId = FN_IDS[0]!;

  function setup(n = 3, options: ConstructorParameters<typeof WaitPlacer>[0] = {}) {
    const clock = { t: 0 };
    const runners = pool(n);
    const placer = new WaitPlacer({ now: () => clock.t, ...options });
    const home = chHome(fnId, runners);
    const at = (k: number): TestRunner => runners[(home + k) % n]!;
    return { clock, runners, placer, home: at(0), at };
  }

  it('keeps a fn on its consistent-hash home while its waits are low', () => {
    const { runners, placer, home, at } = setup();
    for (let call = 0; call < 50; call++) {
      const round = placer.order(fnId, runners);
      expect(round).toEqual([home, at(1), at(2)]);
      placer.report(fnId, round[0]!, { kind: 'ran', waitMs: 20 + (call % 7) * 10 });
    }
  });

  it('does not count the container start of a cold call as waiting', () => {
    const { runners, placer, home } = setup();
    placer.report(fnId, home, { kind: 'ran', waitMs: 900, startMs: 850 });
    expect(placer.order(fnId, runners)[0]).toBe(home);
  });

  it('moves new calls to the next runner once the home reports waits above the cold-start cost, and back when they drop', () => {
    const { runners, placer, home, at } = setup();
    placer.report(fnId, home, { kind: 'ran', waitMs: 2000 });
    // The home goes to the back of the round: it is still tried if the others refuse.
    expect(placer.order(fnId, runners)).toEqual([at(1), at(2), home]);
    // Calls that reach the home again and wait little there bring it back.
    let calls = 0;
    while (placer.order(fnId, runners)[0] !== home) {
      placer.report(fnId, home, { kind: 'ran', waitMs: 0 });
      calls++;
      expect(calls).toBeLessThan(20);
    }
    // An average of recent calls: more than one calm call is needed after a bad one.
    expect(calls).toBeGreaterThan(1);
  });

  it('weighs waits against the cold-start cost it learns from reports', () => {
    const { runners, placer, home, at } = setup(3, { coldStartMs: 500 });
    placer.report(fnId, home, { kind: 'ran', waitMs: 1000 });
    expect(placer.order(fnId, runners)[0]).toBe(at(1));
    // Containers turn out to take about 3 s to start: waiting 1 s at home is the better deal.
    for (let k = 0; k < 30; k++) placer.report(FN_IDS[1]!, at(2), { kind: 'ran', waitMs: 3000, startMs: 3000 });
    expect(placer.coldStartMs).toBeGreaterThan(2500);
    expect(placer.order(fnId, runners)[0]).toBe(home);
  });

  it('does not put first a home whose inFlight is far above the mean, but still lists it', () => {
    const { runners, placer, home, at } = setup(4);
    home.inFlight = 10;
    at(1).inFlight = 1;
    expect(placer.order(fnId, runners)).toEqual([at(1), at(2), at(3), home]);
    // Within (1 + epsilon) of the mean, the home keeps its fn.
    home.inFlight = 3;
    at(1).inFlight = 2;
    at(2).inFlight = 2;
    at(3).inFlight = 2;
    expect(placer.order(fnId, runners)[0]).toBe(home);
    // With no other load, one call in flight never counts as overload.
    for (const r of runners) r.inFlight = 0;
    home.inFlight = 1;
    expect(placer.order(fnId, runners)[0]).toBe(home);
  });

  it('prefers another runner after a refusal or a failure, and returns home as time passes', () => {
    for (const kind of ['refused', 'failed'] as const) {
      const { clock, runners, placer, home, at } = setup();
      placer.report(fnId, home, { kind });
      expect(placer.order(fnId, runners)).toEqual([at(1), at(2), home]);
      // Nothing is reported from a runner that gets no calls; the penalty fades with time.
      clock.t += 1000;
      expect(placer.order(fnId, runners)[0]).toBe(at(1));
      clock.t += 30_000;
      expect(placer.order(fnId, runners)[0]).toBe(home);
    }
  });

  it('keeps a fn at a home that refused it while its calls ran there a moment ago (its containers are busy, not gone), and moves it once they are not recent', () => {
    const { clock, runners, placer, home, at } = setup();
    placer.report(fnId, home, { kind: 'ran', waitMs: 0 });
    clock.t += 500;
    placer.report(fnId, home, { kind: 'refused' });
    expect(placer.order(fnId, runners)[0]).toBe(home);
    // Nothing ran there for a while: a refusal now says the fn has no container there.
    clock.t += 5000;
    placer.report(fnId, home, { kind: 'refused' });
    expect(placer.order(fnId, runners)).toEqual([at(1), at(2), home]);
    // A failure (the runner unreachable) always counts.
    const other = setup();
    other.placer.report(fnId, other.home, { kind: 'ran', waitMs: 0 });
    other.placer.report(fnId, other.home, { kind: 'failed' });
    expect(other.placer.order(fnId, other.runners)[0]).toBe(other.at(1));
  });

  it('passes over every runner with long waits, trying the calm ones first and then the soonest expected wait', () => {
    const { runners, placer, home, at } = setup(4);
    placer.report(fnId, home, { kind: 'ran', waitMs: 5000 });
    placer.report(fnId, at(1), { kind: 'refused' });
    placer.report(fnId, at(3), { kind: 'ran', waitMs: 4000 });
    expect(placer.order(fnId, runners)).toEqual([at(2), at(1), at(3), home]);
  });

  it('offers a call every runner refused first where the runners said room comes soonest', () => {
    const { runners, placer, home, at } = setup(3, { coldStartMs: 300 });
    placer.report(fnId, home, { kind: 'refused', roomMs: 900 });
    placer.report(fnId, at(1), { kind: 'refused', roomMs: 150 });
    placer.report(fnId, at(2), { kind: 'refused' });
    // at(1): 150 + 300; at(2): unknown, 1.1 x 300; the home: 900 + 300.
    expect(placer.order(fnId, runners)).toEqual([at(2), at(1), home]);
    placer.report(fnId, at(2), { kind: 'refused', roomMs: 1 });
    // Room now (then a start): the soonest.
    expect(placer.order(fnId, runners)).toEqual([at(2), at(1), home]);
    placer.report(fnId, at(2), { kind: 'refused', roomMs: 2000 });
    expect(placer.order(fnId, runners)).toEqual([at(1), home, at(2)]);
  });

  it('forgets pairs not reported for 10 minutes and keeps at most maxEntries', () => {
    const { clock, runners, placer, home } = setup(3, { decayHalfLifeMs: Infinity, maxEntries: 500 });
    placer.report(fnId, home, { kind: 'ran', waitMs: 5000 });
    clock.t += 9 * 60_000;
    expect(placer.order(fnId, runners)[0]).not.toBe(home);
    clock.t += 2 * 60_000;
    expect(placer.order(fnId, runners)[0]).toBe(home);
    // A sweep drops it for good after enough reports.
    for (let k = 0; k < 1100; k++) placer.report(FN_IDS[1 + (k % 3)]!, runners[Math.floor(k / 3) % 3]!, { kind: 'ran', waitMs: 1 });
    expect(placer.size).toBe(9);
    // Many fns: the table stays bounded, and the fn reported last is kept.
    for (let k = 0; k < 2000; k++) placer.report(`fn-${k}`, runners[k % 3]!, { kind: 'ran', waitMs: 1 });
    placer.report(fnId, home, { kind: 'ran', waitMs: 5000 });
    expect(placer.size).toBeLessThanOrEqual(500);
    expect(placer.order(fnId, runners)[0]).not.toBe(home);
  });

  it('ignores reports with nonsense numbers instead of throwing', () => {
    const { runners, placer, home } = setup();
    expect(() => placer.report(fnId, home, { kind: 'ran', waitMs: Number.NaN, startMs: -5 })).not.toThrow();
    expect(placer.coldStartMs).toBe(500);
    expect(placer.order(fnId, runners)[0]).toBe(home);
  });

  it('rejects options out of range', () => {
    expect(() => new WaitPlacer({ alpha: 0 })).toThrow(RangeError);
    expect(() => new WaitPlacer({ epsilon: -1 })).toThrow(RangeError);
    expect(() => new WaitPlacer({ coldStartMs: Number.NaN })).toThrow(RangeError);
  });
});

describe('every placer', () => {
  it('is created by its FN_PLACER name', () => {
    for (const name of PLACER_NAMES) expect(createPlacer(name).name).toBe(name);
    expect(createPlacer('wait')).toBeInstanceOf(WaitPlacer);
  });

  it('returns each up runner exactly once and never a down one, whatever it was told', () => {
    const random = seededRandom(42);
    for (const name of PLACER_NAMES) {
      let t = 0;
      const placer = createPlacer(name, { now: () => t, random });
      for (let trial = 0; trial < 500; trial++) {
        t += random() * 5000;
        const runners = Array.from({ length: Math.floor(random() * 9) }, (_, i) => ({
          address: `r${i}`,
          up: random() < 0.7,
          inFlight: Math.floor(random() * random() * 20),
        }));
        const fnId = FN_IDS[Math.floor(random() * 8)]!;
        const round = placer.order(fnId, runners);
        expect(addresses(round).sort()).toEqual(addresses(runners.filter((r) => r.up)).sort());
        for (const r of round) {
          const x = random();
          placer.report(fnId, r, x < 0.2 ? { kind: 'refused' } : x < 0.3 ? { kind: 'failed' } : { kind: 'ran', waitMs: random() * 3000 });
          if (x < 0.6) break;
        }
      }
    }
  });
});

describe('simulation: 3 runners, 12 fns of Zipf-like popularity', () => {
  /**
   * Each tick, calls arrive and last a few ticks. A runner keeps containers
   * per fn: a call takes an idle one (no wait) or starts one (it waits the
   * start). Containers never die, so a start is a (runner, fn) container the
   * placement made necessary. Every runner accepts every call.
   */
  function simulate(placer: Placer): { starts: number; pairs: number } {
    const random = seededRandom(2024);
    const fns = FN_IDS.slice(0, 12);
    const weights = fns.map((_, k) => 1 / (k + 1));
    const total = weights.reduce((a, b) => a + b, 0);
    const pick = (): string => {
      let x = random() * total;
      for (let k = 0; k < fns.length; k++) if ((x -= weights[k]!) < 0) return fns[k]!;
      return fns[fns.length - 1]!;
    };
    const runners = pool(3);
    const idle = runners.map(() => new Map<string, number>());
    const running: { ends: number; runner: number; fnId: string }[] = [];
    const pairs = new Set<string>();
    let starts = 0;
    for (let tick = 0; tick < 2000; tick++) {
      for (let k = running.length - 1; k >= 0; k--) {
        const call = running[k]!;
        if (call.ends > tick) continue;
        running.splice(k, 1);
        runners[call.runner]!.inFlight--;
        idle[call.runner]!.set(call.fnId, (idle[call.runner]!.get(call.fnId) ?? 0) + 1);
      }
      for (let arrivals = 0; arrivals < 2; arrivals++) {
        const fnId = pick();
        const target = placer.order(fnId, runners)[0]!;
        const r = runners.indexOf(target);
        const free = idle[r]!.get(fnId) ?? 0;
        if (free > 0) {
          idle[r]!.set(fnId, free - 1);
          placer.report(fnId, target, { kind: 'ran', waitMs: 2 });
        } else {
          starts++;
          pairs.add(`${r}/${fnId}`);
          placer.report(fnId, target, { kind: 'ran', waitMs: 502, startMs: 500 });
        }
        runners[r]!.inFlight++;
        running.push({ ends: tick + 1 + Math.floor(random() * 3), runner: r, fnId });
      }
    }
    return { starts, pairs: pairs.size };
  }

  it('wait starts fewer containers than naive', () => {
    const naive = simulate(new NaivePlacer({ random: () => 0 }));
    const wait = simulate(new WaitPlacer({ now: () => 0 }));
    expect(naive.pairs).toBe(36);
    expect(wait.pairs).toBeLessThan(naive.pairs);
    expect(wait.starts).toBeLessThan(naive.starts);
  });
});

/**
 * `npm run bench:keepalive`: the keep-alive simulator (keepalive-sim.mts) on
 * a seeded Azure-like day and on the adversarial traces; prints Markdown
 * tables and writes the README's plot (docs/keepalive.svg).
 *
 *   KEEPALIVE_SEED (27), KEEPALIVE_FNS (1000), KEEPALIVE_SVG (docs/keepalive.svg; "" for none)
 */
import { writeFileSync } from 'node:fs';
import { FixedKeepAlive } from '../src/agent/keepalive.js';
import { adversarialTraces, azureLikeTrace, defaultRuns, percentile, simulate, standardRuns, table, type Summary } from './keepalive-sim.mjs';

const seed = Number(process.env.KEEPALIVE_SEED ?? 27);
const count = Number(process.env.KEEPALIVE_FNS ?? 1000);
const svgPath = process.env.KEEPALIVE_SVG ?? 'docs/keepalive.svg';

const t0 = performance.now();
const trace = azureLikeTrace(seed, count);
const runs = standardRuns();
const summaries = runs.map((r) => simulate(trace, r));
console.log(`## An Azure-like day: ${count} functions, seed ${seed}, ${summaries[0]!.calls} calls\n`);
console.log(table(summaries));

// What changes for a fn nobody tuned: Fn's idle_timeout of 30 s, each policy.
console.log("\n## Every fn at Fn's default idle_timeout (30 s)\n");
console.log(table(defaultRuns().map((r) => simulate(trace, r))));

// Fixed keep-alives from 30 s to an hour: the trade-off curve the histogram is measured against.
const sweepMinutes = [0.5, 1, 2, 5, 10, 20, 30, 60];
const sweep = sweepMinutes.map((m) => simulate(trace, { label: `fixed ${m} min`, make: () => new FixedKeepAlive(), idleTimeoutMs: m * 60_000 }));
console.log('\n## Fixed keep-alive, from 30 s to an hour\n');
console.log(table(sweep));

console.log('\n## Adversarial traces\n');
console.log('| trace | policy | cold starts | wasted memory-time (GB-h) | pre-warms used / wasted |');
console.log('| --- | --- | ---: | ---: | ---: |');
for (const fn of adversarialTraces(seed)) {
  for (const r of runs) {
    const s = simulate([fn], r);
    console.log(`| ${fn.id} | ${r.label} | ${s.cold} of ${s.calls} | ${(s.wastedGbS / 3600).toFixed(2)} | ${s.prewarmUsed} / ${s.prewarmWasted} |`);
  }
}
console.error(`\n(simulated in ${((performance.now() - t0) / 1000).toFixed(1)} s)`);

if (svgPath) {
  writeFileSync(svgPath, plot(summaries, sweep));
  console.error(`plot written to ${svgPath}`);
}

/**
 * Two panels: each fn's cold-start share, fns ordered by it (the three
 * policies); and the median and 75th-percentile fns' cold-start shares
 * against wasted memory-time (fixed keep-alives as curves, the three
 * policies as points).
 */
function plot(main: readonly Summary[], fixed: readonly Summary[]): string {
  const W = 900;
  const H = 380;
  const pad = { l: 60, r: 20, t: 40, b: 50 };
  const pw = (W - 3 * pad.l) / 2;
  const ph = H - pad.t - pad.b;
  const colors = ['#d62728', '#1f77b4', '#2ca02c'];
  const out: string[] = [`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`, `<rect width="${W}" height="${H}" fill="white"/>`];
  const axes = (x0: number, title: string, xlabel: string, ylabel: string, xticks: [number, string][]): void => {
    out.push(`<text x="${x0 + pw / 2}" y="20" text-anchor="middle" font-weight="bold">${title}</text>`);
    out.push(`<rect x="${x0}" y="${pad.t}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
    for (let i = 0; i <= 4; i++) {
      const y = pad.t + ph - (i / 4) * ph;
      out.push(`<line x1="${x0}" x2="${x0 + pw}" y1="${y}" y2="${y}" stroke="#eee"/>`, `<text x="${x0 - 6}" y="${y + 4}" text-anchor="end">${i * 25}%</text>`);
    }
    for (const [x, label] of xticks) out.push(`<text x="${x}" y="${pad.t + ph + 16}" text-anchor="middle">${label}</text>`);
    out.push(`<text x="${x0 + pw / 2}" y="${H - 12}" text-anchor="middle">${xlabel}</text>`);
    out.push(`<text transform="translate(${x0 - 44},${pad.t + ph / 2}) rotate(-90)" text-anchor="middle">${ylabel}</text>`);
  };
  // Left: cold-start share per fn percentile.
  const x0 = pad.l;
  axes(
    x0,
    'Cold-start share of each function',
    'functions, ordered by their cold-start share (percentile)',
    'cold starts / calls',
    [0, 25, 50, 75, 100].map((p) => [x0 + (p / 100) * pw, `p${p}`]),
  );
  main.forEach((s, k) => {
    const shares = s.perFn.map((r) => r.cold / r.calls).sort((a, b) => a - b);
    const pts: string[] = [];
    for (let p = 0; p <= 100; p++) pts.push(`${(x0 + (p / 100) * pw).toFixed(1)},${(pad.t + ph - percentile(shares, p / 100) * ph).toFixed(1)}`);
    out.push(`<polyline points="${pts.join(' ')}" fill="none" stroke="${colors[k]}" stroke-width="2"/>`);
    out.push(`<text x="${x0 + 8}" y="${pad.t + 16 + 15 * k}" fill="${colors[k]}">${s.label}: ${(s.wastedGbS / 3600).toFixed(0)} GB-h idle</text>`);
  });
  // Right: p75 fn's cold-start share against memory-time.
  const x1 = 2 * pad.l + pw + 20;
  const maxGbH = Math.max(...[...main, ...fixed].map((s) => s.wastedGbS / 3600)) * 1.05;
  const xs = (gbh: number): number => x1 + (gbh / maxGbH) * pw;
  const ys = (share: number): number => pad.t + ph - share * ph;
  const step = Math.pow(10, Math.floor(Math.log10(maxGbH / 2)));
  const ticks: [number, string][] = [];
  for (let v = 0; v <= maxGbH; v += step * (maxGbH / step > 8 ? 2 : 1)) ticks.push([xs(v), v.toFixed(0)]);
  axes(x1, 'Cold starts of the median and 75th-percentile function', 'wasted memory-time (GB-hours idle)', 'cold-start share of that function', ticks);
  for (const [key, dash] of [
    ['p50', '4 3'],
    ['p75', '1 3'],
  ] as const) {
    const at = (s: Summary): string => `${xs(s.wastedGbS / 3600).toFixed(1)},${ys(s.coldShareAt[key]).toFixed(1)}`;
    out.push(`<polyline points="${fixed.map(at).join(' ')}" fill="none" stroke="#888" stroke-width="1.5" stroke-dasharray="${dash}"/>`);
    for (const s of fixed) out.push(`<circle cx="${at(s).split(',')[0]}" cy="${at(s).split(',')[1]}" r="3" fill="#888"/>`);
    main.forEach((s, k) => {
      const [cx, cy] = at(s).split(',');
      out.push(`<circle cx="${cx}" cy="${cy}" r="5" fill="${key === 'p50' ? colors[k] : 'white'}" stroke="${colors[k]}" stroke-width="2"/>`);
    });
  }
  for (const s of fixed)
    out.push(`<text x="${(xs(s.wastedGbS / 3600) + 4).toFixed(1)}" y="${(ys(s.coldShareAt.p50) - 6).toFixed(1)}" fill="#666" font-size="10">${s.label.replace('fixed ', '')}</text>`);
  out.push(`<text x="${x1 + 8}" y="${pad.t + ph - 26}" fill="#666">grey: fixed keep-alive, 30 s to 60 min</text>`);
  out.push(`<text x="${x1 + 8}" y="${pad.t + ph - 10}" fill="#666">filled, dashed: median fn; hollow, dotted: p75 fn</text>`);
  out.push('</svg>');
  return out.join('\n') + '\n';
}

// The status page's critical-batch-size plot (web/charts.js drawBatch) in
// Node, with a stand-in for the DOM and for uPlot that records what would be
// drawn: for each target loss the curve S(B) = S_min + E_min / B, B_crit
// marked at S = 2 S_min, and the ladder's B_noise as a vertical line; the
// messages when there is nothing to draw. Run: node tests/web/test_charts.mjs
import assert from 'node:assert/strict';

const drawn = [];
globalThis.uPlot = class {
  constructor(opts, data) {
    this.opts = opts;
    this.data = data;
    this.series = opts.series;
    drawn.push(this);
  }
  setData(d) { this.data = d; }
  destroy() {}
  // tables [[x...], [y...]] -> [xs, ys1, ys2, ...] over the union of x, null elsewhere
  static join(tables) {
    const xs = [...new Set(tables.flatMap((t) => t[0]))].sort((a, b) => a - b);
    const out = [xs];
    for (const t of tables) {
      for (let s = 1; s < t.length; s++) {
        const at = new Map(t[0].map((x, i) => [x, t[s][i]]));
        out.push(xs.map((x) => (at.has(x) ? at.get(x) : null)));
      }
    }
    return out;
  }
};

function element() {
  return {
    children: [], attrs: {}, className: '', textContent: '', clientWidth: 600,
    parentElement: null,
    appendChild(c) { this.children.push(c); c.parentElement = this; return c; },
    insertBefore(c) { return this.appendChild(c); },
    setAttribute(k, v) { this.attrs[k] = v; },
    querySelector(sel) {
      if (sel === 'figcaption') return { textContent: 'the critical batch size' };
      return this.children.find((c) => sel === '.' + c.className) || null;
    },
  };
}
globalThis.document = { createElement: () => element(), querySelectorAll: () => [] };

const { drawBatch, drawBcrit, drawFrontier, drawIsoflop, seedSpread, tightLogRange } = await import(new URL('../../web/charts.js', import.meta.url));

function text(fig) {
  const box = fig.querySelector('.plot');
  return box.children.map((c) => c.textContent).join(' ');
}

// one target: S = 400 + 409600 / B tokens, B_crit 1024, B_noise 640
let fig = element();
drawBatch(fig, { batch: { params: { S_min: 400, E_min: 409600, B_crit: 1024 },
  derived: { B_noise: 640 } } });
assert.equal(drawn.length, 1);
let u = drawn[0];
const labels = u.series.slice(1).map((s) => s.label);
assert.deepEqual(labels.map((l) => l.split(' ')[0]), ['S(B)', 'B_crit', 'B_noise']);
const [xs, curve, crit, noise] = u.data;
let checked = 0;
xs.forEach((b, i) => {
  if (curve[i] != null) {
    assert.ok(Math.abs(curve[i] - (400 + 409600 / b)) < 1e-9 * curve[i], `S(${b})`);
    checked++;
  }
});
assert.equal(checked, 48, 'the curve is drawn at 48 batch sizes');
assert.ok(Math.min(...xs) <= 1024 / 16 * 1.0001 && Math.max(...xs) >= 1024 * 16 * 0.9999);
assert.deepEqual(xs.map((b, i) => [b, crit[i]]).filter((p) => p[1] != null), [[1024, 800]]);
assert.deepEqual(xs.filter((b, i) => noise[i] != null), [640]);
assert.equal(u.opts.scales.x.distr, 3, 'log axes');

// several targets: one curve and one B_crit per target from derived values
drawn.length = 0;
fig = element();
drawBatch(fig, { batch: { params: { B_star: 1e8, alpha_B: 0.2 }, derived: {
  'B_crit(L=1.3)': 500, 'S_min(L=1.3)': 100, 'E_min(L=1.3)': 50000,
  'B_crit(L=1.2)': 1000, 'S_min(L=1.2)': 200, 'E_min(L=1.2)': 200000 } } });
u = drawn[0];
assert.deepEqual(u.series.slice(1).map((s) => s.label),
  ['S(B) at L = 1.3', 'B_crit 500', 'S(B) at L = 1.2', 'B_crit 1e+3']);
const xs2 = u.data[0];
assert.deepEqual(xs2.map((b, i) => [b, u.data[2][i]]).filter((p) => p[1] != null), [[500, 200]]);
assert.deepEqual(xs2.map((b, i) => [b, u.data[4][i]]).filter((p) => p[1] != null), [[1000, 400]]);

// nothing to draw: no fit; a ladder whose S_min is not positive
drawn.length = 0;
fig = element();
drawBatch(fig, {});
assert.match(text(fig), /No critical batch size fitted yet/);
fig = element();
drawBatch(fig, { batch: { params: { S_min: -5, E_min: 1000, B_crit: -200 }, derived: {} } });
assert.match(text(fig), /no positive S_min and E_min/);
assert.equal(drawn.length, 0);
console.log('drawBatch: curves, B_crit marks and B_noise as expected; messages when empty');

// loss axes fit their data: final losses of 0.63 to 0.95 get an axis just
// around them, not uPlot's whole decades (0.5 to 10 on the study's page)
drawn.length = 0;
fig = element();
fig.dataset = {};
drawFrontier(fig, { flops: [1e11, 3e11, 1e12], final_val_loss: [0.95, 0.8, 0.63] }, {});
u = drawn[0];
const [ylo, yhi] = u.opts.scales.y.range(u, 0.63, 0.95);
assert.ok(ylo < 0.63 && ylo > 0.6 && yhi > 0.95 && yhi < 1.0, `loss axis [${ylo}, ${yhi}]`);
assert.equal(u.opts.scales.y.distr, 3, 'a log loss axis');
assert.deepEqual(tightLogRange(null, 0, 1), [0, 1], 'a range that is not positive is left alone');
const [a, b] = tightLogRange(null, 2, 2);
assert.ok(a < 2 && b > 2, 'a single value gets room around it');
console.log('loss axes: fitted to the data');

// seeds: replicates of one size (N equal to 1e-9) become one size with its
// mean and min..max; the IsoFLOP chart fits the parabola to the means and
// shades each budget's spread between a max and a min line
const sp = seedSpread([2e6, 1e6, 1e6 * (1 + 1e-12), 2e6, 4e6, 1e6], [2.0, 3.1, 2.9, 2.2, 2.5, 3.0]);
assert.deepEqual(sp.map((c) => [c.n, c.runs, c.lo, c.hi]),
  [[1e6, 3, 2.9, 3.1], [2e6, 2, 2.0, 2.2], [4e6, 1, 2.5, 2.5]]);
assert.ok(Math.abs(sp[0].mean - 3.0) < 1e-12 && Math.abs(sp[1].mean - 2.1) < 1e-12);
drawn.length = 0;
fig = element();
const isoPts = { part: [], flops: [], nonembedding_params: [], final_val_loss: [] };
for (const [n, l] of [[1e6, 3.0], [2e6, 2.5], [4e6, 2.4], [8e6, 2.6]]) {
  for (const d of [-0.05, 0.05]) {
    isoPts.part.push('isoflop');
    isoPts.flops.push(1e15);
    isoPts.nonembedding_params.push(n);
    isoPts.final_val_loss.push(l + d);
  }
}
drawIsoflop(fig, isoPts, { isoflop: { budgets: [{ flops: 1e15, usable: true, n_opt: 3e6, loss: 2.4 }] } });
u = drawn[0];
const isoLabels = u.series.slice(1).map((s) => s.label);
assert.deepEqual(isoLabels, ['C 1e+15', 'C 1e+15 parabola', 'C 1e+15 seeds (max)',
  'C 1e+15 seeds (min)', 'C 1e+15 minimum']);
assert.deepEqual(u.opts.bands.map((b) => b.series), [[3, 4]]);
// the max line at N = 1e6 is 3.05 and the min 2.95
const at = u.data[0].indexOf(1e6);
assert.ok(Math.abs(u.data[3][at] - 3.05) < 1e-12 && Math.abs(u.data[4][at] - 2.95) < 1e-12);
// one run per size: no band
drawn.length = 0;
fig = element();
const one = { part: ['isoflop', 'isoflop', 'isoflop'], flops: [1e15, 1e15, 1e15],
  nonembedding_params: [1e6, 2e6, 4e6], final_val_loss: [3, 2.5, 2.7] };
drawIsoflop(fig, one, {});
assert.equal(drawn[0].opts.bands, undefined);
assert.equal(drawn[0].series.length, 3);
console.log('seeds: replicates as one size, their spread shaded on the IsoFLOP chart');

// the critical batch size by branching: B_crit at each branch point D with
// its interval's ends, the trunk's B_noise there, and k_D D^gamma_D
drawn.length = 0;
fig = element();
drawBcrit(fig, { bcrit: { params: { k_D: 0.5, gamma_D: 0.5 },
  derived: { 'B_crit(D=1e+06)': 500, 'L(D=1e+06)': 3, 'B_noise(D=1e+06)': 400,
    'B_crit(D=4e+06)': 1000, 'B_noise(D=4e+06)': 700, 'B_crit(D=1.6e+07)': Number.NaN },
  ci95: { 'B_crit(D=1e+06)': [450, 560] } } });
u = drawn[0];
assert.deepEqual(u.series.slice(1).map((s) => s.label),
  ['B_crit by branching', '95% interval (low)', '95% interval (high)', 'B_noise (the trunk)',
    'B_crit ~ D^0.5']);
const bx = u.data[0];
const pick = (k) => bx.map((x, i) => [x, u.data[k][i]]).filter((p) => p[1] != null);
assert.deepEqual(pick(1), [[1e6, 500], [4e6, 1000]], 'the finite B_crit values, by D');
assert.deepEqual(pick(2), [[1e6, 450]]);
assert.deepEqual(pick(3), [[1e6, 560]]);
assert.deepEqual(pick(4), [[1e6, 400], [4e6, 700]]);
assert.equal(pick(5).length, 32, 'the power law on 32 points');
for (const [x, y] of pick(5)) {
  assert.ok(Math.abs(y - 0.5 * Math.sqrt(x)) < 1e-9 * y, `the power law at ${x}`);
}
drawn.length = 0;
fig = element();
drawBcrit(fig, {});
assert.equal(drawn.length, 0);
assert.match(text(fig), /No critical batch size by branching yet/);
console.log('bcrit: B_crit by branching against D, its intervals, B_noise and the power law');

// a run's other metric columns: those the API serves with a number, less the
// key and the losses, in the rows' order; one drawn against tokens
{
  const { drawMetric, metricColumns } = await import(new URL('../../web/charts.js', import.meta.url));
  const rows = [
    { step: 1, tokens: 128, train_loss: 3.2, val_loss: null, lr: 0.001, b_noise: null, tok_per_s: 9e4, wall_s: 0.5 },
    { step: 2, tokens: 256, train_loss: 3.1, val_loss: 3.0, lr: 0.002, b_noise: 4.5, tok_per_s: 1e5, wall_s: 0.9 },
  ];
  assert.deepEqual(metricColumns(rows), ['lr', 'tok_per_s', 'wall_s', 'b_noise']);
  const before = drawn.length;
  const fig = Object.assign(element(), { dataset: {} });
  assert.equal(drawMetric(fig, rows, 'wall_s'), 2);
  const u = drawn[before];
  assert.deepEqual(u.data, [[128, 256], [0.5, 0.9]]);
  assert.equal(fig.dataset.column, 'wall_s');
  assert.equal(drawMetric(Object.assign(element(), { dataset: {} }), rows, 'loss_scale'), 0);
  console.log('metric columns: the served ones less key and losses; one drawn against tokens');
}

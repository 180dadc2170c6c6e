// The status page's plots, drawn with uPlot (web/package.json pins it; the
// scheduler serves it from /static/): loss curves on log-log axes, final
// loss against compute with the fitted frontier, IsoFLOP profiles,
// N_opt(C) and D_opt(C). Every label is set as text, never as HTML.
/* global uPlot */
import { fmt } from './util.js';

const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

// t in [0, 1] -> a viridis colour
export function colour(t) {
  const x = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const c = VIRIDIS[i].map((v, k) => Math.round(v + f * (VIRIDIS[i + 1][k] - v)));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b',
  '#e377c2'];

function logGrid(lo, hi, n) {
  const out = [];
  const a = Math.log(lo);
  const b = Math.log(hi);
  for (let i = 0; i < n; i++) out.push(Math.exp(a + ((b - a) * i) / (n - 1)));
  return out;
}

function figureBody(fig) {
  let box = fig.querySelector('.plot');
  if (!box) {
    box = document.createElement('div');
    box.className = 'plot';
    fig.insertBefore(box, fig.firstChild);
  }
  return box;
}

function say(fig, text) {
  const box = figureBody(fig);
  if (box._u) {
    box._u.destroy();
    box._u = null;
  }
  box.textContent = '';
  const p = document.createElement('p');
  p.className = 'empty';
  p.textContent = text;
  box.appendChild(p);
}

function widthOf(box) {
  return Math.max(260, Math.min(900, (box.parentElement || box).clientWidth - 8));
}

// A log axis fitted to its data with a little room (uPlot's own log range
// snaps to whole decades: losses of 0.6 to 1.0 would sit flat at the foot
// of a 0.5 to 10 axis).
export function tightLogRange(u, lo, hi) {
  if (!(lo > 0) || !(hi >= lo)) return [lo, hi];
  const pad = Math.max(1.02, Math.pow(hi / lo, 0.08));
  return [lo / pad, hi * pad];
}

// Draws (or redraws) a uPlot chart in a figure from aligned data; opts.tightY
// fits the y axis to the data (loss axes).
function draw(fig, series, data, opts) {
  const box = figureBody(fig);
  const o = Object.assign({
    width: widthOf(box),
    height: 300,
    scales: { x: { time: false, distr: 3 }, y: { distr: 3 } },
    legend: { show: true, live: false },
    cursor: { drag: { x: true, y: true } },
    series: [{}].concat(series),
  }, opts);
  if (o.tightY) o.scales = { x: o.scales.x, y: { distr: 3, range: tightLogRange } };
  o.axes = [
    { label: o.xlabel, values: (u, vals) => vals.map((v) => fmt(v, 2)) },
    { label: o.ylabel, size: 60, values: (u, vals) => vals.map((v) => fmt(v, 3)) },
  ];
  if (box._u && box._u._key === o.key && box._u.series.length === series.length + 1) {
    box._u.setData(data);
    return box._u;
  }
  if (box._u) box._u.destroy();
  box.textContent = '';
  box._u = new uPlot(o, data, box);
  box._u._key = o.key;
  box.setAttribute('role', 'img');
  box.setAttribute('aria-label', fig.querySelector('figcaption').textContent);
  return box._u;
}

export function resizeAll() {
  for (const box of document.querySelectorAll('.plot')) {
    if (box._u) box._u.setSize({ width: widthOf(box), height: 300 });
  }
}

const scatter = (label, stroke) => ({
  label, stroke, fill: stroke, width: 0, paths: () => null,
  points: { show: true, size: 7, stroke, fill: stroke },
});

const line = (label, stroke, dash) => ({
  label, stroke, width: 2, dash, spanGaps: true, points: { show: false },
});

// ---- loss curves ----------------------------------------------------------------------

// Curves of several runs (GET .../curves): training loss solid, validation
// dashed, coloured by N on a log scale. Returns how many points are drawn.
export function drawCurves(fig, curves, key) {
  const withData = curves.filter((c) => (c.tokens && c.tokens.length) ||
    (c.val_tokens && c.val_tokens.length));
  if (!withData.length) {
    say(fig, 'No steps reported yet.');
    fig.dataset.points = '0';
    return 0;
  }
  const ns = withData.map((c) => Number(c.nonembedding_params) || 1);
  const lo = Math.log(Math.min(...ns));
  const hi = Math.log(Math.max(...ns));
  const tables = [];
  const series = [];
  let points = 0;
  for (const c of withData) {
    const col = colour(hi > lo ? (Math.log(Number(c.nonembedding_params) || 1) - lo) / (hi - lo) : 0.5);
    const label = `run ${c.run_id} (N ${fmt(c.nonembedding_params)})`;
    if (c.tokens && c.tokens.length) {
      tables.push([c.tokens, c.train_loss]);
      series.push(line(`${label} train`, col));
      points += c.tokens.length;
    }
    if (c.val_tokens && c.val_tokens.length) {
      tables.push([c.val_tokens, c.val_loss]);
      series.push(Object.assign(line(`${label} val`, col, [6, 4]),
        { points: { show: true, size: 5, stroke: col, fill: col } }));
      points += c.val_tokens.length;
    }
  }
  draw(fig, series, uPlot.join(tables), {
    key, xlabel: 'tokens', ylabel: 'loss (nats/token)',
    legend: { show: withData.length <= 4, live: false },
  });
  fig.dataset.points = String(points);
  fig.dataset.runs = String(withData.length);
  let cap = fig.querySelector('.scale');
  if (!cap) {
    cap = document.createElement('p');
    cap.className = 'scale';
    fig.appendChild(cap);
  }
  cap.textContent = withData.length > 1
    ? `Colour: N from ${fmt(Math.exp(lo))} (purple) to ${fmt(Math.exp(hi))} (yellow); ` +
      'dashed: validation.'
    : 'Solid: training; dashed: validation.';
  return points;
}

// ---- a run's metric columns -------------------------------------------------------------

// The columns a run's metric rows carry that a chart against tokens can show:
// the keys the API serves (the scheduler's metric table), less the row's key
// and the losses the loss chart shows; only those with a number somewhere.
export function metricColumns(rows) {
  const skip = new Set(['step', 'tokens', 'train_loss', 'val_loss']);
  const cols = [];
  for (const r of rows) {
    for (const k of Object.keys(r)) {
      if (!skip.has(k) && !cols.includes(k) && Number.isFinite(r[k])) cols.push(k);
    }
  }
  return cols;
}

// One metric column of a run's rows (GET /api/runs/ID: metrics) against tokens,
// on linear axes. Returns how many points are drawn.
export function drawMetric(fig, rows, column) {
  const pts = rows.filter((r) => Number.isFinite(r.tokens) && Number.isFinite(r[column]));
  if (!pts.length) {
    say(fig, column ? `No ${column} reported yet.` : 'No steps reported yet.');
    fig.dataset.points = '0';
    return 0;
  }
  draw(fig, [line(column, PALETTE[0])], [pts.map((r) => r.tokens), pts.map((r) => r[column])], {
    key: `metric-${column}`, xlabel: 'tokens', ylabel: column,
    scales: { x: { time: false, distr: 1 }, y: { distr: 1 } }, legend: { show: false },
  });
  fig.dataset.points = String(pts.length);
  fig.dataset.column = column;
  return pts.length;
}

// ---- fits -----------------------------------------------------------------------------

function chinchilla(fit) {
  const p = fit && fit.params;
  if (!p || ![p.E, p.A, p.B, p.alpha, p.beta].every(Number.isFinite)) return null;
  const d = fit.derived || {};
  const s = p.alpha + p.beta;
  const G = Number.isFinite(d.G) ? d.G : Math.pow((p.alpha * p.A) / (p.beta * p.B), 1 / s);
  const a = Number.isFinite(d.a) ? d.a : p.beta / s;
  const b = Number.isFinite(d.b) ? d.b : p.alpha / s;
  const nopt = (C) => G * Math.pow(C / 6, a);
  const dopt = (C) => Math.pow(C / 6, b) / G;
  const loss = (C) => p.E + p.A / Math.pow(nopt(C), p.alpha) + p.B / Math.pow(dopt(C), p.beta);
  return { nopt, dopt, loss };
}

function sortedPairs(xs, ys) {
  const idx = xs.map((_, i) => i).filter((i) => xs[i] > 0 && ys[i] > 0);
  idx.sort((i, j) => xs[i] - xs[j]);
  return [idx.map((i) => xs[i]), idx.map((i) => ys[i])];
}

// Final loss against compute, and the Chinchilla frontier L(N_opt(C), D_opt(C))
// with its band where the fit carries one (frontier: [{flops, lo, hi}]).
export function drawFrontier(fig, pts, fits) {
  const C = pts.flops.map(Number);
  const L = pts.final_val_loss.map(Number);
  if (!C.length) {
    say(fig, 'No run has succeeded yet.');
    return;
  }
  const tables = [sortedPairs(C, L)];
  const series = [scatter('runs', '#1f77b4')];
  const law = chinchilla(fits.chinchilla);
  let bands;
  if (law) {
    const grid = logGrid(Math.min(...C) / 2, Math.max(...C) * 4, 64);
    tables.push([grid, grid.map(law.loss)]);
    series.push(line('Chinchilla frontier', '#d62728'));
    const fr = fits.chinchilla.frontier;
    if (Array.isArray(fr) && fr.length > 1) {
      const xs = fr.map((f) => f.flops);
      tables.push([xs, fr.map((f) => f.hi)], [xs, fr.map((f) => f.lo)]);
      series.push(line('95% band (high)', 'rgba(214,39,40,0.4)', [2, 2]),
        line('95% band (low)', 'rgba(214,39,40,0.4)', [2, 2]));
      bands = [{ series: [3, 4], fill: 'rgba(214,39,40,0.12)' }];
    }
  }
  draw(fig, series, uPlot.join(tables), {
    key: 'frontier' + series.length, xlabel: 'compute C (FLOPs)', ylabel: 'final loss', bands,
    tightY: true,
  });
  fig.dataset.fit = law ? 'chinchilla' : '';
}

// Least squares y = c2 x^2 + c1 x + c0; null when singular.
function quadfit(x, y) {
  const S = [0, 0, 0, 0, 0];
  const T = [0, 0, 0];
  for (let i = 0; i < x.length; i++) {
    let p = 1;
    for (let k = 0; k < 5; k++) {
      S[k] += p;
      if (k < 3) T[k] += p * y[i];
      p *= x[i];
    }
  }
  const M = [[S[4], S[3], S[2], T[2]], [S[3], S[2], S[1], T[1]], [S[2], S[1], S[0], T[0]]];
  for (let c = 0; c < 3; c++) {
    let piv = c;
    for (let r = c + 1; r < 3; r++) if (Math.abs(M[r][c]) > Math.abs(M[piv][c])) piv = r;
    [M[c], M[piv]] = [M[piv], M[c]];
    if (Math.abs(M[c][c]) < 1e-12) return null;
    for (let r = 0; r < 3; r++) {
      if (r === c) continue;
      const f = M[r][c] / M[c][c];
      for (let k = c; k < 4; k++) M[r][k] -= f * M[c][k];
    }
  }
  return [M[0][3] / M[0][0], M[1][3] / M[1][1], M[2][3] / M[2][2]];
}

// Runs at one N (replicates: the same point run with several seeds) as one
// size: [{n, mean, lo, hi, runs}] sorted by n. Sizes agree to 1e-9 relative,
// as the fits group them (sweeps/fit_seeds.c).
export function seedSpread(N, L) {
  const idx = N.map((_, i) => i).filter((i) => N[i] > 0 && L[i] > 0);
  idx.sort((i, j) => N[i] - N[j]);
  const out = [];
  for (const i of idx) {
    const last = out[out.length - 1];
    if (last && Math.abs(N[i] - last.n) <= 1e-9 * Math.max(N[i], last.n)) {
      last.sum += L[i];
      last.runs++;
      last.lo = Math.min(last.lo, L[i]);
      last.hi = Math.max(last.hi, L[i]);
    } else {
      out.push({ n: N[i], sum: L[i], runs: 1, lo: L[i], hi: L[i] });
    }
  }
  return out.map((c) => ({ n: c.n, mean: c.sum / c.runs, lo: c.lo, hi: c.hi, runs: c.runs }));
}

// IsoFLOP profiles: each budget's runs (loss against N), its parabola in
// ln N and its minimum (from the isoflop fit). With seeds, the parabola is
// that of the per-size means (as the fit's) and the replicates' spread,
// min to max per size, is a shaded band.
export function drawIsoflop(fig, pts, fits) {
  const budgets = ((fits.isoflop && fits.isoflop.budgets) || []).filter((b) => b.flops > 0);
  const iso = pts.part.map((p, i) => i).filter((i) => pts.part[i] === 'isoflop');
  if (!iso.length) {
    say(fig, 'This sweep has no IsoFLOP runs yet.');
    return;
  }
  // each run to its nearest budget (in log C); without a fit, group by C itself
  const centres = budgets.length ? budgets.map((b) => b.flops)
    : [...new Set(iso.map((i) => Number(pts.flops[i]).toPrecision(2)))].map(Number);
  const groups = centres.map(() => []);
  for (const i of iso) {
    let best = 0;
    for (let k = 1; k < centres.length; k++) {
      if (Math.abs(Math.log(pts.flops[i] / centres[k])) <
          Math.abs(Math.log(pts.flops[i] / centres[best]))) best = k;
    }
    groups[best].push(i);
  }
  const tables = [];
  const series = [];
  const bands = [];
  groups.forEach((g, k) => {
    if (!g.length) return;
    const col = PALETTE[k % PALETTE.length];
    const N = g.map((i) => Number(pts.nonembedding_params[i]));
    const Ls = g.map((i) => Number(pts.final_val_loss[i]));
    tables.push(sortedPairs(N, Ls));
    series.push(scatter(`C ${fmt(centres[k], 2)}`, col));
    const sizes = seedSpread(N, Ls);
    const q = sizes.length >= 3 ? quadfit(sizes.map((c) => Math.log(c.n)), sizes.map((c) => c.mean))
      : null;
    if (q && q[0] > 0) {
      const grid = logGrid(Math.min(...N), Math.max(...N), 40);
      tables.push([grid, grid.map((n) => { const x = Math.log(n); return q[0] * x * x + q[1] * x + q[2]; })]);
      series.push(line(`C ${fmt(centres[k], 2)} parabola`, col));
    }
    if (sizes.some((c) => c.runs > 1)) {
      const xs = sizes.map((c) => c.n);
      tables.push([xs, sizes.map((c) => c.hi)], [xs, sizes.map((c) => c.lo)]);
      series.push(line(`C ${fmt(centres[k], 2)} seeds (max)`, col, [1, 3]),
        line(`C ${fmt(centres[k], 2)} seeds (min)`, col, [1, 3]));
      bands.push({ series: [series.length - 1, series.length], fill: 'rgba(0,0,0,0.08)' });
    }
    const b = budgets[k];
    if (b && b.usable && b.n_opt > 0 && b.loss > 0) {
      tables.push([[b.n_opt], [b.loss]]);
      series.push(Object.assign(scatter(`C ${fmt(centres[k], 2)} minimum`, '#000'),
        { points: { show: true, size: 12, stroke: col, fill: '#fff', width: 3 } }));
    }
  });
  draw(fig, series, uPlot.join(tables), {
    key: 'isoflop' + series.length, xlabel: 'N (non-embedding parameters)', ylabel: 'final loss',
    tightY: true, bands: bands.length ? bands : undefined,
  });
}

// N_opt(C) and D_opt(C): the Chinchilla allocation and the IsoFLOP law, with
// the budgets' minima as points.
export function drawNopt(fig, pts, fits) {
  const law = chinchilla(fits.chinchilla);
  const iso = fits.isoflop && fits.isoflop.params;
  const budgets = ((fits.isoflop && fits.isoflop.budgets) || []).filter((b) => b.usable);
  if (!law && !(iso && Number.isFinite(iso.a)) && !budgets.length) {
    say(fig, 'No allocation fitted yet.');
    return;
  }
  const C = pts.flops.map(Number).filter((c) => c > 0).concat(budgets.map((b) => b.flops));
  const grid = logGrid(Math.min(...C) / 2, Math.max(...C) * 4, 48);
  const tables = [];
  const series = [];
  if (law) {
    tables.push([grid, grid.map(law.nopt)], [grid, grid.map(law.dopt)]);
    series.push(line('N_opt (Chinchilla)', '#1f77b4'), line('D_opt (Chinchilla)', '#d62728'));
  }
  if (iso && Number.isFinite(iso.a) && iso.n_coef > 0) {
    tables.push([grid, grid.map((c) => iso.n_coef * Math.pow(c, iso.a))],
      [grid, grid.map((c) => iso.d_coef * Math.pow(c, iso.b))]);
    series.push(line('N_opt (IsoFLOP)', '#1f77b4', [6, 4]), line('D_opt (IsoFLOP)', '#d62728', [6, 4]));
  }
  if (budgets.length) {
    const bs = budgets.slice().sort((x, y) => x.flops - y.flops);
    tables.push([bs.map((b) => b.flops), bs.map((b) => b.n_opt)],
      [bs.map((b) => b.flops), bs.map((b) => b.d_opt)]);
    series.push(scatter('N* per budget', '#1f77b4'), scatter('D* per budget', '#d62728'));
  }
  draw(fig, series, uPlot.join(tables), {
    key: 'nopt' + series.length, xlabel: 'compute C (FLOPs)', ylabel: 'N or D',
  });
}

// The critical batch size: per target loss the fitted S(B) = S_min + E_min / B
// (steps to reach the target against batch size, tokens), with B_crit =
// E_min / S_min marked where S = 2 S_min; the ladder's gradient noise scale
// B_noise as a vertical line when the trainer measured it.
export function drawBatch(fig, fits) {
  const f = fits.batch;
  if (!f || !f.params) {
    say(fig, 'No critical batch size fitted yet: the batch ladder\'s fit needs the steps each ' +
      'run took to reach its target losses.');
    return;
  }
  const ladders = [];
  if (Number.isFinite(f.params.S_min) && Number.isFinite(f.params.E_min)) {
    ladders.push({ label: 'S(B)', smin: f.params.S_min, emin: f.params.E_min });
  }
  const d = f.derived || {};
  for (const k of Object.keys(d)) {
    const m = /^S_min\(L=(.*)\)$/.exec(k);
    if (m && Number.isFinite(d[k]) && Number.isFinite(d[`E_min(L=${m[1]})`])) {
      ladders.push({ label: `S(B) at L = ${m[1]}`, smin: d[k], emin: d[`E_min(L=${m[1]})`] });
    }
  }
  const usable = ladders.filter((l) => l.smin > 0 && l.emin > 0);
  if (!usable.length) {
    say(fig, 'The batch ladder\'s fit has no positive S_min and E_min to draw (see its warnings).');
    return;
  }
  const crit = usable.map((l) => l.emin / l.smin);
  const grid = logGrid(Math.min(...crit) / 16, Math.max(...crit) * 16, 48);
  const tables = [];
  const series = [];
  usable.forEach((l, k) => {
    const col = PALETTE[k % PALETTE.length];
    tables.push([grid, grid.map((b) => l.smin + l.emin / b)]);
    series.push(line(l.label, col));
    tables.push([[l.emin / l.smin], [2 * l.smin]]);
    series.push(Object.assign(scatter(`B_crit ${fmt(l.emin / l.smin, 3)}`, col),
      { points: { show: true, size: 10, stroke: col, fill: '#fff', width: 2 } }));
  });
  const bn = d.B_noise;
  if (Number.isFinite(bn) && bn > 0) {
    const s = usable.map((l) => l.smin);
    tables.push([[bn, bn], [Math.min(...s), Math.max(...s) * 8]]);
    series.push(line(`B_noise ${fmt(bn, 3)}`, '#7f7f7f', [4, 4]));
  }
  draw(fig, series, uPlot.join(tables), {
    key: 'batch' + series.length, xlabel: 'batch size B (tokens)', ylabel: 'steps S to the target',
  });
}

// The critical batch size by branching (law bcrit): B_crit at each branch
// point against the trunk's tokens D there, with its interval's ends, the
// trunk's gradient noise scale at the same points, and the fitted
// B_crit = k_D D^gamma_D.
export function drawBcrit(fig, fits) {
  const f = fits.bcrit;
  if (!f || !f.derived) {
    say(fig, 'No critical batch size by branching yet: a batch ladder with "branch" ' +
                 '(docs/sweeps.md) measures it once its trunk and rungs have finished.');
    return;
  }
  const d = f.derived;
  const ci = f.ci95 || {};
  const at = [];
  for (const k of Object.keys(d)) {
    const m = /^B_crit\(D=(.*)\)$/.exec(k);
    if (m && Number.isFinite(d[k]) && d[k] > 0) {
      at.push({D : Number(m[1]), b : d[k], ci : ci[k], noise : d[`B_noise(D=${m[1]})`]});
    }
  }
  if (!at.length) {
    say(fig, 'The branched ladder gave no critical batch size yet (see the fit\'s warnings).');
    return;
  }
  at.sort((x, y) => x.D - y.D);
  const tables = [ [ at.map((p) => p.D), at.map((p) => p.b) ] ];
  const series = [ Object.assign(
      scatter('B_crit by branching', PALETTE[0]),
      {points : {show : true, size : 10, stroke : PALETTE[0], fill : '#fff', width : 2}}) ];
  const iv = at.filter((p) => Array.isArray(p.ci) && p.ci[0] > 0);
  if (iv.length) {
    tables.push([ iv.map((p) => p.D), iv.map((p) => p.ci[0]) ]);
    tables.push([ iv.map((p) => p.D), iv.map((p) => p.ci[1]) ]);
    series.push(scatter('95% interval (low)', PALETTE[0]),
                scatter('95% interval (high)', PALETTE[0]));
  }
  const nz = at.filter((p) => Number.isFinite(p.noise) && p.noise > 0);
  if (nz.length) {
    tables.push([ nz.map((p) => p.D), nz.map((p) => p.noise) ]);
    series.push(Object.assign(
        scatter('B_noise (the trunk)', '#7f7f7f'),
        {points : {show : true, size : 8, stroke : '#7f7f7f', fill : '#7f7f7f', width : 1}}));
  }
  const p = f.params || {};
  if (Number.isFinite(p.k_D) && Number.isFinite(p.gamma_D) && at.length > 1) {
    const grid = logGrid(at[0].D / 1.5, at[at.length - 1].D * 1.5, 32);
    tables.push([ grid, grid.map((x) => p.k_D * x ** p.gamma_D) ]);
    series.push(line(`B_crit ~ D^${fmt(p.gamma_D, 3)}`, PALETTE[1]));
  }
  draw(fig, series, uPlot.join(tables), {
    key : 'bcrit' + series.length,
    xlabel : 'tokens D at the branch point',
    ylabel : 'batch size (tokens)',
  });
}

// The status page's script: the token form, the live event stream, and each
// page's live parts. The server renders every page (and escapes every value
// in it); on events this script fetches the page again and swaps the
// sections that changed, and draws the plots.
import {
  drawBatch,
  drawBcrit,
  drawCurves,
  drawFrontier,
  drawIsoflop,
  drawMetric,
  drawNopt,
  metricColumns,
  resizeAll
} from './charts.js';
import { RunTable } from './runs.js';
import { authHeaders, getJSON, getPage, notice, postJSON, setToken, throttle, token } from './util.js';

const body = document.body;
const PAGE = body.dataset.page;
const ID = Number(body.dataset.id);

for (const e of document.querySelectorAll('.js-only')) e.hidden = true;

// ---- the token ------------------------------------------------------------------------

function showToken() {
  const has = Boolean(token());
  for (const e of document.querySelectorAll('.needs-token')) e.hidden = !has;
  const forget = document.getElementById('token-forget');
  if (forget) forget.hidden = !has;
  const input = document.getElementById('token');
  if (input) input.placeholder = has ? 'token set for this tab' : 'to make changes';
  loadMe();
}

// What the token's holder may do (GET /api/me; README, "A shared cluster"):
// a viewer changes nothing; a member submits, reproduces any run and cancels
// only their own sweeps and those sweeps' runs (the button's data-owner); an
// admin does anything.
// The page offers only those buttons; the API refuses the rest anyway.
let me = null;

async function loadMe() {
  me = null;
  if (token()) {
    try {
      me = await getJSON('/api/me');
    } catch (e) {
      notice(`Token: ${e.message}`);
    }
  }
  offerActions();
}

function offerActions() {
  if (!me) return;
  const admin = me.role === 'admin';
  const member = admin || me.role === 'member';
  const may = {
    'cancel-sweep': (e) => admin || (member && e.dataset.owner === me.name),
    'cancel-run': (e) => admin || (member && e.dataset.owner === me.name),
    'reproduce-run': () => member,
    'submit-form': () => member,
  };
  for (const [id, ok] of Object.entries(may)) {
    const e = document.getElementById(id);
    if (e) e.hidden = !ok(e);
  }
}

function tokenForm() {
  const form = document.getElementById('token-form');
  if (!form) return;
  form.hidden = false;
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const input = document.getElementById('token');
    setToken(input.value.trim());
    input.value = '';
    showToken();
    refreshAll();
  });
  document.getElementById('token-forget').addEventListener('click', () => {
    setToken('');
    showToken();
  });
  showToken();
}

// ---- swapping server-rendered sections ----------------------------------------------------

async function swap(ids) {
  const doc = await getPage();
  if (doc.body.dataset.page !== PAGE) return; // a message page (say, 503): keep what we have
  for (const id of ids) {
    const fresh = doc.getElementById(id);
    const old = document.getElementById(id);
    if (fresh && old) old.replaceWith(document.adoptNode(fresh));
    else if (fresh && !old) document.querySelector('main').appendChild(document.adoptNode(fresh));
  }
  showToken();
  bindButtons();
  offerActions();
}

function guard(p) {
  return p.then(() => notice(''), (e) => notice(`Could not refresh: ${e.message}`));
}

// ---- the event stream -------------------------------------------------------------------

// Server-Sent Events read with fetch, so that the token can go in a header
// (when reads are closed) and every reconnect sends Last-Event-ID: the
// scheduler replays what its ring still holds. A gap in the ids (the ring
// overflowed, or the scheduler restarted) reloads everything instead.
let lastId = 0;
const live = document.getElementById('live');

function setLive(state, text) {
  live.dataset.state = state;
  live.textContent = text;
}

async function stream(handle) {
  let backoff = 1000;
  for (;;) {
    try {
      const h = authHeaders({ Accept: 'text/event-stream' });
      if (lastId) h['Last-Event-ID'] = String(lastId);
      const res = await fetch('/api/events', { headers: h, cache: 'no-store' });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      setLive('live', 'live');
      backoff = 1000;
      const resumed = lastId;
      let first = true;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value.replace(/\r\n?/g, '\n');
        let end;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, end);
          buf = buf.slice(end + 2);
          let id = 0;
          let event = 'message';
          const data = [];
          for (const ln of block.split('\n')) {
            if (ln.startsWith(':')) continue;
            const i = ln.indexOf(':');
            const field = i < 0 ? ln : ln.slice(0, i);
            const val = i < 0 ? '' : ln.slice(i + 1).replace(/^ /, '');
            if (field === 'id') id = Number(val);
            else if (field === 'event') event = val;
            else if (field === 'data') data.push(val);
          }
          if (!data.length) continue;
          if (id) {
            if (first && resumed && id !== resumed + 1) handle('resync', null);
            first = false;
            lastId = id;
            live.dataset.lastEventId = String(id);
          }
          let obj = null;
          try {
            obj = JSON.parse(data.join('\n'));
          } catch (e) {
            continue;
          }
          handle(event, obj);
        }
      }
      setLive('reconnecting', 'reconnecting\u2026');
    } catch (e) {
      setLive('reconnecting', `reconnecting\u2026 (${e.message})`);
    }
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 10000);
  }
}

// ---- buttons (they need the token) ------------------------------------------------------

function bindButtons() {
  const act = (id, what, fn) => {
    const b = document.getElementById(id);
    if (!b || b.dataset.bound) return;
    b.dataset.bound = '1';
    b.addEventListener('click', async () => {
      if (!window.confirm(what + '?')) return;
      b.disabled = true;
      try {
        await fn();
      } catch (e) {
        notice(`${what}: ${e.message}`);
      } finally {
        b.disabled = false;
      }
    });
  };
  act('cancel-sweep', `Cancel sweep ${ID}`, () => postJSON(`/api/sweeps/${ID}/cancel`));
  act('cancel-run', `Cancel run ${ID}`, () => postJSON(`/api/runs/${ID}/cancel`));
  act('reproduce-run', `Reproduce run ${ID}`, async () => {
    const r = await postJSON(`/api/runs/${ID}/reproduce`);
    location.href = `/runs/${Number(r.id)}`;
  });
  const form = document.getElementById('submit-form');
  if (form && !form.dataset.bound) {
    form.dataset.bound = '1';
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      try {
        const r = await postJSON('/api/sweeps', document.getElementById('spec').value);
        location.href = `/sweeps/${Number(r.id)}`;
      } catch (e) {
        notice(`Submit: ${e.message}`);
      }
    });
  }
}

// ---- pages ------------------------------------------------------------------------------

let refreshAll = () => {};

function overview() {
  const refresh = throttle(() => guard(swap(['workers', 'queue', 'sweeps', 'failures'])), 1000);
  refreshAll = refresh;
  return (event) => {
    if (event !== 'metrics') refresh();
  };
}

// The series a metrics row extends: the curve's x column (tokens) for each loss.
const GROWN = [
  ['tokens', 'train_loss'],
  ['val_tokens', 'val_loss'],
];

// Appends a metrics event's last row to a curve drawn from the server's samples.
function grow(curve, row) {
  if (!curve || !row) return false;
  let grew = false;
  for (const [xs, ys] of GROWN) {
    if (!Number.isFinite(row[ys]) || !Number.isFinite(row.tokens)) continue;
    const x = (curve[xs] = curve[xs] || []);
    const y = (curve[ys] = curve[ys] || []);
    if (!x.length || row.tokens > x[x.length - 1]) {
      x.push(row.tokens);
      y.push(row[ys]);
      grew = true;
    }
  }
  return grew;
}

function sweep() {
  const figs = (id) => document.getElementById(id);
  let curves = [];
  let shown = [];
  const redraw = throttle(() => drawCurves(figs('chart-curves'), curves, 'curves'), 500);
  const loadCurves = async () => {
    if (!shown.length) {
      curves = [];
    } else {
      curves = await getJSON(`/api/sweeps/${ID}/curves?points=60&runs=${shown.join(',')}`);
    }
    drawCurves(figs('chart-curves'), curves, 'curves');
  };
  const table = new RunTable(document.getElementById('runs-static'), ID, (runs) => {
    shown = runs.map((r) => Number(r.id));
    guard(loadCurves());
  });
  const loadFits = async () => {
    const [pts, fits] = await Promise.all([getJSON(`/api/sweeps/${ID}/points`),
      getJSON(`/api/sweeps/${ID}/fit`)]);
    drawFrontier(figs('chart-frontier'), pts, fits);
    drawIsoflop(figs('chart-isoflop'), pts, fits);
    drawNopt(figs('chart-nopt'), pts, fits);
    drawBatch(figs('chart-batch'), fits);
    drawBcrit(figs('chart-bcrit'), fits);
  };
  const refreshSummary = throttle(() => guard(swap([ 'summary', 'lrtune', 'fits', 'designed' ])), 1000);
  const refreshTable = throttle(() => guard(table.load()), 1000);
  const refreshFits = throttle(() => guard(loadFits()), 1000);
  refreshAll = () => {
    refreshSummary();
    refreshTable();
    refreshFits();
  };
  guard(table.load());
  guard(loadFits());
  return (event, d) => {
    if (event === 'resync') {
      refreshAll();
    } else if (event === 'metrics') {
      const c = curves.find((x) => x.run_id === d.run_id);
      if (c && grow(c, d.last)) redraw();
    } else if (event === 'run') {
      refreshSummary();
      if (table.ids.has(d.id) || d.status === 'running') refreshTable();
      if (d.status === 'succeeded') refreshFits();
    } else if (event === 'fit' && d.sweep_id === ID) {
      refreshSummary();
      refreshFits();
    } else if (event === 'sweep' && d.id === ID) {
      refreshSummary();
    }
  };
}

// A figure after the loss chart showing one of the run's other metric
// columns against tokens, picked from those the API serves (tokens per
// second first). Returns the function that (re)loads its rows.
function metricChart(after) {
  const fig = document.createElement('figure');
  fig.id = 'chart-metric';
  fig.className = 'chart';
  const cap = document.createElement('figcaption');
  const label = document.createElement('label');
  label.textContent = 'Per step, against tokens: ';
  const pick = document.createElement('select');
  pick.id = 'metric-column';
  label.appendChild(pick);
  cap.appendChild(label);
  fig.appendChild(cap);
  after.parentElement.appendChild(fig);
  let rows = [];
  const redraw = () => drawMetric(fig, rows, pick.value);
  pick.addEventListener('change', redraw);
  return async () => {
    rows = (await getJSON(`/api/runs/${ID}?metrics_limit=100000`)).metrics || [];
    const cols = metricColumns(rows);
    const keep = cols.includes(pick.value) ? pick.value : cols.includes('tok_per_s') ? 'tok_per_s' : cols[0];
    pick.textContent = '';
    for (const c of cols) {
      const o = document.createElement('option');
      o.value = c;
      o.textContent = c;
      pick.appendChild(o);
    }
    if (keep) pick.value = keep;
    redraw();
  };
}

function run() {
  let curves = [];
  const fig = document.getElementById('chart-run');
  const loadMetric = fig ? metricChart(fig) : async () => {};
  const redraw = throttle(() => drawCurves(fig, curves, 'run'), 500);
  const load = async () => {
    curves = await getJSON(`/api/runs/${ID}/curves?points=500`);
    drawCurves(fig, curves, 'run');
    await loadMetric();
  };
  const refresh = throttle(() => guard(swap(['summary', 'failure']).then(load)), 1000);
  refreshAll = refresh;
  guard(load());
  return (event, d) => {
    if (event === 'resync') refresh();
    else if (event === 'metrics' && d.run_id === ID) {
      if (curves.length && grow(curves[0], d.last)) redraw();
      else if (!curves.length || !curves[0].tokens) refresh();
    } else if (event === 'run' && d.id === ID) refresh();
  };
}

// The audit trail's page (/audit): its rows from GET /api/audit, for an
// admin's token, written as text.
function audit() {
  const load = async () => {
    const rows = document.getElementById('audit-rows');
    const note = document.getElementById('audit-note');
    if (!token()) {
      note.textContent = "Enter an admin's token above to read the audit trail.";
      return;
    }
    try {
      const all = await getJSON('/api/audit?limit=500');
      rows.replaceChildren(...all.map((a) => {
        const tr = document.createElement('tr');
        for (const k of ['at', 'user', 'peer', 'action', 'target', 'outcome', 'detail']) {
          const td = document.createElement('td');
          td.textContent = String(a[k] ?? '');
          tr.append(td);
        }
        return tr;
      }));
      note.textContent = `The newest ${all.length} change(s), made, refused or failed.`;
    } catch (e) {
      note.textContent = `The audit trail: ${e.message}`;
    }
  };
  refreshAll = load;
  guard(load());
  return () => {};
}

tokenForm();
bindButtons();
const handlers = { overview, sweep, run };
if (PAGE === 'audit') audit();
const handle = handlers[PAGE] ? handlers[PAGE]() : () => {};
if (body.dataset.openReads === '0' && token() && !document.getElementById('h-sweep') &&
    !document.getElementById('h-run') && !document.getElementById('workers')) {
  // reads are closed and this copy came without data: fetch it with the token
  guard(swap(['summary', 'workers', 'queue', 'sweeps', 'failures', 'fits', 'failure']));
}
// the usage page: one's figures need one's token (scheduler/usage.c)
if (PAGE === 'usage' && token() && document.getElementById('usage-token')) guard(swap(['usage']));
window.addEventListener('resize', throttle(resizeAll, 200));
if (PAGE in handlers) stream(handle);

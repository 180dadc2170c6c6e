// A sweep's runs, a page at a time from GET /api/sweeps/{id}/runs (sorted and
// filtered by the server, so 10,000 runs cost one page), replacing the
// server-rendered table. Cells are set as text.
import { fmt, fmtDuration, getJSON } from './util.js';

const PAGE = 100;

const COLUMNS = [
  { key: 'id', label: 'Run', sort: 'id' },
  { key: 'status', label: 'Status', sort: 'status' },
  { key: 'nonembedding_params', label: 'N', sort: 'nonembedding_params' },
  { key: 'tokens', label: 'D (tokens)', sort: 'tokens' },
  { key: 'batch_size', label: 'B (sequences)', sort: 'batch_size' },
  { key: 'flops', label: 'C (FLOPs)', sort: 'flops' },
  { key: 'final_val_loss', label: 'Final loss', sort: 'final_val_loss' },
  { key: 'attempt', label: 'Attempt', sort: 'attempt' },
  { key: 'worker', label: 'Worker', sort: 'worker' },
  { key: 'duration', label: 'Duration' },
];

const STATUSES = ['queued', 'running', 'succeeded', 'failed', 'cancelled'];

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function cell(run, key, workers) {
  switch (key) {
    case 'id': {
      const a = el('a', { href: `/runs/${Number(run.id)}` }, String(run.id));
      return a;
    }
    case 'status':
      return el('span', { class: `st st-${STATUSES.includes(run.status) ? run.status : 'other'}` },
        run.status);
    case 'final_val_loss':
      return document.createTextNode(run.final_val_loss == null ? '' : Number(run.final_val_loss).toFixed(4));
    case 'batch_size':
      return document.createTextNode(run.batch_size == null ? '' : String(run.batch_size));
    case 'attempt':
      return document.createTextNode(`${run.attempt}/${run.max_attempts}`);
    case 'worker':
      return document.createTextNode(run.worker == null ? '' : (workers.get(run.worker) || `#${run.worker}`));
    case 'duration': {
      if (!run.started_at) return document.createTextNode('');
      const end = run.finished_at ? Date.parse(run.finished_at) : Date.now();
      return document.createTextNode(fmtDuration((end - Date.parse(run.started_at)) / 1000));
    }
    default:
      return document.createTextNode(fmt(run[key]));
  }
}

export class RunTable {
  // host: the element whose content the table replaces; onPage(runs) is
  // told the runs shown after each load.
  constructor(host, sweepId, onPage) {
    this.host = host;
    this.sweepId = sweepId;
    this.onPage = onPage;
    const q = new URLSearchParams(location.search);
    this.state = {
      offset: Math.max(0, Number(q.get('offset')) || 0),
      status: STATUSES.includes(q.get('status')) ? q.get('status') : '',
      sort: q.get('sort') || 'id',
      order: q.get('order') === 'desc' ? 'desc' : 'asc',
    };
    this.workers = new Map();
    this.ids = new Set();
    this.build();
  }

  build() {
    this.host.textContent = '';
    const bar = el('div', { class: 'tablebar' });
    const label = el('label', { for: 'run-status' }, 'Status ');
    const sel = el('select', { id: 'run-status', name: 'status' });
    sel.appendChild(el('option', { value: '' }, 'all'));
    for (const s of STATUSES) sel.appendChild(el('option', { value: s }, s));
    sel.value = this.state.status;
    sel.addEventListener('change', () => {
      this.state.status = sel.value;
      this.state.offset = 0;
      this.load();
    });
    label.appendChild(sel);
    bar.appendChild(label);
    this.info = el('span', { class: 'pageinfo', 'aria-live': 'polite' });
    this.prev = el('button', { type: 'button' }, 'Previous');
    this.next = el('button', { type: 'button' }, 'Next');
    this.prev.addEventListener('click', () => {
      this.state.offset = Math.max(0, this.state.offset - PAGE);
      this.load();
    });
    this.next.addEventListener('click', () => {
      this.state.offset += PAGE;
      this.load();
    });
    bar.append(this.prev, this.next, this.info);
    this.host.appendChild(bar);

    const wrap = el('div', { class: 'scroll' });
    this.table = el('table', { class: 'runs', id: 'runs-table' });
    const thead = el('thead');
    const tr = el('tr');
    this.heads = [];
    for (const c of COLUMNS) {
      const th = el('th', { scope: 'col' });
      if (c.sort) {
        const b = el('button', { type: 'button', class: 'sort' }, c.label);
        b.addEventListener('click', () => {
          if (this.state.sort === c.sort) this.state.order = this.state.order === 'asc' ? 'desc' : 'asc';
          else {
            this.state.sort = c.sort;
            this.state.order = 'asc';
          }
          this.state.offset = 0;
          this.load();
        });
        th.appendChild(b);
      } else {
        th.textContent = c.label;
      }
      this.heads.push([c, th]);
      tr.appendChild(th);
    }
    thead.appendChild(tr);
    this.tbody = el('tbody');
    this.table.append(thead, this.tbody);
    wrap.appendChild(this.table);
    this.host.appendChild(wrap);
  }

  async load() {
    const s = this.state;
    const q = new URLSearchParams({ limit: String(PAGE), offset: String(s.offset), sort: s.sort, order: s.order });
    if (s.status) q.set('status', s.status);
    const url = new URL(location.href);
    url.search = '';
    for (const [k, v] of q) if (k !== 'limit' && !(k === 'offset' && v === '0')) url.searchParams.set(k, v);
    history.replaceState(null, '', url);
    const [page, workers] = await Promise.all([
      getJSON(`/api/sweeps/${this.sweepId}/runs?${q}`),
      getJSON('/api/workers').catch(() => []),
    ]);
    this.workers = new Map(workers.map((w) => [w.id, w.name]));
    const runs = page.runs || [];
    this.tbody.textContent = '';
    for (const run of runs) {
      const tr = el('tr', { 'data-run': String(run.id) });
      for (const c of COLUMNS) {
        const td = el('td');
        td.appendChild(cell(run, c.key, this.workers));
        tr.appendChild(td);
      }
      this.tbody.appendChild(tr);
    }
    if (!runs.length) {
      const tr = el('tr');
      tr.appendChild(el('td', { colspan: String(COLUMNS.length), class: 'empty' }, 'No runs.'));
      this.tbody.appendChild(tr);
    }
    for (const [c, th] of this.heads) {
      if (c.sort === s.sort) th.setAttribute('aria-sort', s.order === 'asc' ? 'ascending' : 'descending');
      else th.removeAttribute('aria-sort');
    }
    const total = Number(page.runs_total) || 0;
    this.info.textContent = `Runs ${runs.length ? s.offset + 1 : 0}\u2013${s.offset + runs.length} of ${total}`;
    this.prev.disabled = s.offset === 0;
    this.next.disabled = s.offset + runs.length >= total;
    this.ids = new Set(runs.map((r) => r.id));
    if (this.onPage) this.onPage(runs);
  }
}

// Shared by the status page's modules: the API token (kept in this tab's
// sessionStorage, sent only as an Authorization header), fetching, and
// number formatting.

const TOKEN_KEY = 'scalesweep.token';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function authHeaders(extra) {
  const h = Object.assign({}, extra || {});
  const t = token();
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

async function errorOf(res) {
  try {
    const j = await res.json();
    if (j && j.error && j.error.message) return new Error(`${res.status}: ${j.error.message}`);
  } catch (e) {
    // not JSON: the status says enough
  }
  return new Error(`HTTP ${res.status}`);
}

export async function getJSON(url) {
  const res = await fetch(url, { headers: authHeaders(), cache: 'no-store' });
  if (!res.ok) throw await errorOf(res);
  return res.json();
}

export async function postJSON(url, body) {
  const res = await fetch(url, {
    method: 'POST',
    headers: authHeaders({ 'Content-Type': 'application/json' }),
    body: body === undefined ? '' : body,
  });
  if (!res.ok) throw await errorOf(res);
  return res.json();
}

// This page's HTML again, as a document (the server renders and escapes it).
export async function getPage(url) {
  const res = await fetch(url || location.href, { headers: authHeaders(), cache: 'no-store' });
  if (!res.ok && res.status !== 401) throw new Error(`HTTP ${res.status}`);
  return new DOMParser().parseFromString(await res.text(), 'text/html');
}

export function fmt(v, digits) {
  if (v === null || v === undefined || !Number.isFinite(Number(v))) return '';
  // trailing zeros of the fraction only: 100 stays 100, 1.50e+5 becomes 1.5e+5
  return Number(v).toPrecision(digits || 3).replace(/(\.\d*?)0+(e|$)/, '$1$2').replace(/\.(e|$)/, '$1');
}

export function fmtDuration(s) {
  if (!Number.isFinite(s) || s < 0) return '';
  if (s < 120) return `${Math.round(s)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

export function notice(msg) {
  const el = document.getElementById('notice');
  if (!el) return;
  el.textContent = msg;
  el.hidden = !msg;
}

// Calls fn at most once per ms milliseconds, the last call winning.
export function throttle(fn, ms) {
  let timer = null;
  let again = false;
  return function run() {
    if (timer) {
      again = true;
      return;
    }
    fn();
    timer = setTimeout(() => {
      timer = null;
      if (again) {
        again = false;
        run();
      }
    }, ms);
  };
}

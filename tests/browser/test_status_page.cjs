#!/usr/bin/env node
// The status page in a real browser (Debian's chromium, headless, driven by
// playwright-core), against a real scheduler, a worker and a throwaway
// PostgreSQL (run through tests/integration/run_with_pg.sh, which sets
// SCALESWEEP_TEST_DB). The worker trains with tests/browser/fake_trainer.py,
// whose losses follow a known law, slowly enough to watch.
//
// Checks: the pages render the runs (also without JavaScript); a sweep
// named <script>alert(1)</script> and a run error holding markup stay text;
// a loss curve grows as its run reports steps (Server-Sent Events, no
// reload); the fit plots appear when the runs finish; the API token entered
// in the page shows the reproduce button, which works; with two members' and
// a viewer's tokens the sweep page offers the cancel button only to the
// sweep's owner, whose click cancels it (issue 36); the static files are
// served only from the embedded set, with their security headers; an event
// stream opened with Last-Event-ID resumes after it. A screenshot of the
// sweep page is saved as ARTIFACT_DIR/status-page.png.
//
// Usage: test_status_page.cjs SCALESWEEP_BINARY ARTIFACT_DIR
// Exits 77 (skipped) when chromium or playwright-core is missing, unless
// CI is set or chromium is installed: then that is a failure.
'use strict';
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const BIN = process.argv[2];
const ARTIFACTS = process.argv[3];
const CHROMIUM = process.env.SCALESWEEP_CHROMIUM || '/usr/bin/chromium';
const DB = process.env.SCALESWEEP_TEST_DB;
const T0 = Date.now();
const NAME = '<script>alert(1)</script>';
const STRICT = Boolean(process.env.CI) || fs.existsSync(CHROMIUM);

function log(...a) {
  console.log(`[${((Date.now() - T0) / 1000).toFixed(1)}s]`, ...a);
}

function fail(msg) {
  const e = new Error(msg);
  e.testFailure = true;
  throw e;
}

function skip(msg) {
  if (STRICT) {
    console.error(`FAIL: ${msg} (CI is set or chromium is installed: not skipping)`);
    process.exit(1);
  }
  console.log(`skipped: ${msg}`);
  process.exit(77);
}

if (!BIN || !ARTIFACTS) {
  console.error('usage: test_status_page.cjs SCALESWEEP_BINARY ARTIFACT_DIR');
  process.exit(2);
}
if (!DB) skip('SCALESWEEP_TEST_DB is not set: run through tests/integration/run_with_pg.sh');
if (!fs.existsSync(CHROMIUM)) skip(`no browser at ${CHROMIUM}: install Debian's chromium`);
let chromium;
try {
  ({ chromium } = require('playwright-core'));
} catch (e) {
  skip(`playwright-core not found (NODE_PATH=${process.env.NODE_PATH || ''}): ${e.message}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

async function until(what, fn, timeoutMs) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e.message;
    }
    await sleep(200);
  }
  fail(`timed out (${timeoutMs / 1000} s) waiting for ${what}; last: ${JSON.stringify(last)}`.slice(0, 2000));
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ss-browser-'));
const tokenFile = path.join(tmp, 'token');
const TOKEN = require('node:crypto').randomBytes(24).toString('hex');
fs.writeFileSync(tokenFile, TOKEN);
const procs = [];
let base;

function start(name, args, env) {
  const out = fs.openSync(path.join(tmp, `${name}.log`), 'a');
  const p = spawn(BIN, args, { stdio: ['ignore', out, out], env: Object.assign({}, process.env, env) });
  procs.push(p);
  return p;
}

async function api(method, p, body, auth) {
  const headers = {};
  if (auth !== false) headers.Authorization = `Bearer ${TOKEN}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(base + p, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch (e) {
    json = null;
  }
  return { status: res.status, json, text, headers: res.headers };
}

// Reads the event stream from Last-Event-ID `from` for ms milliseconds.
async function readEvents(from, ms) {
  const ctl = new AbortController();
  const res = await fetch(`${base}/api/events`, {
    headers: { 'Last-Event-ID': String(from) }, signal: ctl.signal,
  });
  const ids = [];
  const timer = setTimeout(() => ctl.abort(), ms);
  try {
    const dec = new TextDecoder();
    for await (const chunk of res.body) {
      for (const m of dec.decode(chunk).matchAll(/^id: (\d+)$/gm)) ids.push(Number(m[1]));
    }
  } catch (e) {
    if (e.name !== 'AbortError') throw e;
  } finally {
    clearTimeout(timer);
  }
  return ids;
}

async function main() {
  const apiPort = await freePort();
  const wPort = await freePort();
  base = `http://127.0.0.1:${apiPort}`;
  start('scheduler', ['scheduler', '--database', DB, '--token-file', tokenFile,
    '--listen', `127.0.0.1:${apiPort}`, '--workers', `127.0.0.1:${wPort}`,
    '--checkpoints', path.join(tmp, 'ckpt')]);
  await until('the scheduler', async () => (await api('GET', '/healthz')).status === 200, 20000);
  start('worker', ['worker', '--scheduler', `127.0.0.1:${wPort}`, '--token-file', tokenFile,
    '--cpu-slots', '2', '--work-dir', path.join(tmp, 'worker'), '--name', 'browser-w1',
    '--bin', path.join(__dirname, 'fake_trainer.py')], { FAKE_RUN_S: '9' });

  // ---- the static files: embedded only, with their headers -------------------------------
  for (const p of ['/static/../CMakeLists.txt', '/static/%2e%2e/CMakeLists.txt',
    '/static/..%2fscheduler%2fweb.c', '/static/', '/static/nothing.js', '/static//etc/passwd']) {
    const r = await api('GET', p, undefined, false);
    if (r.status !== 404) fail(`GET ${p}: ${r.status}, expected 404`);
  }
  const js = await api('GET', '/static/status.js', undefined, false);
  if (js.status !== 200 || !/javascript/.test(js.headers.get('content-type')) ||
      js.headers.get('x-content-type-options') !== 'nosniff' || !js.headers.get('etag')) {
    fail(`GET /static/status.js: ${js.status} ${[...js.headers].join('; ')}`);
  }
  const again = await fetch(`${base}/static/status.js`, { headers: { 'If-None-Match': js.headers.get('etag') } });
  if (again.status !== 304) fail(`revalidating /static/status.js: ${again.status}, expected 304`);
  const home = await api('GET', '/', undefined, false);
  const csp = home.headers.get('content-security-policy') || '';
  if (home.status !== 200 || !/script-src 'self'/.test(csp) || /unsafe-inline/.test(csp)) {
    fail(`GET /: ${home.status}, Content-Security-Policy '${csp}'`);
  }
  if ((await api('POST', '/', {}, true)).status !== 405) fail('POST / is not 405');
  log('static files: embedded only (404 for traversal), ETag/304, CSP and nosniff');

  // ---- a sweep with a hostile name, and a run that fails --------------------------------
  const spec = {
    name: NAME,
    description: 'browser test <b>not bold</b>',
    method: 'isoflop',
    base: { model: { seq_len: 32 }, data: { synthetic: { seed: 1 } }, precision: 'fp32', threads: 1 },
    isoflop: { flops: [1e11, 1e12], centre: { coef: 0.0913, exponent: 0.5, span: 3, points: 4 } },
    resources: { cpus: 1 },
    max_attempts: 2,
  };
  const sub = await api('POST', '/api/sweeps', spec);
  if (sub.status !== 201) fail(`submit: ${sub.status} ${sub.text}`);
  const sweep = sub.json.id;
  const bad = await api('POST', '/api/sweeps', {
    name: 'fails', method: 'runs', max_attempts: 1, resources: { cpus: 1 }, priority: -1,
    base: { model: { n_layer: 1, d_model: 16, n_head: 2, seq_len: 16 }, threads: 1 },
    runs: [{ train: { tokens: 65536, batch_size: 4, seed: 99 } }],
  });
  if (bad.status !== 201) fail(`submit the failing sweep: ${bad.status} ${bad.text}`);
  log(`sweep ${sweep}: ${sub.json.runs} runs; sweep ${bad.json.id} will fail`);

  // ---- without JavaScript: the server's HTML ---------------------------------------------
  const raw = await api('GET', `/sweeps/${sweep}`, undefined, false);
  if (raw.status !== 200 || raw.text.includes(NAME) ||
      !raw.text.includes('&lt;script&gt;alert(1)&lt;/script&gt;')) {
    fail(`GET /sweeps/${sweep}: the name is not escaped in the HTML (status ${raw.status})`);
  }
  const rows = (raw.text.match(/<tr><td><a href="\/runs\/\d+">/g) || []).length;
  if (rows !== sub.json.runs) fail(`GET /sweeps/${sweep}: ${rows} run rows without JavaScript, expected ${sub.json.runs}`);
  log('without JavaScript: the sweep page lists its runs, the name escaped');

  // ---- the browser ---------------------------------------------------------------------
  const browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const problems = [];
  try {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await ctx.newPage();
    page.on('dialog', async (d) => {
      if (d.type() === 'confirm') return d.accept();
      problems.push(`a ${d.type()} dialog opened: ${d.message()}`);
      return d.dismiss();
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(`console error: ${m.text()} (${m.location().url})`);
    });

    await page.goto(`${base}/`);
    await page.waitForSelector('#sweeps table');
    const names = await page.$$eval('#sweeps td a', (as) => as.map((a) => a.textContent));
    if (!names.some((n) => n.includes(NAME))) fail(`overview: no sweep link reads ${NAME}: ${names}`);
    if (await page.$$eval('main script, main img', (s) => s.length)) fail('overview: markup from a name became elements');
    await until('the overview to show the worker', async () =>
      (await page.textContent('#workers')).includes('browser-w1'), 20000);
    log('overview: the sweep (name as text) and the worker');

    await page.goto(`${base}/sweeps/${sweep}`);
    await page.waitForSelector('#runs-table tbody tr[data-run]');
    const h1 = await page.textContent('#h-sweep .name');
    if (h1 !== NAME) fail(`sweep page: heading name ${JSON.stringify(h1)}, expected ${NAME}`);
    const n = await page.$$eval('#runs-table tbody tr[data-run]', (r) => r.length);
    if (n !== sub.json.runs) fail(`sweep page: ${n} runs in the table, expected ${sub.json.runs}`);
    // sort by N, descending: the table reloads from the API
    await page.click('#runs-table th:nth-child(3) button');
    await page.click('#runs-table th:nth-child(3) button');
    // the header says so at the click; the rows follow when the API answers
    // (slowly in a sanitized build): wait for both, then check the order
    const column = () => page.$$eval('#runs-table tbody tr[data-run] td:nth-child(3)',
      (tds) => tds.map((td) => Number(td.textContent)));
    const descending = (ns) => ns.length === n && !ns.some((v, i) => i > 0 && v > ns[i - 1]);
    await until('the runs sorted by N descending', async () =>
      (await page.getAttribute('#runs-table th:nth-child(3)', 'aria-sort')) === 'descending' &&
      descending(await column()), 10000);
    const ns = await column();
    if (!descending(ns)) fail(`runs sorted by N descending: ${ns}`);
    log('sweep page: runs table (sortable), the name as text');

    // a curve grows while its run reports steps
    await until('a running run with steps on the plot', async () =>
      Number(await page.getAttribute('#chart-curves', 'data-points')) > 0, 60000);
    const before = Number(await page.getAttribute('#chart-curves', 'data-points'));
    await until('the curves to grow', async () =>
      Number(await page.getAttribute('#chart-curves', 'data-points')) > before + 5, 30000);
    log(`sweep page: the curves grew from ${before} points without a reload`);

    // one run's page: its own curve grows too. On a loaded machine a run can finish before
    // its page has drawn; then there is nothing left to grow, and another running run is
    // watched instead.
    const rp = await ctx.newPage();
    rp.on('pageerror', (e) => problems.push(`page error (run page): ${e.message}`));
    let running = 0;
    let b2 = 0;
    for (let attempt = 1; ; attempt++) {
      running = await until('a running run', async () => {
        const r = await api('GET', `/api/sweeps/${sweep}/runs?status=running`);
        return r.json && r.json.runs.length ? r.json.runs[0].id : 0;
      }, 30000);
      await rp.goto(`${base}/runs/${running}`);
      await until('the run page curve', async () =>
        Number(await rp.getAttribute('#chart-run', 'data-points')) > 0, 20000);
      b2 = Number(await rp.getAttribute('#chart-run', 'data-points'));
      const end = Date.now() + 20000;
      let grew = false;
      let finished = false;
      while (Date.now() < end && !grew && !finished) {
        await sleep(200);
        grew = Number(await rp.getAttribute('#chart-run', 'data-points')) > b2;
        finished = (await api('GET', `/api/runs/${running}`)).json.status !== 'running';
      }
      if (grew) break;
      if (!finished) fail(`run page ${running}: the curve stayed at ${b2} points for 20 s while the run ran`);
      // the run ended: its page must still come to show every point it reported
      const all = (await api('GET', `/api/runs/${running}/curves?points=500`)).json;
      const total = all.length ? (all[0].tokens || []).length + (all[0].val_tokens || []).length : 0;
      await until(`run page ${running} to show all ${total} points`, async () =>
        Number(await rp.getAttribute('#chart-run', 'data-points')) >= total, 20000);
      if (b2 < total) break; // it grew from b2 to the end
      if (attempt === 4) fail(`run page: 4 runs finished before their page drew a partial curve`);
      log(`run page ${running}: the run finished before its page drew; watching another`);
    }
    if (!(await rp.textContent('#config pre')).includes('"n_layer"')) fail('run page: no resolved config');
    log(`run page ${running}: the curve grew from ${b2} points; config shown`);
    // the run's other metric columns, offered as the API serves them: tokens per second first
    await until('the run page metric chart', async () =>
      Number(await rp.getAttribute('#chart-metric', 'data-points')) > 0, 20000);
    const offered = await rp.$$eval('#metric-column option', (os) => os.map((o) => o.value));
    const served = (await api('GET', `/api/runs/${running}`)).json.metrics.at(-1) || {};
    if ((await rp.getAttribute('#chart-metric', 'data-column')) !== 'tok_per_s' ||
        offered.some((c) => !(c in served)) || !offered.includes('lr'))
      fail(`run page: the metric chart shows ${await rp.getAttribute('#chart-metric', 'data-column')}` +
           ` of ${offered.join(', ')}; served: ${Object.keys(served).join(', ')}`);
    log(`run page ${running}: metric chart of ${offered.join(', ')}`);

    // the fit plots appear when the runs finish (the page is not reloaded)
    await until('the sweep to finish', async () => {
      const r = await api('GET', `/api/sweeps/${sweep}/runs?status=succeeded&limit=1`);
      return r.json && r.json.runs_total === sub.json.runs;
    }, 180000);
    await until('the frontier plot with the Chinchilla fit', async () =>
      (await page.getAttribute('#chart-frontier', 'data-fit')) === 'chinchilla' &&
      (await page.$$('#chart-frontier canvas')).length > 0, 60000);
    for (const id of ['#chart-isoflop', '#chart-nopt']) {
      if (!(await page.$$(`${id} canvas`)).length) fail(`sweep page: no plot in ${id}`);
    }
    await until('the fitted parameters', async () => (await page.textContent('#fits')).includes('alpha'), 10000);
    log('sweep page: the fit plots and parameters appeared');
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    const shot = path.join(ARTIFACTS, 'status-page.png');
    await page.screenshot({ path: shot, fullPage: true });
    log(`screenshot: ${shot}`);

    // the failed run: its error (markup in it) as text, on the overview and its page
    const failed = await until('the failing run to fail', async () => {
      const r = await api('GET', `/api/sweeps/${bad.json.id}/runs?status=failed`);
      return r.json && r.json.runs.length ? r.json.runs[0].id : 0;
    }, 60000);
    await page.goto(`${base}/`);
    await page.waitForSelector('#failures table');
    if (!(await page.textContent('#failures')).includes('<img src=x onerror=alert(2)>')) {
      fail('overview: the failure\'s error is not shown as text');
    }
    await page.goto(`${base}/runs/${failed}`);
    if (!(await page.textContent('#failure')).includes('simulated failure')) fail('run page: no error shown');
    if (await page.$$eval('main img', (s) => s.length)) fail('run page: markup in an error became an element');
    log(`failed run ${failed}: the error shown as text`);

    // the token, entered in the page, shows the reproduce button; it works
    const done = (await api('GET', `/api/sweeps/${sweep}/runs?limit=1`)).json.runs[0].id;
    await page.goto(`${base}/runs/${done}`);
    if (await page.isVisible('#reproduce-run')) fail('run page: the reproduce button shows without a token');
    await page.fill('#token', TOKEN);
    await page.click('#token-form button[type=submit]');
    await page.waitForSelector('#reproduce-run', { state: 'visible' });
    const from = page.url();
    await Promise.all([page.waitForURL((u) => u.href !== from && /\/runs\/\d+$/.test(u.pathname)),
      page.click('#reproduce-run')]);
    const copy = Number(page.url().split('/').pop());
    if (copy === done) fail('reproduce: the page did not go to the new run');
    const rr = await api('GET', `/api/runs/${copy}`);
    if (rr.json.run.reproduces !== done) fail(`reproduce: run ${copy} reproduces ${rr.json.run.reproduces}`);
    if (page.url().includes(TOKEN)) fail('the token appeared in a URL');
    log(`reproduce from the page: run ${copy} reproduces run ${done}`);

    // a shared cluster's people: the page offers only the actions the token's
    // holder may take (a viewer none, a member cancels only their own sweep)
    await people(page);

    // narrow screen: the overview still renders, nothing wider than the screen but tables
    await page.setViewportSize({ width: 380, height: 800 });
    await page.goto(`${base}/`);
    const wide = await page.evaluate(() => document.documentElement.scrollWidth);
    if (wide > 400) fail(`narrow screen: the page is ${wide} px wide at a 380 px viewport`);
    const unlabeled = await page.$$eval('input, select, textarea', (els) =>
      els.filter((e) => !e.labels || !e.labels.length).map((e) => e.id || e.name));
    if (unlabeled.length) fail(`controls without a label: ${unlabeled}`);
  } finally {
    await browser.close();
  }
  if (problems.length) fail(`in the browser:\n  ${problems.join('\n  ')}`);

  // ---- resuming the event stream ------------------------------------------------------
  const all = await readEvents(1, 700);
  if (!all.length || all[0] !== 2) fail(`events after Last-Event-ID 1 start at ${all[0]}, expected 2`);
  const mid = all[Math.floor(all.length / 2)];
  const rest = await readEvents(mid, 700);
  if (rest[0] !== mid + 1) fail(`events after Last-Event-ID ${mid} start at ${rest[0]}`);
  log(`event stream: resumes after Last-Event-ID (${all.length} events replayed)`);
}

// Two members and a viewer, made with the admin's token; ann's sweep waits
// for a GPU (the worker has none). On its page the cancel button is absent
// for the viewer and for bob, and present for ann, whose click cancels it.
async function people(page) {
  const tokens = { admin: TOKEN };
  for (const [name, role] of [['ann', 'member'], ['bob', 'member'], ['vic', 'viewer']]) {
    const r = await api('POST', '/api/users', { name, role });
    if (r.status !== 201 || !r.json.token) fail(`user add ${name}: ${r.status} ${r.text}`);
    tokens[name] = r.json.token;
  }
  const res = await fetch(`${base}/api/sweeps`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${tokens.ann}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({
      name: 'ann-waits', method: 'runs', resources: { gpus: 1 },
      base: { model: { n_layer: 1, d_model: 16, n_head: 2, seq_len: 16 }, threads: 1 },
      runs: [{ train: { tokens: 65536, batch_size: 4, seed: 7 } }],
    }),
  });
  const own = await res.json();
  if (res.status !== 201) fail(`ann's submit: ${res.status} ${JSON.stringify(own)}`);
  await page.goto(`${base}/sweeps/${own.id}`);
  if (!(await page.textContent('#summary .owner')).includes('ann')) fail('sweep page: no owner shown');
  const asUser = async (name, button = '#cancel-sweep') => {
    await page.fill('#token', tokens[name]);
    await Promise.all([page.waitForResponse((r) => r.url().endsWith('/api/me')),
      page.click('#token-form button[type=submit]')]);
    await page.waitForTimeout(100); // the response handled: offerActions ran
    return page.isVisible(button);
  };
  // the run page: Cancel for the sweep's owner only, Reproduce for any member
  const runs = await api('GET', `/api/sweeps/${own.id}/runs`);
  const runId = runs.json && runs.json.runs && runs.json.runs[0] && runs.json.runs[0].id;
  if (!runId) fail(`ann's sweep's runs: ${runs.status} ${runs.text}`);
  await page.goto(`${base}/runs/${runId}`);
  if (await asUser('bob', '#cancel-run')) fail("run page: the cancel button shows for another member's run");
  if (!(await page.isVisible('#reproduce-run'))) fail('run page: no reproduce button for a member');
  if (await asUser('vic', '#reproduce-run')) fail('run page: the reproduce button shows for a viewer');
  if (!(await asUser('ann', '#cancel-run'))) fail("run page: no cancel button for the run's owner");
  log(`people: on run ${runId}'s page bob may reproduce but not cancel, vic neither, ann both`);
  await page.goto(`${base}/sweeps/${own.id}`);
  if (await asUser('vic')) fail('sweep page: the cancel button shows for a viewer');
  if (await asUser('bob')) fail("sweep page: the cancel button shows for another member's sweep");
  if (!(await asUser('ann'))) fail("sweep page: no cancel button for the sweep's owner");
  await page.click('#cancel-sweep');
  await until('the owner\'s cancel from the page', async () =>
    (await api('GET', `/api/sweeps/${own.id}?limit=0`)).json.status === 'cancelled', 10000);
  log(`people: the viewer and bob see no cancel button on ann's sweep ${own.id}; ann's cancels it`);
  // the audit page (/audit), read with the admin's token, has ann's cancel
  await asUser('admin');
  await page.goto(`${base}/audit`);
  await until('the audit page\'s rows', async () => {
    const rows = await page.$$eval('#audit-rows tr', (trs) => trs.map((t) => t.textContent));
    return rows.some((t) => t.includes('ann') && t.includes('cancel') && t.includes(`sweep ${own.id}`) &&
      t.includes('ok'));
  }, 5000);
  log('audit page: an admin reads ann\'s cancel');
}

// A sanitizer build reports into the logs, leaks at exit included: read them
// after every process has stopped.
function sanitizerReports() {
  return fs.readdirSync(tmp).filter((f) => f.endsWith('.log') &&
    /ERROR: (Address|Leak)Sanitizer|runtime error:/.test(fs.readFileSync(path.join(tmp, f), 'utf8')));
}

main().then(async () => {
  await stopAll();
  const bad = sanitizerReports();
  if (bad.length) {
    console.error(`FAIL: a sanitizer report in ${bad.map((f) => path.join(tmp, f)).join(', ')}`);
    process.exit(1);
  }
  console.log('status page: all checks passed');
  fs.rmSync(tmp, { recursive: true, force: true });
  process.exit(0);
}, async (e) => {
  console.error(`FAIL: ${e.testFailure ? e.message : e.stack}`);
  console.error(`logs in ${tmp}`);
  await stopAll();
  process.exit(1);
});

async function stopAll() {
  for (const p of procs.reverse()) {
    if (p.exitCode === null && p.signalCode === null) {
      p.kill('SIGTERM');
      await Promise.race([new Promise((r) => p.once('exit', r)), sleep(10000)]);
      if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    }
  }
}

#!/usr/bin/env python3
"""The API's answers and the status page, byte for byte, on one database.

Against the real scheduler and a throwaway PostgreSQL (run through
tests/integration/run_with_pg.sh): three sweeps are submitted through the
API, the scheduler is stopped, and every row the reads show is then set to
fixed values straight in the database (statuses, times, losses, metric
rows, attempts, a worker, a fit, a reproduction, a designed run, an lr tune
and an adaptive design, a cancelled sweep); the scheduler is started again
on it, every GET route of the API (scheduler/api.c, scheduler/web_json.c),
the HTML pages (scheduler/web.c) and the CLI's read commands are fetched,
and each answer is compared with its file under tests/integration/golden/.
JSON bodies are compared as the values
they hold, HTML and printouts byte for byte. Only what must vary between
two runs is normalised: a running run's lease
(the scheduler renews it on start), the creation time of a fit the
scheduler stores itself, and the port in the CLI's printout. Issue 35
asks that restructuring the pages' data leaves the API's answers the same:
the goldens were made with the code before it.

Usage: test_api_golden.py SCALESWEEP_BINARY [--update]
  --update rewrites the goldens from this build (then review the diff).
"""
import difflib
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from harness import api_request, free_port, kill_groups, make_token, psql, wait_healthz

BIN = sys.argv[1]
UPDATE = "--update" in sys.argv[2:]
DB = os.environ["SCALESWEEP_TEST_DB"]
GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
tmp = tempfile.mkdtemp(prefix="ss-api-golden-")
token = make_token(tmp)
api_port, wport = free_port(), free_port()
procs = {}  # the scheduler while it runs


class Failed(Exception):
    """Why the test failed; the scheduler's log is printed after it."""


def check(cond, msg):
    if not cond:
        raise Failed(msg)


def get(path):
    """GET path: (status, content type, body text)."""
    c = http.client.HTTPConnection("127.0.0.1", api_port, timeout=20)
    c.request("GET", path, headers={"Authorization": "Bearer " + open(token).read()})
    r = c.getresponse()
    body = r.read().decode()
    c.close()
    return r.status, r.getheader("Content-Type"), body


def start():
    with open(os.path.join(tmp, "scheduler.log"), "a") as log:
        procs["scheduler"] = subprocess.Popen(
            [BIN, "scheduler", "--database", DB, "--token-file", token, "--listen",
             f"127.0.0.1:{api_port}", "--workers", f"127.0.0.1:{wport}", "--checkpoints",
             os.path.join(tmp, "ck"), "--predict-seconds", "0"], stdout=log, stderr=log,
            start_new_session=True)
    check(wait_healthz(lambda m, p: get(p)[:1], proc=procs["scheduler"]),
          "the scheduler did not come up")


def stop():
    """Every write it acknowledged is committed: it may be killed."""
    kill_groups(procs)
    procs.clear()


def spec(name, sizes, gpus=0):
    return {"name": name, "method": "runs", "max_attempts": 2,
            "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                     "train": {"batch_size": 8, "lr": 0.003, "tokens": 25600}, "threads": 1},
            "runs": [{"model": {"d_model": d}, "train": {"seed": i + 1}}
                     for i, d in enumerate(sizes)],
            "resources": {"gpus": gpus} if gpus else {"cpus": 1}}


# Sweep 1 "done": runs 1-5 (run 5 reproduces run 1), a fit, a designed run.
# Sweep 2 "live": runs 6-9 on one GPU each: running, queued, queued waiting
# to retry, failed. Sweep 3 "tuned": runs 10-12, cancelled, with an lr tune
# still undecided and an adaptive design that was running.
FILL = r"""
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET timezone = ''UTC''', current_database()); END $$;
INSERT INTO workers (id, name, host, gpus, cpu_slots, last_seen)
  VALUES (1, 'w-one', 'host-a', '[{"index": 0, "name": "H100"}]', 4, '2026-01-02 03:00:00+00');
UPDATE sweeps SET created_at = '2026-01-01 00:00:00+00'::timestamptz + id * interval '1 hour',
  priority = id - 1;
UPDATE sweeps SET status = 'succeeded' WHERE id = 1;
UPDATE sweeps SET status = 'running' WHERE id = 2;
UPDATE sweeps SET status = 'cancelled',
  spec = spec || '{"lr_tune": {"rates": [0.001, 0.003]}, "adaptive": {"budget": 1e15}}',
  adaptive = '{"status": "running", "question": "laws", "rounds": [{"round": 1, "runs": [10, 11],
    "interval": 0.25}]}' WHERE id = 3;
UPDATE runs SET status = 'succeeded', attempt = 1,
  started_at = '2026-01-02 00:00:00+00'::timestamptz + id * interval '10 minutes',
  finished_at = '2026-01-02 00:05:00+00'::timestamptz + id * interval '10 minutes' + id * interval '7 seconds',
  final_val_loss = 3.5 - 0.25 * id, code_version = 'v1.2.3', worker = NULL,
  environment = '{"backend": "cpu", "threads": 1, "scalesweep": "v1.2.3", "host": "host-a"}',
  log_tail = E'step 10 loss 4.0\nstep 20 loss 3.5\n', checkpoint_step = 20, on_worker = NULL
  WHERE sweep_id = 1;
UPDATE runs SET status = 'failed', attempt = 2, final_val_loss = NULL,
  error = 'trainer exited with status 1: out of memory <tag> & "quotes"' WHERE id = 4;
UPDATE runs SET reproduces = 1, final_val_loss = 3.25, config = (SELECT config FROM runs WHERE id = 1)
  WHERE id = 5;
UPDATE runs SET designed = '{"flops": 1.5e12, "predicted_loss": 3.1, "interval": [3.0, 3.2]}',
  prediction = '{"loss": 3.05, "at_step": 20}' WHERE id = 3;
UPDATE runs SET part = 'main', target_loss = '{"loss": 3.0}' WHERE id = 2;
INSERT INTO attempts (run_id, attempt, worker, environment, started_at)
  SELECT id, 1, 'w-one', '{"backend": "cpu", "threads": 1}', started_at FROM runs WHERE sweep_id = 1;
INSERT INTO metrics (run_id, step, tokens, train_loss, val_loss, lr, grad_norm, b_noise, loss_scale,
    tok_per_s)
  SELECT r.id, s, s * 256, round((5.0 / ln(s + 2) + r.id * 0.01)::numeric, 6)::float8,
    CASE WHEN s % 10 = 0 THEN round((5.1 / ln(s + 2))::numeric, 6)::float8 END, 0.003 * s / 60,
    CASE WHEN s % 2 = 0 THEN 1.5 END, CASE WHEN s % 10 = 0 THEN 64.0 END, NULL, 1000.0 + s
  FROM runs r, generate_series(1, 60) s WHERE r.sweep_id = 1 AND r.id <> 5;
INSERT INTO metrics (run_id, step, tokens, train_loss, val_loss, lr)
  SELECT 5, step, tokens, train_loss + CASE WHEN step = 30 THEN 0.001 ELSE 0 END, val_loss, lr
  FROM metrics WHERE run_id = 1;
UPDATE runs SET status = 'running', attempt = 1, worker = 1, on_worker = 'w-one',
  lease_until = '2099-01-01 00:00:00+00' WHERE id = 6;
INSERT INTO metrics (run_id, step, tokens, train_loss) VALUES (6, 1, 256, 5.5), (6, 2, 512, 5.25);
UPDATE runs SET status = 'queued', attempt = 1, retry_after = '2099-01-01 00:00:00+00',
  error = 'lost its worker' WHERE id = 8;
UPDATE runs SET status = 'failed', attempt = 2, error = 'diverged: loss is NaN at step 7',
  started_at = '2026-01-03 00:00:00+00', finished_at = '2026-01-03 00:01:30+00' WHERE id = 9;
INSERT INTO attempts (run_id, attempt, worker, environment, started_at) VALUES
  (9, 1, 'w-one', '{"backend": "cuda", "gpu": "H100"}', '2026-01-02 23:00:00+00'),
  (9, 2, 'w-one', '{"backend": "cuda", "gpu": "H100"}', '2026-01-03 00:00:00+00');
UPDATE runs SET part = 'lr_tune', status = 'succeeded', attempt = 1, final_val_loss = 4.0 + id * 0.1,
  config = jsonb_set(config, '{train,lr}', to_jsonb(0.001 * (id - 9))),
  started_at = '2026-01-04 00:00:00+00', finished_at = '2026-01-04 00:02:00+00' WHERE id IN (10, 11);
UPDATE runs SET status = 'cancelled', finished_at = '2026-01-04 00:03:00+00' WHERE id = 12;
INSERT INTO fits (sweep_id, law, params, intervals, n_points, created_at) VALUES
  (1, 'chinchilla', '{"law": "chinchilla", "E": 1.5, "A": 400.0, "B": 410.5, "alpha": 0.34,
    "beta": 0.28, "rmse": 0.0125}', '{"ci95": {"alpha": [0.3, 0.38]}, "stderr": {"alpha": 0.02}}',
   4, '2026-01-05 00:00:00+00'),
  (1, 'kaplan', '{"law": "kaplan", "Nc": 8.8e13, "alpha_N": 0.076}', '{"ci95": {}, "stderr": {}}',
   4, '2026-01-05 00:00:01+00');
"""

# Every GET route that reads the store: the API's (scheduler/api.c), the
# page's JSON (scheduler/web_json.c) and the pages (scheduler/web.c), with
# the query parameters that change what is read.
ROUTES = [
    "/api/sweeps",
    "/api/sweeps/1", "/api/sweeps/2", "/api/sweeps/3",
    "/api/sweeps/1?limit=2&offset=1", "/api/sweeps/1?status=succeeded&sort=final_val_loss&order=desc",
    "/api/sweeps/2?sort=flops", "/api/sweeps/99",
    "/api/sweeps/1/runs", "/api/sweeps/2/runs?status=queued", "/api/sweeps/1/runs?limit=1",
    "/api/sweeps/1/runs?sort=bogus", "/api/sweeps/99/runs",
    "/api/runs/1", "/api/runs/4", "/api/runs/5", "/api/runs/6", "/api/runs/8", "/api/runs/9",
    "/api/runs/1?metrics_limit=5&metrics_offset=10", "/api/runs/99",
    "/api/sweeps/1/curves", "/api/sweeps/1/curves?points=5", "/api/sweeps/1/curves?limit=2&offset=1",
    "/api/sweeps/2/curves", "/api/runs/1/curves?points=3", "/api/sweeps/1/curves?runs=2,5",
    "/api/sweeps/1/points", "/api/sweeps/3/points", "/api/sweeps/99/points",
    "/api/sweeps/1/fit", "/api/sweeps/2/fit", "/api/sweeps/1/next",
    "/api/sweeps/1/next?flops=1e13",
    "/api/workers", "/healthz", "/metrics",
    "/", "/sweeps/1", "/sweeps/2", "/sweeps/3", "/sweeps/1?status=succeeded",
    "/sweeps/1?offset=2", "/sweeps/99",
    "/runs/1", "/runs/4", "/runs/5", "/runs/6", "/runs/9", "/runs/11", "/runs/99",
    "/runs/1/config.json",
]
CLI = [["status"], ["status", "1"], ["status", "2"], ["status", "3"], ["runs", "1"],
       ["runs", "2"]]


def normalise(route, text):
    """What varies between two runs of the test, replaced by a placeholder."""
    if route == "/metrics":  # traffic counters: only the store's counts stay
        return "\n".join(l for l in text.splitlines() if l.startswith("scalesweep_runs{")) + "\n"
    text = re.sub(r'("lease_until"\s*:\s*)"[^"]*"', r'\1"<lease>"', text)
    text = text.replace(str(api_port), "<port>")
    return text


def golden_name(route):
    return re.sub(r"[^A-Za-z0-9]+", "_", route).strip("_") or "overview"


def same(want, got):
    """Equal answers: the status line and content type exactly, a JSON body
    as the values it holds (PostgreSQL and the C writers space and order
    keys differently, and write 1e+15 where another writes 1000000000000000:
    no client can tell them apart), any other body byte for byte."""
    if want == got:
        return True
    wh, _, wb = want.partition("\n")
    gh, _, gb = got.partition("\n")
    if wh != gh or "json" not in wh:
        return False
    try:
        return json.loads(wb) == json.loads(gb)
    except ValueError:
        return False


def compare(name, got):
    path = os.path.join(GOLDEN, name)
    if UPDATE:
        with open(path, "w") as f:
            f.write(got)
        return True
    if not os.path.exists(path):
        print(f"FAIL: {name}: no golden file {path} (make them with --update)", file=sys.stderr)
        return False
    want = open(path).read()
    if same(want, got):
        return True
    diff = difflib.unified_diff(want.splitlines(), got.splitlines(), "golden/" + name, "now",
                                lineterm="", n=1)
    print(f"FAIL: {name} differs:\n" + "\n".join(list(diff)[:40]), file=sys.stderr)
    return False


try:
    start()
    for i, (name, sizes, gpus) in enumerate(
            [("done", (32, 48, 64, 96, 32), 0), ("live", (32, 48, 64, 96), 1),
             ("tuned", (32, 48, 64), 0)]):
        st, doc = api_request(api_port, token, "POST", "/api/sweeps", spec(name, sizes, gpus))
        check(st == 201 and doc.get("id") == i + 1, f"submit {name}: {st} {doc}")
    stop()
    psql(FILL)
    start()
    # the first lease tick after start renews the running run's lease; wait
    # for it so that a refit or status settle it starts has ended too
    end = time.time() + 20
    while "running run(s) given a full lease" not in open(os.path.join(tmp, "scheduler.log")).read():
        check(time.time() < end, "the scheduler's first lease tick did not come")
        time.sleep(0.1)
    time.sleep(1)
    ok = True
    if UPDATE:
        os.makedirs(GOLDEN, exist_ok=True)
    for route in ROUTES:
        st, ctype, body = get(route)
        got = f"{st} {ctype}\n{normalise(route, body)}"
        # .txt, the pages' too: data, not sources (no tool should read them as HTML)
        ok = compare(golden_name(route) + ".txt", got) and ok
    for args in CLI:
        p = subprocess.run([BIN, *args, "--url", f"http://127.0.0.1:{api_port}"],
                           capture_output=True, text=True, timeout=30)
        got = f"exit {p.returncode}\n{normalise('cli', p.stdout)}--- stderr\n" \
              f"{normalise('cli', p.stderr)}"
        ok = compare("cli_" + "_".join(args) + ".txt", got) and ok
    check(procs["scheduler"].poll() is None, "the scheduler exited")
    check(ok, "answers differ from tests/integration/golden/ (see above)")
    print("api_golden: %d routes and %d CLI printouts as in tests/integration/golden/%s"
          % (len(ROUTES), len(CLI), " (rewritten)" if UPDATE else ""))
except Failed as e:
    print("FAIL:", e, file=sys.stderr)
    print(open(os.path.join(tmp, "scheduler.log")).read()[-3000:], file=sys.stderr)
    sys.exit(1)
finally:
    stop()
    shutil.rmtree(tmp, ignore_errors=True)

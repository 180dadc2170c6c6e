#!/usr/bin/env python3
"""The cluster runtime end to end, against a throwaway PostgreSQL
(run through tests/integration/run_with_pg.sh, which sets SCALESWEEP_TEST_DB
and PGTEST_SH) and the real binaries on free ports:

- submit a sweep; two workers run it to completion;
- kill -9 a worker mid-run: its run's lease expires, the run finishes on the
  other worker, resuming from its checkpoint;
- restart the scheduler mid-sweep: workers reconnect, the sweep finishes;
- stop PostgreSQL for a few seconds mid-sweep: nothing is lost;
- at the end every run succeeded and every run's metric steps are exactly
  1..steps, no gap, no duplicate (the primary key forbids duplicates; the
  test checks the count and the range);
- the API's bad-input answers (400 with the JSON path, 401, 404, 405, 409,
  413) and a misbehaving worker connection leave the scheduler serving.

Usage: test_runtime.py SCALESWEEP_BINARY
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from harness import free_port, http_request, json_or_bytes, make_token, psql, wait_healthz

BIN = sys.argv[1]
DB = os.environ["SCALESWEEP_TEST_DB"]
PGTEST = os.environ["PGTEST_SH"]
T0 = time.time()
TIMEOUT = 240  # seconds for the whole sweep
STEPS = 1000


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)


tmp = tempfile.mkdtemp(prefix="ss-runtime-")
token = make_token(tmp)
api_port, wport = free_port(), free_port()
procs = {}


def start_scheduler():
    log = open(os.path.join(tmp, "scheduler.log"), "a")
    procs["scheduler"] = subprocess.Popen(
        [BIN, "scheduler", "--database", DB, "--token-file", token,
         "--listen", f"127.0.0.1:{api_port}", "--workers", f"127.0.0.1:{wport}",
         "--checkpoints", os.path.join(tmp, "ckpt"), "--lease-seconds", "4"],
        stdout=log, stderr=log)
    if not wait_healthz(request):
        fail("the scheduler did not come up; see " + tmp + "/scheduler.log")


def start_worker(name):
    log = open(os.path.join(tmp, f"{name}.log"), "a")
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    procs[name] = subprocess.Popen(
        [BIN, "worker", "--scheduler", f"127.0.0.1:{wport}", "--token-file", token,
         "--cpu-slots", "1", "--work-dir", os.path.join(tmp, name), "--name", name],
        stdout=log, stderr=log, env=env, start_new_session=True)


def request(method, path, body=None, auth=True, headers=None):
    h = dict(headers or {})
    if auth:
        h["Authorization"] = "Bearer " + open(token).read().strip()
    st, data, _ = http_request(api_port, method, path, body, h)
    return st, json_or_bytes(data)


def cleanup():
    for name, p in procs.items():
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL) if name != "scheduler" else p.kill()
            except ProcessLookupError:
                pass
            p.wait()


def runs_of(sweep):
    st, s = request("GET", f"/api/sweeps/{sweep}?limit=10000")
    if st != 200:
        fail(f"GET /api/sweeps/{sweep}: {st} {s}")
    return s["runs"]


try:
    start_scheduler()
    start_worker("w1")
    start_worker("w2")
    # a peer that connects to the worker port and never says hello: the
    # scheduler closes it after a lease (4 s here); checked at the end
    idle = socket.create_connection(("127.0.0.1", wport), timeout=5)
    idle_since = time.time()

    # each run: 1 layer, d 32, T 32, batch 8 -> 256 tokens/step; STEPS steps
    # (a few seconds); the scheduler makes it checkpoint every tenth of it
    spec = {
        "name": "runtime-test",
        "method": "runs",
        "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                 "train": {"batch_size": 8, "lr": 0.003},
                 "eval": {"every_tokens": STEPS * 256 // 4, "tokens": 256}, "threads": 1},
        "runs": [{"train": {"tokens": STEPS * 256, "seed": i}} for i in range(1, 7)],
        "resources": {"cpus": 1},
        "max_attempts": 5,
    }
    st, body = request("POST", "/api/sweeps", spec)
    if st != 201:
        fail(f"submit: {st} {body}")
    sweep = body["id"]
    if body["runs"] != 6:
        fail(f"submit planned {body['runs']} runs, expected 6")
    # an identical spec is refused, naming the first
    st, body = request("POST", "/api/sweeps", spec)
    if st != 409 or body.get("id") != sweep:
        fail(f"resubmitting the same spec: {st} {body}, expected 409 naming sweep {sweep}")

    # kill -9 the worker of a run that is under way, once it has checkpointed
    victim = None
    while time.time() - T0 < TIMEOUT and victim is None:
        for r in runs_of(sweep):
            if r["status"] == "running" and (r.get("checkpoint_step") or 0) >= STEPS // 10:
                victim = r
                break
        time.sleep(0.2)
    if victim is None:
        fail("no run reached a checkpoint while running: " + json.dumps(runs_of(sweep))[:1500])
    st, workers = request("GET", "/api/workers")
    wname = next(w["name"] for w in workers if w["id"] == victim["worker"])
    os.killpg(procs[wname].pid, signal.SIGKILL)  # the worker and its trainer
    procs[wname].wait()
    # the runs that worker held when it died (the victim may just have ended)
    lost = [int(x) for x in psql(f"SELECT id FROM runs WHERE worker = {victim['worker']} "
                                  "AND status = 'running'").split()]
    if not lost:
        fail(f"run {victim['id']} finished before its worker could be killed; make runs longer")
    victim = next(r for r in runs_of(sweep) if r["id"] == lost[0])
    print(f"killed worker {wname} running run {victim['id']} at checkpoint step "
          f"{victim['checkpoint_step']}")

    # restart the scheduler mid-sweep
    time.sleep(1.0)
    procs["scheduler"].send_signal(signal.SIGTERM)
    procs["scheduler"].wait(timeout=20)
    start_scheduler()
    print("scheduler restarted")
    start_worker(wname)  # the killed worker's host comes back

    # stop PostgreSQL for 3 seconds
    time.sleep(1.0)
    subprocess.run(["bash", "-c", '. "$PGTEST_SH" && pg_server_stop && sleep 3 && '
                    'pg_server_start'], check=True)
    print("PostgreSQL was stopped for 3 s")
    for _ in range(100):  # the scheduler reconnects with backoff (at most 5 s)
        if request("GET", "/healthz")[0] == 200:
            break
        time.sleep(0.1)
    else:
        fail("the scheduler did not reconnect to PostgreSQL within 10 s")

    # bad input while the sweep runs: the scheduler keeps serving
    checks = [
        (("POST", "/api/sweeps", b"{not json"), 400),
        (("POST", "/api/sweeps", {"name": "x", "method": "grid", "grid": {"tokens": "many"}}),
         400),
        (("GET", "/api/nothing-here", None), 404),
        (("DELETE", "/api/sweeps", None), 405),
        (("POST", "/api/sweeps", b"{" + b" " * (2 << 20) + b"}"), 413),
        (("GET", "/api/sweeps/999999", None), 404),
    ]
    for (m, p, b), want in checks:
        st, body = request(m, p, b)
        if st != want:
            fail(f"{m} {p}: {st}, expected {want}: {str(body)[:200]}")
        if want >= 400 and want != 413 and not (isinstance(body, dict) and "error" in body):
            fail(f"{m} {p}: error body is not {{\"error\": ...}}: {str(body)[:200]}")
    st, body = request("POST", "/api/sweeps",
                       {"name": "x", "method": "grid", "grid": {"tokens": "many"}})
    paths = [p["path"] for p in body["error"].get("problems", [])]
    if not any(p.startswith("$.grid") for p in paths):
        fail(f"invalid spec: no problem names its JSON path: {body}")
    st, _ = request("POST", "/api/sweeps", spec, auth=False)
    if st != 401:
        fail(f"unauthenticated submit: {st}, expected 401")
    # a worker that speaks garbage, then one with a wrong token
    for line in (b"this is not json\n",
                 json.dumps({"type": "hello", "version": 1, "token": "wrong-token-000000",
                             "name": "intruder", "host": "x", "gpus": [], "cpu_slots": 1,
                             "runs": []}).encode() + b"\n"):
        s = socket.create_connection(("127.0.0.1", wport), timeout=5)
        s.sendall(line)
        reply = s.recv(4096)
        if b'"error"' not in reply:
            fail(f"bad worker message got {reply!r}, expected an error and a disconnect")
        s.close()
    if request("GET", "/healthz")[0] != 200:
        fail("the scheduler stopped serving after bad input")
    time.sleep(max(0, idle_since + 6 - time.time()))
    idle.settimeout(2)
    try:
        got = b""
        while True:  # the error line (when it got out before the close), then EOF
            chunk = idle.recv(4096)
            if not chunk:
                break
            got += chunk
    except socket.timeout:
        fail(f"a peer that never said hello is still connected after a lease: {got!r}")
    except OSError:
        pass  # reset: closed
    idle.close()
    print("bad input: 400 (with paths), 401, 404, 405, 409, 413, bad workers refused")

    # wait for the sweep
    while time.time() - T0 < TIMEOUT:
        runs = runs_of(sweep)
        if all(r["status"] in ("succeeded", "failed", "cancelled") for r in runs):
            break
        time.sleep(0.5)
    else:
        fail("the sweep did not finish in time: " +
             ", ".join(f"{r['id']}:{r['status']}" for r in runs_of(sweep)))
    bad = [r for r in runs if r["status"] != "succeeded"]
    if bad:
        fail(f"runs not succeeded: {bad}")
    victim_now = next(r for r in runs if r["id"] == victim["id"])

    # paging and sorting of a sweep's runs (the status page and the CLI use them)
    st, page = request("GET", f"/api/sweeps/{sweep}?limit=2&offset=1&sort=flops&order=desc")
    by_flops = sorted(runs, key=lambda r: (-r["flops"], -r["id"]))
    if (st != 200 or page["runs_total"] != 6 or page["counts"]["succeeded"] != 6
            or [r["id"] for r in page["runs"]] != [r["id"] for r in by_flops[1:3]]):
        fail(f"GET /api/sweeps/{sweep}?limit=2&offset=1&sort=flops&order=desc: {st} "
             f"{str(page)[:300]}")
    st, page = request("GET", f"/api/sweeps/{sweep}/runs?status=failed")
    if st != 200 or page["runs_total"] != 0 or page["runs"] != [] or "spec" in page:
        fail(f"GET /api/sweeps/{sweep}/runs?status=failed: {st} {str(page)[:300]}")
    for q in ("limit=-1", "limit=10001", "offset=x", "status=done", "sort=config",
              "order=up", "limit=%zz"):
        st, body = request("GET", f"/api/sweeps/{sweep}?{q}")
        if st != 400 or "error" not in body:
            fail(f"GET /api/sweeps/{sweep}?{q}: {st}, expected 400: {str(body)[:200]}")
    if victim_now["attempt"] < 2:
        fail(f"run {victim['id']} was not re-run after its worker died: {victim_now}")

    # metrics: exactly steps 1..STEPS for every run, each with its loss
    rows = psql("SELECT run_id, count(*), min(step), max(step), "
                "count(train_loss) FROM metrics GROUP BY run_id ORDER BY run_id")
    got = {int(l.split("|")[0]): l.split("|")[1:] for l in rows.splitlines()}
    for r in runs:
        c = got.get(r["id"])
        want = [str(STEPS), "1", str(STEPS), str(STEPS)]
        if c != want:
            fail(f"run {r['id']}: metrics count/min/max/with-loss {c}, expected {want}")
    val = psql(f"SELECT count(val_loss) FROM metrics WHERE run_id = {victim['id']}")
    if val != "4":
        fail(f"run {victim['id']}: {val} evaluations stored, expected 4")
    st, m = request("GET", "/metrics")
    if st != 200 or b"scalesweep_metric_rows_stored_total" not in m:
        fail("/metrics lacks the counters")
    # the CLI: status, runs, reproduce (same config, same thread count: the
    # same losses to the last bit, docs/design.md#determinism), cancel
    env = dict(os.environ, SCALESWEEP_URL=f"http://127.0.0.1:{api_port}",
               SCALESWEEP_TOKEN=open(token).read().strip())
    def cli(*args):
        return subprocess.run([BIN, *args], capture_output=True, text=True, env=env)
    for _ in range(50):  # the sweep's status follows its runs within a second
        out = cli("status")
        if out.returncode == 0 and "runtime-test" in out.stdout and "succeeded" in out.stdout:
            break
        time.sleep(0.1)
    else:
        fail(f"scalesweep status: {out.returncode} {out.stdout} {out.stderr}")
    out = cli("runs", str(sweep), "--json")
    if out.returncode != 0 or len(json.loads(out.stdout)) != 6:
        fail(f"scalesweep runs --json: {out.returncode} {out.stdout[:300]} {out.stderr}")
    # reproduce --on --wait: on the worker that did not end the original
    # (by name), and the new run's curve is compared with the original's
    st, v = request("GET", f"/api/runs/{victim['id']}")
    other = "w1" if v["attempts"][-1]["worker"] == "w2" else "w2"
    out = cli("reproduce", str(victim["id"]), "--on", other, "--wait")
    if out.returncode != 0 or f"reproduces run {victim['id']} exactly" not in out.stdout or \
            f"reproducing run {victim['id']} on {other}" not in out.stdout:
        fail(f"scalesweep reproduce --on {other} --wait: {out.returncode} {out.stdout} {out.stderr}")
    rep = int(out.stdout.split()[1])
    st, r = request("GET", f"/api/runs/{rep}")
    if r["run"]["status"] != "succeeded" or r["run"]["reproduces"] != victim["id"]:
        fail(f"reproduced run: {r['run']}")
    if r["run"]["on_worker"] != other or [a["worker"] for a in r["attempts"]] != [other]:
        fail(f"reproduce --on {other}: on_worker {r['run']['on_worker']!r}, attempts on "
             f"{[a['worker'] for a in r['attempts']]}")
    st, page = request("GET", f"/runs/{rep}")
    if f"Runs on</th><td>only the worker named, or on the host, {other}".encode() not in page:
        fail(f"/runs/{rep}: does not say it runs on {other} only")
    # a worker that never connected is refused (404, the CLI exit 2, naming
    # the connected ones); a bad "on" is 400 at $.on; one that connected
    # before but is gone: the run waits for it (no attempt), says why, and
    # holds back no other run
    out = cli("reproduce", str(victim["id"]), "--on", "nowhere")
    if out.returncode != 2 or 'no worker named "nowhere"' not in out.stderr or \
            "w1 (host" not in out.stderr:
        fail(f"reproduce --on nowhere: {out.returncode} {out.stderr}")
    for bad, where in (({"on": ""}, "$.on"), ({"on": 7}, "$.on"), ({"on": "a\nb"}, "$.on"),
                       ({"where": "w1"}, "$.where"), ([], "$")):
        st, body = request("POST", f"/api/runs/{victim['id']}/reproduce", bad)
        if st != 400 or body["error"].get("path") != where:
            fail(f"POST reproduce {bad}: {st} {body}, expected 400 at {where}")
    psql("INSERT INTO workers (name, host) VALUES ('gone', 'gone-host')")
    st, pinned = request("POST", f"/api/runs/{victim['id']}/reproduce", {"on": "gone-host"})
    if st != 201 or pinned.get("on_worker") != "gone-host":
        fail(f"reproduce on a worker that is gone: {st} {pinned}")
    out = cli("reproduce", str(victim["id"]))  # unpinned, queued behind it: it starts
    free_run = int(out.stdout.split()[1])
    for _ in range(100):
        st, fr = request("GET", f"/api/runs/{free_run}")
        if fr["run"]["status"] != "queued":
            break
        time.sleep(0.1)
    st, pr = request("GET", f"/api/runs/{pinned['id']}")
    if pr["run"]["status"] != "queued" or pr["run"]["attempt"] != 0 or \
            'only on worker "gone-host"' not in pr.get("waiting", "") or \
            fr["run"]["status"] == "queued":
        fail(f"a run for a gone worker: {pr['run']['status']} attempt {pr['run']['attempt']}, "
             f"waiting {pr.get('waiting')!r}; the run behind it: {fr['run']['status']}")
    for rid in (pinned["id"], free_run):
        if cli("cancel", str(rid), "--run").returncode != 0:
            fail(f"scalesweep cancel {rid} --run")
    if r["run"]["final_val_loss"] != victim_now["final_val_loss"]:
        fail(f"run {victim['id']} reproduced with val loss {r['run']['final_val_loss']}, "
             f"originally {victim_now['final_val_loss']} (resumed from a checkpoint, on "
             "another worker): expected the same bits")
    c = r["reproduction"]
    if not (c and c["identical"] and c["steps_compared"] == STEPS and c["max_abs_diff"] == 0):
        fail(f"GET /api/runs/{rep}: reproduction {c}, expected identical over {STEPS} steps")
    # the run's page says the same, and the original's links to it
    st, page = request("GET", f"/runs/{rep}")
    want = (f'<a href="/runs/{victim["id"]}">run {victim["id"]}</a>: '
            f'<strong class="identical">identical</strong>, every training and validation '
            f'loss of {STEPS} steps')
    if st != 200 or want.encode() not in page:
        fail(f"/runs/{rep}: {st}, lacks {want!r}")
    st, page = request("GET", f"/runs/{victim['id']}")
    if st != 200 or f'Reproduced by</th><td><a href="/runs/{rep}">run {rep}</a> (succeeded)'.encode() not in page:
        fail(f"/runs/{victim['id']}: {st}, does not link its reproduction run {rep}")
    # where each attempt ran (migration 014): the killed victim's two
    # attempts each say their worker, host, CPU, kernels and code
    if b"Where it ran" not in page:
        fail(f"/runs/{victim['id']}: no 'Where it ran' section")
    st, v = request("GET", f"/api/runs/{victim['id']}")
    att = v["attempts"]
    if len(att) < 2 or [a["attempt"] for a in att] != list(range(1, len(att) + 1)):
        fail(f"run {victim['id']} was killed and resumed: attempts {att}")
    for a in att:
        where = a["environment"]
        missing = [k for k in ("host", "cpu", "cpu_kernels", "blas_core", "threads", "scalesweep")
                   if k not in where]
        if missing or where["worker"] != a["worker"]:
            fail(f"run {victim['id']} attempt {a['attempt']}: environment {where} lacks {missing}")
    if v["run"]["code_version"] != att[-1]["environment"]["scalesweep"] or \
            v["run"]["environment"] != att[-1]["environment"]:
        fail(f"run {victim['id']}: code_version {v['run']['code_version']!r} and environment "
             f"{v['run']['environment']} are not its last attempt's")
    # a curve that differs at one step: the largest difference and where
    psql(f"UPDATE metrics SET train_loss = train_loss + 0.5 WHERE run_id = {rep} AND step = 7")
    st, r = request("GET", f"/api/runs/{rep}")
    c = r["reproduction"]
    if c["identical"] or abs(c["max_abs_diff"] - 0.5) > 1e-9 or c["at_step"] != 7:
        fail(f"a reproduction that differs at step 7 by 0.5: {c}")
    st, page = request("GET", f"/runs/{rep}")
    if b'<strong class="flag">differs</strong>, largest difference 0.5 at step 7' not in page:
        fail(f"/runs/{rep} after a changed loss at step 7: lacks the difference")
    # in the same environment that difference is a defect; with the
    # original's OpenBLAS kernels recorded as another set, it is explained,
    # and the final loss within the run's fp32 tolerance (1e-4 relative)
    if not c["same_environment"] or c["environment_differs"] is not None:
        fail(f"a reproduction on the same machine: same_environment {c['same_environment']}, "
             f"differs {c['environment_differs']}")
    psql(f"UPDATE runs SET environment = jsonb_set(environment, '{{blas_core}}', '\"SkylakeX\"') "
         f"WHERE id = {victim['id']}")
    st, r = request("GET", f"/api/runs/{rep}")
    c = r["reproduction"]
    d = c["environment_differs"] or {}
    if c["same_environment"] or list(d) != ["blas_core"] or d["blas_core"][0] != "SkylakeX" or \
            not c["within_tolerance"] or c["tolerance"] != 1e-4:
        fail(f"a reproduction whose original recorded other BLAS kernels: {c}")
    st, page = request("GET", f"/runs/{rep}")
    if b'The environments differ in blas_core (' not in page or b'within the run' not in page:
        fail(f"/runs/{rep}: does not say which part of the environment differed")
    # a cancelled reproduction stored a prefix of the curve: compared as far as both went
    psql(f"DELETE FROM metrics WHERE run_id = {rep} AND step >= 7; "
         f"UPDATE runs SET status = 'cancelled', final_val_loss = NULL WHERE id = {rep}")
    st, r = request("GET", f"/api/runs/{rep}")
    c = r["reproduction"]
    if c["identical"] or not c["identical_where_both"] or c["steps_compared"] != 6 or \
            c["status_reproduced"] != "cancelled":
        fail(f"a reproduction cancelled after 6 steps: {c}")
    st, page = request("GET", f"/runs/{rep}")
    if b'identical as far as both went</strong>, every training and validation loss of the ' \
            b'6 steps both stored; this run was cancelled after 6 steps' not in page:
        fail(f"/runs/{rep} cancelled after 6 steps: lacks the comparison of what both stored")
    # only a finished run can be reproduced: a queued or running one is refused (409)
    st, new = request("POST", f"/api/runs/{victim['id']}/reproduce", {})
    if st != 201:
        fail(f"POST /api/runs/{victim['id']}/reproduce: {st} {new}")
    st, body = request("POST", f"/api/runs/{new['id']}/reproduce", {})
    if st != 409 or "can be reproduced once it has finished" not in json.dumps(body):
        fail(f"reproducing run {new['id']} before it finished: {st} {body}, expected 409")
    out = cli("reproduce", str(new["id"]), "--wait")
    if out.returncode != 2 or "once it has finished" not in out.stderr:
        fail(f"scalesweep reproduce of an unfinished run: {out.returncode} {out.stderr}")
    if cli("cancel", str(new["id"]), "--run").returncode != 0:
        fail(f"scalesweep cancel {new['id']} --run")
    st, r = request("GET", f"/api/runs/{victim['id']}")
    if r.get("reproduction") is not None:
        fail(f"an original run has no reproduction object: {r.get('reproduction')}")
    out = cli("status", "1", "--wait")
    if out.returncode != 2:
        fail(f"scalesweep status --wait (not its option): exit {out.returncode}, expected 2")
    out = cli("cancel", "999999")
    if out.returncode != 2:
        fail(f"scalesweep cancel of a missing sweep: exit {out.returncode}, expected 2")
    out = cli("status", "--url", "http://127.0.0.1:1")
    if out.returncode != 1 or "cannot reach" not in out.stderr:
        fail(f"scalesweep status with no scheduler: {out.returncode} {out.stderr}")
    print(f"CLI: status, runs, reproduce (identical final loss "
          f"{victim_now['final_val_loss']!r}), cancel")

    print(f"all {len(runs)} runs succeeded; run {victim['id']} took {victim_now['attempt']} "
          f"attempts; metrics complete and without duplicates ({time.time() - T0:.0f} s)")
    # a sanitizer build reports into the logs: any report fails the test
    for name in os.listdir(tmp):
        if name.endswith(".log"):
            text = open(os.path.join(tmp, name), errors="replace").read()
            if "ERROR: AddressSanitizer" in text or "ERROR: LeakSanitizer" in text or \
                    "runtime error:" in text:
                fail(f"a sanitizer report in {tmp}/{name}")
            if open(token).read().strip() in text:
                fail(f"the cluster token appears in {tmp}/{name}")
    print("all checks passed")
finally:
    cleanup()

#!/usr/bin/env python3
"""Tuning the learning rate on a muP proxy (docs/sweeps.md, "Tuning the
learning rate on a muP proxy"), end to end: the real scheduler and worker
against a throwaway PostgreSQL (run through tests/integration/run_with_pg.sh),
the worker training with tests/integration/fake_law_trainer.py, whose muP runs
end at L = 2 + (ln(lr / 0.003))^2 / 4 + 50 / d_model: the best rate is 0.003 at
every width, a known answer.

- `scalesweep plan` shows the tune's runs and the study at its placeholder
  rate; a spec without "parametrization": "mup" is refused at its path (2).
- A grid study with "lr_tune" (4 rates) is submitted with the tune's 4 runs
  only; once they have ended the scheduler chooses 0.003, records why (each
  rate's loss, the proxy, no edge warning) and adds the study's 2 runs at it:
  the configs `scalesweep plan` gives the spec at 0.003, hash for hash. The
  API, `scalesweep status` and the sweep's page show the decision.
- Rates 0.01, 0.03, 0.1, each with a seed that fails: the decision takes the
  runs that finished, chooses 0.01 and warns that it lies at the grid's edge.
- Every tune run failing: the tune cannot decide, says why, adds nothing, and
  the sweep fails.
- A restart between the tune's end and the study's insert: the sweep's row is
  held locked (psql) while the last tune run ends, so that the statement
  storing the decision and adding the study waits; the scheduler is killed
  there, that statement ended (pg_terminate_backend), the lock released: the
  tune's runs have all ended, nothing is decided and no study run exists. The next scheduler
  decides and adds the 2 runs; killed again while they train, the one after
  it adds nothing.
- With the built-in trainer, where `scalesweep train` runs a muP config on
  this build (until the trainer's muP support lands, a run config with
  "parametrization": "mup" may not train): the same tune, the rate chosen
  being the measured losses' argmin.

Usage: test_lr_tune.py SCALESWEEP_BINARY
"""
import json
import os
import signal
import subprocess
import sys
import time

from harness import (FAKE_LAW as FAKE, SANITIZED, Rig, killed_while_locked, lock_sweep_row, psql,
                     statement_waits, until)

BIN = sys.argv[1]
TIMEOUT = 300 if SANITIZED else 90

rig = Rig(BIN, "ss-lrtune-", timeout=60, logs=("scheduler", "w", "wb"))
tmp, token, api_port, procs = rig.tmp, rig.token, rig.api_port, rig.procs
fail, cli, stop, request = rig.fail, rig.cli, rig.stop, rig.request


def start_scheduler():
    rig.start_scheduler("--checkpoints", os.path.join(tmp, "ckpt"), "--retry-after-seconds", "0")


def start_worker(name, fake=True, seconds="0"):
    rig.start_worker(name, "--cpu-slots", "2", *(["--bin", FAKE] if fake else []),
                     env={"FAKE_LAW_SECONDS": seconds})


def sweep_doc(sweep):
    return rig.get(f"/api/sweeps/{sweep}?limit=100")


def wait_done(sweep, total):
    """Waits until the sweep has total runs, none queued or running, its
    tune no longer tuning or deciding, and its status updated; its document."""
    got = {}

    def done():
        d = got["d"] = sweep_doc(sweep)
        c, t = d["counts"], d.get("lr_tune") or {}
        return c["total"] == total and c["queued"] + c["running"] == 0 and \
            t.get("status") not in ("tuning", "deciding") and \
            d["status"] not in ("queued", "running")
    if not until(done, TIMEOUT):
        fail(f"sweep {sweep} did not end with {total} runs in {TIMEOUT} s: {got.get('d')}")
    return got["d"]


def runs_of(sweep, part):
    """(train.lr, parametrization, base_width, config_hash) of the sweep's runs of part."""
    out = psql(f"SELECT config->'train'->>'lr', config->'model'->>'parametrization', "
               f"config->'model'->>'base_width', config_hash FROM runs WHERE sweep_id = {sweep} "
               f"AND part = '{part}' ORDER BY id")
    return [tuple(line.split("|")) for line in out.splitlines() if line]


BASE = {"model": {"seq_len": 16, "parametrization": "mup", "base_width": 32},
        "data": {"synthetic": {"words": 256}}, "train": {"batch_size": 8}}


def spec(name, lrs, **extra):
    s = {"name": name, "method": "grid", "base": json.loads(json.dumps(BASE)),
         "grid": {"params": [2e4, 5e4], "tokens": [2e5]},
         "lr_tune": {"lr": lrs, "tokens": 65536}, "resources": {"cpus": 1}}
    s.update(extra)
    return s


def submit(s, want_runs):
    st, body = request("POST", "/api/sweeps", s)
    if st != 201 or body["runs"] != want_runs:
        fail(f"submit {s['name']}: {st} {body}, expected {want_runs} tune runs")
    return body["id"]


def study_hashes(s, lr):
    """The config hashes `scalesweep plan --json` gives the spec's study at lr."""
    st = json.loads(json.dumps(s))
    del st["lr_tune"]
    st["base"]["train"]["lr"] = lr
    path = os.path.join(tmp, "study.json")
    json.dump(st, open(path, "w"))
    p = subprocess.run([BIN, "plan", path, "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"scalesweep plan of the study at {lr}: {p.stderr}")
    return sorted(r["config_hash"] for r in json.loads(p.stdout))


def real_trainer_runs():
    """Whether this build's `scalesweep train` trains a tiny muP config."""
    cfg = {"model": {"n_layer": 1, "d_model": 16, "n_head": 2, "seq_len": 16,
                     "parametrization": "mup", "base_width": 16},
           "data": {"synthetic": {"words": 64}},
           "train": {"batch_size": 4, "tokens": 640, "lr": 0.01}, "threads": 1}
    path = os.path.join(tmp, "probe.json")
    json.dump(cfg, open(path, "w"))
    p = subprocess.run([BIN, "train", "--config", path], capture_output=True, text=True,
                       timeout=120)
    return p.returncode


try:
    t0 = time.time()
    # ---- the plan ----------------------------------------------------------------------
    a = spec("tune-a", [1e-3, 3e-3, 1e-2, 3e-2])
    path = os.path.join(tmp, "a.json")
    json.dump(a, open(path, "w"))
    p = subprocess.run([BIN, "plan", path], capture_output=True, text=True)
    if p.returncode != 0 or p.stdout.count("lr_tune ") != 4 or \
            "then the study (grid) at the rate the tune chooses: 2 runs, planned here at " \
            "lr = 0.003" not in p.stdout:
        fail(f"scalesweep plan: exit {p.returncode}: {p.stdout} {p.stderr}")
    sp = json.loads(json.dumps(a))
    del sp["base"]["model"]["parametrization"], sp["base"]["model"]["base_width"]
    json.dump(sp, open(path, "w"))
    p = subprocess.run([BIN, "plan", path], capture_output=True, text=True)
    if p.returncode != 2 or "$.base.model.parametrization: found none" not in p.stderr:
        fail(f"scalesweep plan without mup: exit {p.returncode}: {p.stderr}")
    print("plan: 4 tune runs, then the study at the placeholder 0.003; without mup: exit 2")

    start_scheduler()
    start_worker("w")

    # ---- three tunes: decided, at the edge with failures, undecided ----------------------
    sa = submit(a, 4)
    d = sweep_doc(sa)
    if (d.get("lr_tune") or {}).get("status") != "tuning":
        fail(f"a fresh tune's document: {d.get('lr_tune')}")
    b = spec("tune-b", [0.01, 0.03, 0.1], max_attempts=1)
    b["lr_tune"]["seeds"] = [1, 99]  # seed 99: the stand-in fails half-way
    sb = submit(b, 6)
    c = spec("tune-c", [0.001, 0.003, 0.01], max_attempts=1)
    c["lr_tune"]["seeds"] = [99]
    sc = submit(c, 3)

    d = wait_done(sa, 6)
    t = d["lr_tune"]
    if t["status"] != "decided" or t["lr"] != 0.003 or t["at_edge"] is not None or \
            t["warnings"] or t["study_runs"] != 2 or t["proxy"]["d_model"] != 32 or \
            [r["lr"] for r in t["rates"]] != [1e-3, 3e-3, 1e-2, 3e-2] or \
            [r["chosen"] for r in t["rates"]] != [False, True, False, False] or \
            any(r["loss"] is None or r["succeeded"] != 1 for r in t["rates"]):
        fail(f"tune-a's decision: {t}")
    if min(t["rates"], key=lambda r: r["loss"])["lr"] != 0.003 or "decided_at" not in t:
        fail(f"tune-a: 0.003 is not the argmin of the losses: {t}")
    study = runs_of(sa, "grid")
    if len(study) != 2 or any(float(r[0]) != 0.003 or r[1] != "mup" or r[2] != "32"
                              for r in study):
        fail(f"tune-a's study runs: {study}")
    if sorted(r[3] for r in study) != study_hashes(a, 0.003):
        fail(f"tune-a's study is not the plan of its spec at 0.003: {study}")
    if d["status"] != "succeeded" or d["counts"]["succeeded"] != 6:
        fail(f"tune-a: {d['status']} {d['counts']}")
    p = cli("status", str(sa))
    if p.returncode != 0 or "lr 0.003 chosen" not in p.stdout or "<- chosen" not in p.stdout:
        fail(f"scalesweep status {sa}: {p.stdout} {p.stderr}")
    html = subprocess.run(["curl", "-sf", "-H",
                           "Authorization: Bearer " + open(token).read().strip(),
                           f"http://127.0.0.1:{api_port}/sweeps/{sa}"],
                          capture_output=True, text=True).stdout
    if "Learning rate tuned on the proxy" not in html or "lr = 0.003" not in html or \
            "lrtune-table" not in html:
        fail(f"the sweep page does not show the tune: {html[:3000]}")
    print(f"tune-a: chose 0.003 of 4 rates, the study's 2 runs at it (the plan's configs); "
          "API, status and page show it")

    d = wait_done(sb, 8)
    t = d["lr_tune"]
    if t["status"] != "decided" or t["lr"] != 0.01 or t["at_edge"] != "low" or \
            not t["warnings"] or not t["warnings"][0].startswith(
                "best lr at the grid's edge; widen it") or \
            any(r["failed"] != 1 or r["succeeded"] != 1 for r in t["rates"]):
        fail(f"tune-b's decision: {t}")
    if [float(r[0]) for r in runs_of(sb, "grid")] != [0.01, 0.01]:
        fail(f"tune-b's study: {runs_of(sb, 'grid')}")
    p = cli("status", str(sb))
    if "warning: best lr at the grid's edge; widen it" not in p.stdout:
        fail(f"scalesweep status {sb}: {p.stdout}")
    print("tune-b: a failed seed at every rate; chose 0.01 from the runs that finished, "
          "flagged at the grid's edge")

    d = wait_done(sc, 3)
    t = d["lr_tune"]
    if t["status"] != "undecided" or t["lr"] is not None or "only 0 of the grid's 3 rates" \
            not in (t["reason"] or "") or d["counts"]["total"] != 3 or d["status"] != "failed":
        fail(f"tune-c: {d['status']} {t}")
    p = cli("status", str(sc))
    if "no rate chosen: only 0 of the grid's 3 rates" not in p.stdout:
        fail(f"scalesweep status {sc}: {p.stdout}")
    print("tune-c: every tune run failed: undecided, why, no study; the sweep failed")

    # ---- a restart between the tune's end and the study's insert --------------------------
    stop("w")
    start_worker("w", seconds="4")
    e = spec("tune-e", [1e-3, 3e-3, 1e-2])
    se = submit(e, 3)
    st, nb = request("GET", f"/api/sweeps/{se}/next?flops=1e13")
    if st != 409 or "still being tuned" not in nb["error"]["message"]:
        fail(f"next of a sweep still tuning: {st} {nb}")

    def tune_states():
        return psql(f"SELECT string_agg(status::text, ',' ORDER BY id) FROM runs "
                    f"WHERE sweep_id = {se} AND part = 'lr_tune'").split(",")
    # 2 slots: two tune runs, then the third alone
    if not until(lambda: sorted(tune_states()) == ["running", "succeeded", "succeeded"], TIMEOUT):
        fail(f"tune-e's last run did not start alone: {tune_states()}")
    lock = lock_sweep_row(se, "UPDATE", fail)
    if not until(lambda: tune_states() == ["succeeded"] * 3, TIMEOUT):
        fail(f"tune-e's runs did not end: {tune_states()}")
    # the statement that stores the decision and adds the study waits for the
    # row (a status update that changes nothing takes no lock)
    if not until(lambda: statement_waits("%dec AS (UPDATE sweeps%") > 0, TIMEOUT):
        fail("the scheduler's decision never waited for the sweep's row: "
             + psql("SELECT string_agg(left(query, 80), ' | ') FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock'"))
    held = psql(f"SELECT lr_tune IS NULL, (SELECT count(*) FROM runs WHERE sweep_id = {se}) "
                f"FROM sweeps WHERE id = {se}")
    if held != "t|3":
        fail(f"tune-e before the kill: {held}")
    held = killed_while_locked(stop, lock, se, "lr_tune")
    if held != "t|running|3":
        fail(f"tune-e after the kill: {held}, expected no decision, still running, 3 runs")
    print("tune-e: scheduler killed after the tune's runs ended, before its decision was "
          "stored: no decision, no study run")
    start_scheduler()
    if not until(lambda: len(runs_of(se, "grid")) == 2, TIMEOUT):
        fail(f"the restarted scheduler did not add tune-e's study: {runs_of(se, 'grid')}")
    # killed again while the study trains (the sweep unfinished: the next
    # scheduler checks it at start-up), it adds nothing more
    stop("scheduler", signal.SIGKILL)
    start_scheduler()
    d = wait_done(se, 5)
    if d["lr_tune"]["lr"] != 0.003 or d["status"] != "succeeded":
        fail(f"tune-e after the restarts: {d['status']} {d['lr_tune']}")
    n = psql(f"SELECT count(*), count(DISTINCT config_hash) FROM runs WHERE sweep_id = {se}")
    if n != "5|5" or sorted(r[3] for r in runs_of(se, "grid")) != study_hashes(e, 0.003):
        fail(f"tune-e after the restarts: {n} runs (distinct configs)")
    st, nb = request("GET", f"/api/sweeps/{se}/next?flops=1e13")
    if st == 409:
        fail(f"next of a tuned sweep: {st} {nb}")
    print("tune-e: the next scheduler decided 0.003 and added the 2 study runs; killed again "
          "while they trained, the next added none")

    # ---- the built-in trainer ------------------------------------------------------------
    rc = real_trainer_runs()
    if rc != 0:
        print(f"built-in trainer: skipped (scalesweep train exits {rc} on a muP config on this "
              "build)")
    else:
        stop("w")
        start_worker("wb", fake=False)
        r = {"name": "tune-real", "method": "grid",
             "base": {"model": {"seq_len": 16, "parametrization": "mup", "base_width": 16},
                      "data": {"synthetic": {"words": 64}}, "train": {"batch_size": 4}},
             "grid": {"params": [5e3, 1e4], "tokens": [16384]},
             "lr_tune": {"lr": [1e-3, 1e-2, 1e-1], "tokens": 16384}, "resources": {"cpus": 1}}
        sr = submit(r, 3)
        d = wait_done(sr, 5)
        t = d["lr_tune"]
        best = min((x for x in t["rates"] if x["loss"] is not None), key=lambda x: x["loss"])
        study = runs_of(sr, "grid")
        if t["status"] != "decided" or t["lr"] != best["lr"] or len(study) != 2 or \
                any(float(x[0]) != best["lr"] for x in study):
            fail(f"tune-real: {t} {study}")
        print(f"built-in trainer: chose {t['lr']} (losses "
              + ", ".join(f"{x['lr']:g}: {x['loss']:.4f}" for x in t["rates"])
              + "), the study's 2 runs at it")
    print(f"ok ({time.time() - t0:.0f} s)")
except SystemExit:
    raise
except Exception as ex:  # a scheduler that dies answers nothing: show its log
    import traceback
    fail(f"{ex!r}\n{traceback.format_exc()}")
finally:
    rig.close()

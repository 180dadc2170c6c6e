#!/usr/bin/env python3
"""An adaptive design end to end (docs/sweeps.md, "An adaptive design"): the
real scheduler and workers against a throwaway PostgreSQL (run through
tests/integration/run_with_pg.sh).

With tests/integration/fake_law_trainer.py, whose runs (train.seed 8) end at
the Chinchilla law L = 1.5 + 400/N^0.34 + 4000/D^0.28 with 1% noise fixed by
each run's shape and D, a known answer:
- `scalesweep plan` shows the question, the compute and the first round; an
  "adaptive" section beside method "grid" is refused at its path (exit 2).
- Sweep A: submitted with its first round only (9 of 25 candidates); the
  scheduler designs round after round until the design stops; the rounds are
  numbered, their costs add up to the compute spent, which stays within the
  compute allowed; every run in the sweep is one a round chose, once; the
  answer's interval holds the law's true N_opt(C*); the API, `scalesweep
  status`, `scalesweep fit --law adaptive` and the sweep's page show the
  rounds; the sweep succeeded.
- Sweep B, the same spec under another name, with a scheduler killed while
  the statement that stores round 1 waits for the sweep's row (held by psql
  while the first round's last runs end), and again while a later round
  trains: no round is stored twice or lost, and its rounds choose the very
  runs A's did (the design is deterministic given the points and the seed).
- Sweep C, where every run of one width fails (FAKE_LAW_FAIL_DMODEL): the
  failed runs are not waited on or chosen again, the design goes on to a
  stop, and the sweep succeeds.
With the built-in trainer (`scalesweep train`, WSD schedule): a small
adaptive study whose whole-trained runs keep their shorter candidates'
branch points (runs.keep_steps), report them (runs.kept), and a later round's
run starts from one of them (branch_of a run of an earlier round,
branch_path set at insert): its first metric is the step after the branch
point.

Usage: test_adaptive.py SCALESWEEP_BINARY
"""
import json
import math
import os
import re
import signal
import subprocess
import sys
import time

from harness import (FAKE_LAW as FAKE, SANITIZED, Rig, killed_while_locked, lock_sweep_row, psql,
                     statement_waits, until)

BIN = sys.argv[1]
TIMEOUT = 600 if SANITIZED else 150

rig = Rig(BIN, "ss-adaptive-", timeout=60, logs=("scheduler", "w", "wb", "wc", "wr"))
tmp, token, api_port, procs = rig.tmp, rig.token, rig.api_port, rig.procs
fail, cli, stop, request = rig.fail, rig.cli, rig.stop, rig.request


def start_scheduler():
    rig.start_scheduler("--checkpoints", os.path.join(tmp, "ckpt"), "--retry-after-seconds", "0")


def start_worker(name, fake=True, **env):
    rig.start_worker(name, "--cpu-slots", "2", *(["--bin", FAKE] if fake else []), env=env)


def sweep_doc(sweep):
    return rig.get(f"/api/sweeps/{sweep}?limit=1")


def wait_done(sweep):
    got = {}

    def done():
        d = got["d"] = sweep_doc(sweep)
        a = d.get("adaptive") or {}
        return d["status"] not in ("queued", "running") and a.get("status") != "running"
    if not until(done, TIMEOUT):
        fail(f"sweep {sweep} did not end in {TIMEOUT} s: {got.get('d')}")
    return got["d"]


def rounds_hashes(doc):
    return [[r["config_hash"] for r in x["runs"]] for x in doc["rounds"]]


def submit(s, want):
    st, body = request("POST", "/api/sweeps", s)
    if st != 201 or body["runs"] != want:
        fail(f"submit {s['name']}: {st} {body}, expected {want} runs (the first round)")
    return body["id"]


# the fake trainer's law, and its true N_opt at C* for C = 6ND
LAW_A, LAW_ALPHA, LAW_B, LAW_BETA = 400.0, 0.34, 4000.0, 0.28
C_STAR = 6.4e13


def true_n_opt(c):
    g = (LAW_ALPHA * LAW_A / (LAW_BETA * LAW_B)) ** (1 / (LAW_ALPHA + LAW_BETA))
    return g * (c / 6) ** (LAW_BETA / (LAW_ALPHA + LAW_BETA))


def spec(name, compute, **extra):
    s = {"name": name, "method": "isoflop",
         "base": {"model": {"seq_len": 16}, "data": {"synthetic": {"words": 256}},
                  "train": {"seed": 8}},
         "isoflop": {"flops": {"from": 1e12, "to": 1.6e13, "points": 5},
                     "params": [2e4, 5e4, 1e5, 2e5, 4e5]},
         "adaptive": {"flops": C_STAR, "precision": 0.1, "compute": compute, "round": 4},
         "resources": {"cpus": 1}}
    s.update(extra)
    return s


def grid_flops():
    """The whole grid's FLOPs, as `scalesweep plan` states them."""
    path = os.path.join(tmp, "probe.json")
    json.dump(spec("probe", 1e14), open(path, "w"))
    p = subprocess.run([BIN, "plan", path], capture_output=True, text=True)
    m = re.search(r"the whole grid of (\d+) candidates would train ([0-9.e+]+)", p.stdout)
    if p.returncode != 0 or not m or m.group(1) != "25" or \
            len(re.findall(r"^ +\d+  isoflop ", p.stdout, re.M)) != 9:
        fail(f"scalesweep plan: exit {p.returncode}: {p.stdout} {p.stderr}")
    return float(m.group(2))


try:
    t0 = time.time()
    # ---- the plan ----------------------------------------------------------------------
    grid = grid_flops()
    bad = spec("bad", grid)
    bad["method"] = "grid"
    bad["grid"] = {"params": [2e4, 5e4], "tokens": [1e6]}
    del bad["isoflop"]
    path = os.path.join(tmp, "bad.json")
    json.dump(bad, open(path, "w"))
    p = subprocess.run([BIN, "plan", path], capture_output=True, text=True)
    if p.returncode != 2 or "$.adaptive: found beside method \"grid\"" not in p.stderr:
        fail(f"scalesweep plan of adaptive beside grid: exit {p.returncode}: {p.stderr}")
    print(f"plan: the first round, 9 of 25 candidates (the grid trains {grid:.3g} FLOPs); "
          "beside method grid: exit 2")

    start_scheduler()
    start_worker("w")
    compute = grid / 2

    # ---- A: uninterrupted --------------------------------------------------------------
    sa = submit(spec("adaptive-a", compute), 9)
    d = sweep_doc(sa)
    if (d.get("adaptive") or {}).get("status") != "running" or d["adaptive"]["rounds"]:
        fail(f"a fresh adaptive sweep's document: {d.get('adaptive')}")
    d = wait_done(sa)
    a = d["adaptive"]
    rounds = a["rounds"]
    if a["status"] not in ("reached", "spent", "exhausted") or len(rounds) < 3 or \
            [r["round"] for r in rounds] != list(range(len(rounds))) or \
            rounds[0]["fitted"] or len(rounds[0]["runs"]) != 9 or \
            rounds[-1]["status"] != a["status"] or rounds[-1]["runs"]:
        fail(f"sweep A's design: {json.dumps(a)[:3000]}")
    spent = sum(r["cost"] for r in rounds)
    if abs(spent - a["spent"]) > 1e-6 * spent or a["spent"] > compute * (1 + 1e-9):
        fail(f"sweep A's compute: rounds add up to {spent}, spent {a['spent']}, "
             f"allowed {compute}")
    chosen = [h for hs in rounds_hashes(a) for h in hs]
    stored = psql(f"SELECT string_agg(config_hash, ',' ORDER BY id) FROM runs "
                  f"WHERE sweep_id = {sa}").split(",")
    if sorted(chosen) != sorted(stored) or len(set(stored)) != len(stored):
        fail(f"sweep A's runs are not the rounds' choices, once each: {len(chosen)} chosen, "
             f"{len(stored)} stored")
    last = rounds[-1]
    truth = true_n_opt(C_STAR)
    if not last["fitted"] or not (last["ci95"][0] <= truth <= last["ci95"][1]):
        fail(f"sweep A's answer {last.get('answer')} {last.get('ci95')} misses the true "
             f"N_opt {truth:.4g}")
    if d["status"] != "succeeded":
        fail(f"sweep A: {d['status']}")
    p = cli("status", str(sa))
    if p.returncode != 0 or "adaptive design: N_opt at C* = 6.4e+13" not in p.stdout or \
            "(space-filling)" not in p.stdout or "answer: N_opt = " not in p.stdout:
        fail(f"scalesweep status {sa}: {p.stdout} {p.stderr}")
    p = cli("fit", str(sa), "--law", "adaptive", "--json")
    if p.returncode != 0 or len(json.loads(p.stdout)["rounds"]) != len(rounds):
        fail(f"scalesweep fit {sa} --law adaptive --json: {p.stdout[:500]} {p.stderr}")
    html = subprocess.run(["curl", "-sf", "-H",
                           "Authorization: Bearer " + open(token).read().strip(),
                           f"http://127.0.0.1:{api_port}/sweeps/{sa}"],
                          capture_output=True, text=True).stdout
    if "Adaptive design" not in html or "adaptive-table" not in html or "Answer: N_opt" not in html:
        fail(f"the sweep page does not show the design: {html[:3000]}")
    print(f"A: {len(rounds)} rounds, {len(stored)} of 25 candidates, {a['spent']:.3g} of "
          f"{compute:.3g} FLOPs, stopped ({a['status']}); N_opt {last['answer']:.4g} "
          f"{last['ci95']} holds the truth {truth:.4g}; API, status, fit and page show it")

    # ---- B: the same design across scheduler restarts -----------------------------------
    stop("w")
    start_worker("wb", FAKE_LAW_SECONDS="2")
    sb = submit(spec("adaptive-b", compute), 9)

    def states():
        return psql(f"SELECT string_agg(status::text, ',' ORDER BY id) FROM runs "
                    f"WHERE sweep_id = {sb}").split(",")
    # every first-round run claimed (a claim waits for the sweep's row), the
    # last ones still training
    if not until(lambda: "queued" not in states() and "running" in states() and
                 psql(f"SELECT status FROM sweeps WHERE id = {sb}") == "running", TIMEOUT):
        fail(f"sweep B's first round did not reach its last runs: {states()}")
    # FOR NO KEY UPDATE: the round's statement (FOR UPDATE) waits, the fits'
    # inserts (a foreign key's FOR KEY SHARE) do not
    lock = lock_sweep_row(sb, "NO KEY UPDATE", fail)
    if not until(lambda: states() == ["succeeded"] * 9, TIMEOUT):
        fail(f"sweep B's first round did not end: {states()}; waiting: " +
             psql("SELECT string_agg(left(query, 300), ' | ') FROM pg_stat_activity "
                  "WHERE wait_event_type = 'Lock'"))
    if not until(lambda: statement_waits("%dec AS (UPDATE sweeps s SET adaptive%") > 0, TIMEOUT):
        fail("the scheduler's round never waited for the sweep's row")
    held = killed_while_locked(stop, lock, sb, "adaptive")
    if held != "t|running|9":
        fail(f"sweep B after the kill: {held}, expected no round stored, running, 9 runs")
    start_scheduler()
    if not until(lambda: psql(f"SELECT coalesce(jsonb_array_length(adaptive->'rounds'), 0) "
                              f"FROM sweeps WHERE id = {sb}") >= "3", TIMEOUT):
        fail("the restarted scheduler did not go on with sweep B")
    stop("scheduler", signal.SIGKILL)  # while a later round trains
    start_scheduler()
    db = wait_done(sb)
    if rounds_hashes(db["adaptive"]) != rounds_hashes(a):
        fail(f"sweep B's rounds differ from A's: {rounds_hashes(db['adaptive'])} "
             f"against {rounds_hashes(a)}")
    n = psql(f"SELECT count(*), count(DISTINCT config_hash) FROM runs WHERE sweep_id = {sb}")
    if n != f"{len(stored)}|{len(stored)}" or db["status"] != "succeeded":
        fail(f"sweep B after the restarts: {n} runs, {db['status']}")
    print("B: killed while storing round 1 (nothing stored) and while a later round trained: "
          f"the same {len(rounds)} rounds as A, run for run")

    # ---- C: a width whose runs fail -------------------------------------------------------
    stop("wb")
    path = os.path.join(tmp, "c.json")
    json.dump(spec("adaptive-c", compute, max_attempts=1), open(path, "w"))
    p = subprocess.run([BIN, "plan", path, "--json"], capture_output=True, text=True)
    first = json.loads(p.stdout)
    width = first[0]["config"]["model"]["d_model"]
    start_worker("wc", FAKE_LAW_FAIL_DMODEL=str(width))
    sc = submit(spec("adaptive-c", compute, max_attempts=1), 9)
    dc = wait_done(sc)
    ac = dc["adaptive"]
    failed = psql(f"SELECT count(*) FROM runs WHERE sweep_id = {sc} AND status = 'failed'")
    wrong = psql(f"SELECT count(*) FROM runs WHERE sweep_id = {sc} AND status = 'failed' AND "
                 f"(config->'model'->>'d_model')::int <> {width}")
    n = psql(f"SELECT count(*), count(DISTINCT config_hash) FROM runs WHERE sweep_id = {sc}")
    total, distinct = (int(x) for x in n.split("|"))
    if int(failed) < 1 or wrong != "0" or total != distinct or \
            ac["status"] not in ("reached", "spent", "exhausted") or len(ac["rounds"]) < 3 or \
            dc["status"] != "succeeded":
        fail(f"sweep C: {failed} failed ({wrong} of other widths), {n} runs, design "
             f"{ac['status']} in {len(ac['rounds'])} rounds, sweep {dc['status']}")
    print(f"C: {failed} runs of width {width} failed; the design went on to a stop "
          f"({ac['status']}, {len(ac['rounds'])} rounds) without choosing them again")
    stop("wc")

    # ---- D: the built-in trainer, branches across rounds --------------------------------------
    real = {"name": "adaptive-real", "method": "isoflop",
            "base": {"model": {"seq_len": 32}, "data": {"synthetic": {"words": 128}},
                     "train": {"micro_batch_size": 8, "schedule": "wsd"},
                     "eval": {"tokens": 4096}, "precision": "fp32"},
            "isoflop": {"flops": {"from": 4e9, "to": 6.4e10, "points": 5},
                        "params": [3500, 7000, 14000, 28000], "flops_count": "exact"},
            "batch_rule": {"min_steps": 50},
            "adaptive": {"flops": 2.56e11, "precision": 0.05, "compute": 9e10, "initial": 7,
                         "round": 3, "bootstrap": 50},
            "resources": {"cpus": 1}}
    start_worker("wr", fake=False)
    sr = submit(real, 7)
    dr = wait_done(sr)
    keeps = psql(f"SELECT count(*) FROM runs WHERE sweep_id = {sr} AND keep_steps IS NOT NULL "
                 f"AND jsonb_array_length(keep_steps) > 0")
    kept = psql(f"SELECT count(*) FROM runs WHERE sweep_id = {sr} AND kept IS NOT NULL")
    # a run of a later round that started from a checkpoint an earlier round's run kept
    # (a shorter one decays from the checkpoint, a longer one goes on from it)
    round_of = {h: i for i, hs in enumerate(rounds_hashes(dr["adaptive"])) for h in hs}
    cross, kinds = "", {"decay": 0, "longer": 0}
    for line in psql(
            f"SELECT r.id, r.branch_step, r.branch_path, (SELECT min(m.step) FROM metrics m "
            f"WHERE m.run_id = r.id), r.config_hash, t.config_hash, r.tokens > t.tokens "
            f"FROM runs r JOIN runs t ON t.id = r.branch_of WHERE r.sweep_id = {sr} AND "
            f"r.status = 'succeeded' AND r.branch_path IS NOT NULL AND "
            f"t.kept ? r.branch_step::text ORDER BY r.id").splitlines():
        f = line.split("|")
        if round_of.get(f[4], -1) > round_of.get(f[5], 99):
            cross = cross or "|".join(f[:4])
            kinds["longer" if f[6] == "t" else "decay"] += 1
            if int(f[3]) != int(f[1]) + 1:
                fail(f"sweep D's run {f[0]} from step {f[1]}: its first metric is {f[3]}")
    if int(keeps) < 1 or int(kept) < 1 or not cross or dr["status"] != "succeeded":
        fail(f"sweep D: {keeps} runs keeping branch points, {kept} that kept some, a branch "
             f"across rounds: {cross!r}, sweep {dr['status']}; design {dr['adaptive']}")
    rid, step, bpath, first_step = cross.split("|")
    if int(first_step) != int(step) + 1 or f"/branch-{step}/" not in bpath:
        fail(f"sweep D's run {rid} from a kept branch point: step {step}, path {bpath}, "
             f"first metric {first_step}")
    ad = dr["adaptive"]
    print(f"D (the built-in trainer): {keeps} runs kept branch points; run {rid} of a later "
          f"round started from step {step} of an earlier round's run ({kinds['decay']} such runs "
          f"decayed from a longer one's, {kinds['longer']} went on from a shorter one's); design "
          f"{ad['status']} after {len(ad['rounds'])} rounds, {ad['spent']:.3g} FLOPs")

    print(f"PASS ({time.time() - t0:.0f} s)")
finally:
    rig.close()

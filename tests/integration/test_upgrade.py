#!/usr/bin/env python3
"""Upgrading scalesweep under a running sweep (issue 18): a migration applied
to a database that holds a running sweep keeps it running. Run through
tests/integration/run_with_pg.sh (ctest upgrade_running_sweep).

How "the version before" is had. A scheduler cannot run on an older schema:
it applies every migration it carries before it serves anything (so does
`up`), and its queries need them. A database at an older schema holding a
running sweep is therefore one that an older binary was running, and an
upgrade is a newer binary whose migrations that one did not have (a
`migrate --to N` would make an older schema, but nothing could run a sweep
on it). Building
a real older release here would take minutes; writing a "down" migration by
hand to fake an older database would test hand-written SQL, not the state a
release leaves. So the test upgrades from this build, `scalesweep`, to
`scalesweep_next`: the same code with one more migration,
tests/integration/upgrade/900_upgrade_probe.sql, embedded at build time the
way every release embeds its migrations (tests/CMakeLists.txt). Nothing in
the shipped binary reads migrations from anywhere else. The migration does
to the tables in use what releases do: a column with a default and a
backfill of the runs in flight, a column with a volatile default on metrics
(a rewrite of the table under an exclusive lock) and an index on it.

The upgrade is done as an operator would: the sweep runs (a long run on one
worker; the code takes a list, but each run costs CPU time that two shared
cores lack), the scheduler is stopped (SIGTERM), `scalesweep_next migrate`
applies the new migration while the worker keeps training and keeps its
metrics, `scalesweep_next scheduler` starts on the same ports, and the
worker (not upgraded: the protocol has not changed) reconnects. The
migration and the new scheduler are started together while the test holds
the migration lock (pg_advisory_lock), so both wait on it at once; when it
is released exactly one of them applies the migration (it would fail if
applied twice) and the scheduler comes up. A second `migrate` is then a
no-op. The new scheduler has a shorter lease (8 s, so that the second
part below takes seconds): a worker judges its fence by the lease of its
latest welcome.

Asserted:
- the old binary migrates a fresh database to exactly its own migrations;
- SIGTERM to the scheduler leaves the runs running in the database and
  their trainers alive;
- the new migration and the starting scheduler both waited for the lock
  and it was applied once (by one of them); a second migrate applies none
  and changes no table, column, index, constraint or schema_migrations row;
- the migration ran while the runs were running (its backfill says so);
- the worker reconnects as the same worker (the same workers row, the only
  one) and keeps its runs: the same attempt, the same trainer process (one
  trainer start per run in the worker's log, the pid alive), new
  checkpoints stored past the one before, metric steps 1..k without a gap
  and k past the step reached when the scheduler stopped;
- a sweep submitted after the upgrade runs beside them (its run gets the
  new column's default).

Then a migration longer than the fence. A scheduler must be back within
three quarters of the lease or the worker kills its trainers before their
runs can be given to another worker (docs/runtime.md, "Fencing"); the
upgrade above takes a few seconds of the old scheduler's 30 s lease (the
test prints how long). The new scheduler is stopped with the runs still
training and started again behind a long migration (the test holds the
migration lock, as a `migrate` still running would) until the worker has
fenced the trainers. Asserted: each run is re-queued as interrupted, not
failed (the scheduler's log says it was fenced), resumes from its
checkpoint at attempt 2 with 1 interruption and succeeds with metric steps
exactly 1..steps; both sweeps succeed, the one whose run had ended just
before the stop too (its status left running, as a scheduler stopped
before its next tick leaves it: the next one settles it); schema_migrations
holds exactly the new binary's migrations.

Every sweep has max_attempts 1, so an attempt spent would fail its run:
before this test's fixes, a fenced attempt was reported as a failure
("killed by signal 9") and spent it, and a worker back from a reconnect
fenced its trainers before its first heartbeat (a period after the
welcome) could renew their leases, and a sweep left running by a stopped
scheduler stayed so. About 30 s on an idle two-core machine.

Usage: test_upgrade.py SCALESWEEP_BINARY SCALESWEEP_NEXT_BINARY
(SS_UPGRADE_KEEP=1 keeps the logs and work directories.)
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from harness import (api_request, fail_exit, kill_groups, logs_in, make_token, psql, until,
                     wait_healthz)

BIN, NEXT = sys.argv[1], sys.argv[2]
DB = os.environ["SCALESWEEP_TEST_DB"]
HERE = os.path.dirname(os.path.abspath(__file__))
# store/migrate.c's MIGRATE_LOCK_KEY, as pg_locks shows it: two 32-bit halves
LOCK_KEY = 8314596455477634416
LOCK_WHERE = (f"locktype = 'advisory' AND classid::bigint = {LOCK_KEY >> 32} "
              f"AND objid::bigint = {LOCK_KEY & 0xffffffff} AND objsubid = 1")
LEASE_S = 30  # the old scheduler's: the default
SHORT_LEASE_S = 8  # the new one's: its workers fence after 6 s without it

T0 = time.time()
tmp = tempfile.mkdtemp(prefix="ss-upgrade-")
token = make_token(tmp)
ckpt = os.path.join(tmp, "ckpt")
api_port = wport = 0
procs = {}

# Tiny CPU runs: 512 tokens a step; LONG is about 20 s on an idle core, long
# enough to be mid-run through both parts (about 15 s); SHORT a second or two.
BASE = {"model": {"n_layer": 2, "d_model": 64, "n_head": 2, "seq_len": 64},
        "data": {"synthetic": {"seed": 5}},
        "train": {"batch_size": 8, "micro_batch_size": 8, "lr": 0.003},
        "eval": {"every_tokens": 65536, "tokens": 512}, "threads": 1}
TOKENS_PER_STEP = 8 * 64
LONG, SHORT = 3500 * TOKENS_PER_STEP, 256 * TOKENS_PER_STEP


def versions(*dirs):
    out = []
    for d in dirs:
        for f in glob.glob(os.path.join(d, "*.sql")):
            out.append(int(os.path.basename(f).split("_", 1)[0]))
    return sorted(out)


OLD_VERSIONS = versions(os.path.join(HERE, "..", "..", "migrations"))
NEW_VERSIONS = versions(os.path.join(HERE, "..", "..", "migrations"), os.path.join(HERE, "upgrade"))


def fail(msg):
    fail_exit(msg, logs_in(tmp), cleanup=cleanup)


def check(cond, msg):
    if not cond:
        fail(msg)


def cleanup():
    kill_groups(procs)


def request(method, path, body=None):
    return api_request(api_port, token, method, path, body)


def wait_for(pred, what, timeout=60):
    if not until(pred, timeout, 0.1):
        fail(f"timed out ({timeout} s) waiting for {what}")


def log(name):
    path = os.path.join(tmp, f"{name}.log")
    return open(path, errors="replace").read() if os.path.exists(path) else ""


def start(name, argv):
    out = open(os.path.join(tmp, f"{name}.log"), "a")
    procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    return procs[name]


def start_scheduler(name, binary, listen, workers, lease_s):
    ready = os.path.join(tmp, f"{name}.ready")
    return ready, start(name, [binary, "scheduler", "--database", DB, "--token-file", token,
                               "--listen", listen, "--workers", workers, "--ready-file", ready,
                               "--checkpoints", ckpt, "--lease-seconds", str(lease_s)])


def wait_up(name, ready):
    wait_for(lambda: os.path.exists(ready) or procs[name].poll() is not None,
             f"{name}'s ready file")
    check(procs[name].poll() is None, f"{name} exited with {procs[name].returncode}")
    check(wait_healthz(request, proc=procs[name]), f"{name} did not answer /healthz")


def rows(sql):
    return [line.split("|") for line in psql(sql).splitlines()]


def schema_migrations():
    return [int(v) for v in psql("SELECT version FROM schema_migrations ORDER BY version").split()]


def schema_digest():
    """Every table's columns, indexes, constraints and schema_migrations row,
    hashed: equal before and after a migrate that must change nothing."""
    return psql(
        "SELECT md5(string_agg(x, E'\\n' ORDER BY x)) FROM ("
        " SELECT table_name || '.' || column_name || ' ' || data_type || ' '"
        "  || coalesce(column_default, '') AS x FROM information_schema.columns"
        "  WHERE table_schema = 'public'"
        " UNION ALL SELECT indexdef FROM pg_indexes WHERE schemaname = 'public'"
        " UNION ALL SELECT conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)"
        "  FROM pg_constraint WHERE connamespace = 'public'::regnamespace"
        " UNION ALL SELECT version || ' ' || name || ' ' || applied_at FROM schema_migrations) s")


def trainer_starts(run_id):
    """(attempt, pid) of every trainer the worker started for run_id."""
    return [(int(a), int(p)) for a, p in
            re.findall(rf"run {run_id} attempt (\d+): started pid (\d+)", log("worker"))]


def alive(pid):
    try:
        return "train" in open(f"/proc/{pid}/cmdline").read()
    except OSError:
        return False


def hold_migration_lock():
    """A psql session holding the migration lock until release(it)."""
    holder = subprocess.Popen(["bash", "-c", '. "$PGTEST_SH" && pg_psql -At'],
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    holder.stdin.write(f"SELECT pg_advisory_lock({LOCK_KEY});\n")
    holder.stdin.flush()
    wait_for(lambda: psql(f"SELECT count(*) FROM pg_locks WHERE {LOCK_WHERE} AND granted") == "1",
             "the test to hold the migration lock", 20)
    return holder


def release(holder):
    holder.stdin.close()  # its session ends, and the lock with it
    holder.wait(20)


def applied_count(text):
    m = re.search(r"applied (\d+) migration", text)
    return int(m.group(1)) if m else 0


try:
    check(len(NEW_VERSIONS) > len(OLD_VERSIONS)
          and NEW_VERSIONS[:len(OLD_VERSIONS)] == OLD_VERSIONS,
          f"the next version's migrations {NEW_VERSIONS} do not extend {OLD_VERSIONS}")

    # ---- the old version runs a sweep -----------------------------------------------
    ready, _ = start_scheduler("scheduler-old", BIN, "127.0.0.1:0", "127.0.0.1:0", LEASE_S)
    wait_for(lambda: os.path.exists(ready) or procs["scheduler-old"].poll() is not None,
             "the old scheduler's ready file")
    check(procs["scheduler-old"].poll() is None, "the old scheduler exited")
    ports = json.load(open(ready))
    api_port, wport = ports["http_port"], ports["workers_port"]
    wait_up("scheduler-old", ready)
    check(schema_migrations() == OLD_VERSIONS,
          f"the old binary left schema_migrations at {schema_migrations()}, not {OLD_VERSIONS}")
    print(f"ok: the old binary migrated a fresh database to {OLD_VERSIONS}")

    start("worker", [BIN, "worker", "--scheduler", f"127.0.0.1:{wport}", "--token-file", token,
                     "--cpu-slots", "3", "--work-dir", os.path.join(tmp, "w"), "--name", "w1"])
    spec = {"name": "upgrade", "method": "runs", "base": BASE, "resources": {"cpus": 1},
            "max_attempts": 1, "runs": [{"train": {"seed": 1, "tokens": LONG}}]}
    st, sw = request("POST", "/api/sweeps", spec)
    check(st == 201, f"submit: {st} {sw}")
    run_ids = [int(x) for x in psql(f"SELECT id FROM runs WHERE sweep_id = {sw['id']} "
                                    "ORDER BY id").split()]
    steps = LONG // TOKENS_PER_STEP

    def checkpointed():
        return len(rows(f"SELECT id FROM runs WHERE sweep_id = {sw['id']} AND status = 'running' "
                        "AND checkpoint_step > 0")) == len(run_ids)
    wait_for(checkpointed, "the runs to train and store a checkpoint",
             300 if os.environ.get("SCALESWEEP_TEST_SANITIZED") else 60)
    worker_id = psql("SELECT id FROM workers WHERE name = 'w1'")
    before = {}
    for rid in run_ids:
        attempt, worker = rows(f"SELECT attempt, worker FROM runs WHERE id = {rid}")[0]
        starts = trainer_starts(rid)
        check(len(starts) == 1, f"run {rid}: trainer starts {starts} before the upgrade")
        before[rid] = {"attempt": int(attempt), "worker": worker, "pid": starts[0][1]}

    # ---- the operator stops the scheduler ------------------------------------------
    procs["scheduler-old"].send_signal(signal.SIGTERM)
    try:
        rc = procs["scheduler-old"].wait(30)
    except subprocess.TimeoutExpired:
        fail("the old scheduler did not stop within 30 s of SIGTERM")
    t_stop = time.time()
    check(rc == 0, f"the old scheduler exited with {rc} on SIGTERM")
    for rid in run_ids:
        # what it stored is committed by now: nothing writes while it is away
        before[rid]["step"] = int(psql(f"SELECT max(step) FROM metrics WHERE run_id = {rid}"))
        before[rid]["ck"] = int(psql(f"SELECT checkpoint_step FROM runs WHERE id = {rid}"))
        check(before[rid]["step"] < steps, f"run {rid} finished before the upgrade began "
              f"(step {before[rid]['step']} of {steps}): make LONG longer")
        st = psql(f"SELECT status FROM runs WHERE id = {rid}")
        check(st == "running", f"run {rid} is {st} after the scheduler's SIGTERM")
        check(alive(before[rid]["pid"]), f"run {rid}'s trainer died with the scheduler")
    print(f"ok: the old scheduler stopped on SIGTERM (exit 0); runs {run_ids} still running, "
          f"at steps {[before[r]['step'] for r in run_ids]} of {steps}")

    # ---- the new version: migrate and start the scheduler, both on the lock ----------
    holder = hold_migration_lock()
    mig = subprocess.Popen([NEXT, "migrate", "--database", DB], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    ready, _ = start_scheduler("scheduler-new", NEXT, f"127.0.0.1:{api_port}",
                               f"127.0.0.1:{wport}", SHORT_LEASE_S)
    wait_for(lambda: psql(f"SELECT count(*) FROM pg_locks WHERE {LOCK_WHERE} AND NOT granted")
             == "2", "the migration and the new scheduler to wait for the lock", 20)
    check(mig.poll() is None and procs["scheduler-new"].poll() is None,
          "migrate or the scheduler went on without the migration lock")
    check(schema_migrations() == OLD_VERSIONS, "a migration was applied under the test's lock")
    release(holder)
    try:
        out, err = mig.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        fail("scalesweep_next migrate did not finish after the lock was released")
    check(mig.returncode == 0, f"scalesweep_next migrate: exit {mig.returncode}: {err}")
    wait_up("scheduler-new", ready)
    t_up = time.time()
    by_migrate, by_scheduler = applied_count(out), applied_count(log("scheduler-new"))
    new = len(NEW_VERSIONS) - len(OLD_VERSIONS)
    check(by_migrate + by_scheduler == new,
          f"migrate applied {by_migrate} and the scheduler {by_scheduler}, not {new} in all")
    check(schema_migrations() == NEW_VERSIONS,
          f"schema_migrations is {schema_migrations()}, not {NEW_VERSIONS}")
    print(f"ok: migrate and the new scheduler waited on the lock together; "
          f"{'migrate' if by_migrate else 'the scheduler'} applied the new migration, once")
    for rid in run_ids:
        note = psql(f"SELECT upgrade_note FROM runs WHERE id = {rid}")
        check(note == "backfilled while running",
              f"run {rid}: upgrade_note {note!r}: the migration did not see it running")

    digest = schema_digest()
    again = subprocess.run([NEXT, "migrate", "--database", DB], capture_output=True, text=True)
    check(again.returncode == 0 and "applied 0 migrations" in again.stdout,
          f"a second migrate: exit {again.returncode}: {again.stdout} {again.stderr}")
    check(schema_digest() == digest, "a second migrate changed the schema")
    print("ok: a second migrate applied nothing and changed nothing")

    # ---- the worker reconnects with its runs -----------------------------------------
    wait_for(lambda: re.search(r"worker w1 \(.*\): connected: ", log("scheduler-new")),
             "the worker to reconnect", 30)
    t_back = time.time()
    away = t_back - t_stop
    print(f"ok: the worker reconnected {t_back - t_up:.1f} s after the new scheduler was up; "
          f"the scheduler was away {away:.1f} s (fencing after {LEASE_S * 0.75:.1f} s)")
    time.sleep(1)  # a heartbeat and the reconcile
    check(psql("SELECT string_agg(id::text, ',') FROM workers") == worker_id,
          f"workers after the reconnect: {rows('SELECT id, name FROM workers')}, "
          f"not the one row {worker_id}")
    for rid in run_ids:
        st, attempt, worker = rows(f"SELECT status, attempt, worker FROM runs WHERE id = {rid}")[0]
        check(st == "running" and int(attempt) == before[rid]["attempt"] and
              worker == before[rid]["worker"],
              f"run {rid} after the reconnect: {st}, attempt {attempt}, worker {worker}; before: "
              f"running, attempt {before[rid]['attempt']}, worker {before[rid]['worker']}")
        check(alive(before[rid]["pid"]),
              f"run {rid}'s trainer (pid {before[rid]['pid']}) is gone after the reconnect")
    print(f"ok: the same worker row ({worker_id}) holds runs {run_ids} at their attempts, "
          "their trainers the same processes")

    # ---- the runs go on under the new scheduler, new work beside them ----------------
    st, sw2 = request("POST", "/api/sweeps", {
        "name": "after-upgrade", "method": "runs", "base": BASE, "resources": {"cpus": 1},
        "max_attempts": 1, "runs": [{"train": {"seed": 3, "tokens": SHORT}}]})
    check(st == 201, f"submit after the upgrade: {st} {sw2}")
    short = int(psql(f"SELECT id FROM runs WHERE sweep_id = {sw2['id']}"))

    def progressed():
        st = psql(f"SELECT status FROM runs WHERE id = {short}")
        check(st in ("queued", "running", "succeeded"), f"the run submitted after: {st}")
        if st != "succeeded":
            return False
        for rid in run_ids:
            st, attempt, ck = rows(f"SELECT status, attempt, checkpoint_step FROM runs "
                                   f"WHERE id = {rid}")[0]
            check(st == "running" and int(attempt) == before[rid]["attempt"],
                  f"run {rid} is {st} at attempt {attempt} under the new scheduler")
            if int(ck) <= before[rid]["ck"]:
                return False
        return True
    wait_for(progressed, "the new run to succeed and the old ones to checkpoint again",
             300 if os.environ.get("SCALESWEEP_TEST_SANITIZED") else 60)
    note = psql(f"SELECT upgrade_note FROM runs WHERE id = {short}")
    check(note == "added", f"the run submitted after the upgrade has upgrade_note {note!r}")
    for rid in run_ids:
        n, lo, hi = rows(f"SELECT count(*), min(step), max(step) FROM metrics "
                         f"WHERE run_id = {rid}")[0]
        check(int(lo) == 1 and int(n) == int(hi) and int(hi) > before[rid]["step"],
              f"run {rid}: {n} metric rows, steps {lo}..{hi}; want 1..k without a gap, k past "
              f"step {before[rid]['step']} where it was when the scheduler stopped")
        starts = trainer_starts(rid)
        check(starts == [(before[rid]["attempt"], before[rid]["pid"])],
              f"run {rid}: trainers started {starts}; want only the first")
        check(alive(before[rid]["pid"]), f"run {rid}'s trainer is gone")
    print(f"ok: under the new scheduler runs {run_ids} kept their trainers and attempts, "
          "stored new checkpoints and their metric steps without a gap past where they were; "
          f"run {short}, submitted after the upgrade, succeeded")

    # ---- a migration longer than the fence: the runs resume, no attempt spent ----------
    procs["scheduler-new"].send_signal(signal.SIGTERM)
    check(procs["scheduler-new"].wait(30) == 0, "the new scheduler's SIGTERM exit")
    # a scheduler updates a sweep's status on the tick after its run ends; one
    # stopped before that tick (this stop races it) leaves the sweep running,
    # and the next scheduler must settle it
    psql(f"UPDATE sweeps SET status = 'running' WHERE id = {sw2['id']}")
    holder = hold_migration_lock()
    ready, _ = start_scheduler("scheduler-again", NEXT, f"127.0.0.1:{api_port}",
                               f"127.0.0.1:{wport}", SHORT_LEASE_S)
    for rid in run_ids:
        fence = rf"run {rid} attempt 1: lease not renewed for \d+ ms"
        wait_for(lambda: re.search(fence, log("worker")), f"the worker to fence run {rid}", 30)
        check(rows(f"SELECT status, attempt FROM runs WHERE id = {rid}") == [["running", "1"]],
              f"run {rid} changed while no scheduler was up")
    release(holder)
    wait_up("scheduler-again", ready)

    def done():
        counts = rows("SELECT status, count(*) FROM runs GROUP BY status")
        check(not any(s in ("failed", "cancelled") for s, _ in counts),
              "runs ended badly: " + str(rows("SELECT id, status, attempt, error FROM runs "
                                              "WHERE status IN ('failed', 'cancelled')")))
        return counts == [["succeeded", str(len(run_ids) + 1)]]
    # the rest of the long run: about 40 s here, four times that sanitized
    wait_for(done, "every run to succeed",
             600 if os.environ.get("SCALESWEEP_TEST_SANITIZED") else 120)
    # a sweep's status follows its runs' on the scheduler's next tick
    wait_for(lambda: psql("SELECT string_agg(DISTINCT status::text, ',') FROM sweeps")
             == "succeeded", "both sweeps to succeed, the one left running too", 10)
    for rid in run_ids:
        attempt, intr = rows(f"SELECT attempt, interruptions FROM runs WHERE id = {rid}")[0]
        check((int(attempt), int(intr)) == (2, 1),
              f"fenced run {rid}: attempt {attempt}, {intr} interruption(s); want 2 and 1")
        check(re.search(rf"run {rid} attempt 1: interrupted: its worker fenced it .* "
                        r"\(no attempt spent\)", log("scheduler-again")),
              f"the scheduler does not say why run {rid} was interrupted")
        check([a for a, _ in trainer_starts(rid)] == [1, 2] and
              re.search(rf"run {rid} attempt 2: started pid \d+ \(.*\), resuming", log("worker")),
              f"run {rid}'s trainers: {trainer_starts(rid)}; want attempt 2 resuming")
        n, lo, hi = rows(f"SELECT count(*), min(step), max(step) FROM metrics "
                         f"WHERE run_id = {rid}")[0]
        check((int(n), int(lo), int(hi)) == (steps, 1, steps),
              f"run {rid}: {n} metric rows, steps {lo}..{hi}; want exactly 1..{steps}")
    print(f"ok: a migration holding the scheduler past the fence: the trainers of runs {run_ids} "
          "were fenced, the runs re-queued as interrupted (no attempt spent, max_attempts 1), "
          f"resumed from their checkpoints at attempt 2 and succeeded with steps 1..{steps}")
    check(schema_migrations() == NEW_VERSIONS,
          f"schema_migrations at the end: {schema_migrations()}, not {NEW_VERSIONS}")
    print(f"ok: every run succeeded; schema_migrations is the new version's {NEW_VERSIONS}")
    print(f"upgrade_running_sweep: all checks passed ({time.time() - T0:.0f} s)")
finally:
    cleanup()
    if os.environ.get("SS_UPGRADE_KEEP"):
        print(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)

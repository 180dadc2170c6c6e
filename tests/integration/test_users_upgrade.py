#!/usr/bin/env python3
"""The upgrade to a shared cluster's people (issue 36), against a real
scheduler, worker and throwaway PostgreSQL (run through
tests/integration/run_with_pg.sh):

- a database from before the change (migrations 001..019 applied as the
  old binary applied them, recorded in schema_migrations) holding a sweep
  of the old shape (no owner) is migrated by the new scheduler at start:
  the sweep is owned by the user "admin", whose token is the
  --api-token-file's, as before;
- the sweep runs on a worker, and keeps running across the scheduler's
  restart (SIGTERM, then start again): its one run (max_attempts 1, so a
  run lost would fail) ends succeeded on its first attempt;
- a member added after the upgrade may not cancel the old sweep (403
  naming its owner, admin); the admin may read it with the old token.

Usage: test_users_upgrade.py SCALESWEEP_BINARY
"""
import glob
import json
import os
import subprocess
import sys
import time

from harness import Rig, http_request, psql, until

BIN = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
MIGRATIONS = os.path.join(HERE, "..", "..", "migrations")
rig = Rig(BIN, "ss-users-upgrade-", logs=("scheduler", "w1"))
check = rig.check

# about 1000 steps of a tiny CPU model: ten seconds or so, long enough to be
# mid-run when the scheduler restarts
SPEC = {"name": "before", "method": "runs", "max_attempts": 1, "resources": {"cpus": 1},
        "base": {"model": {"n_layer": 2, "d_model": 64, "n_head": 2, "seq_len": 64},
                 "data": {"synthetic": {"seed": 5}},
                 "train": {"batch_size": 8, "micro_batch_size": 8, "lr": 0.003,
                           "tokens": 1000 * 512},
                 "eval": {"every_tokens": 65536, "tokens": 512}, "threads": 1},
        "runs": [{"train": {"seed": 1}}]}


def sql_literal(s):
    return "'" + s.replace("'", "''") + "'"


def old_database():
    """Migrations before 020 applied as the old binary did; a sweep of the
    old shape with its planned run queued. Its id."""
    psql("CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
         "applied_at timestamptz NOT NULL DEFAULT now())")
    for path in sorted(glob.glob(os.path.join(MIGRATIONS, "*.sql"))):
        base = os.path.basename(path)
        version, name = int(base[:3]), base[4:-4]
        if version >= 20:
            continue
        psql(open(path).read() + f"; INSERT INTO schema_migrations (version, name) "
             f"VALUES ({version}, {sql_literal(name)})")
    spec_path = os.path.join(rig.tmp, "spec.json")
    json.dump(SPEC, open(spec_path, "w"))
    plan = subprocess.run([BIN, "plan", spec_path, "--json"], capture_output=True, text=True)
    check(plan.returncode == 0, f"plan: {plan.stderr}")
    run = json.loads(plan.stdout)[0]
    sweep = psql("INSERT INTO sweeps (name, spec, spec_hash) VALUES ('before', "
                 f"{sql_literal(json.dumps(SPEC))}, 'old-hash') RETURNING id").splitlines()[0]
    psql("INSERT INTO runs (sweep_id, config, config_hash, max_attempts, params, "
         "nonembedding_params, tokens, batch_size, flops, part) VALUES "
         f"({sweep}, {sql_literal(json.dumps(run['config']))}, '{run['config_hash']}', 1, "
         f"{run['params']}, {run['nonembedding_params']}, {run['tokens']}, "
         f"{run['batch_size']}, {run['flops']}, 'runs')")
    return int(sweep)


def run_row(sweep):
    return psql(f"SELECT id, status, attempt, coalesce(max(m.step), 0) FROM runs r "
                f"LEFT JOIN metrics m ON m.run_id = r.id WHERE r.sweep_id = {sweep} "
                "GROUP BY r.id").split("|")


try:
    sweep = old_database()
    rig.start_scheduler()
    owner = psql(f"SELECT u.name || ':' || u.role FROM sweeps s JOIN users u "
                 f"ON u.id = s.owner_id WHERE s.id = {sweep}")
    check(owner == "admin:admin", f"the old sweep's owner after the migration: {owner!r}")
    check(psql("SELECT max(version) FROM schema_migrations") >= "021", "021 not applied")
    rig.start_worker("w1", "--cpu-slots", "1")
    check(until(lambda: run_row(sweep)[1] == "running" and int(run_row(sweep)[3]) >= 20, 60),
          f"the old sweep's run did not start training: {run_row(sweep)}")
    rid, _, attempt, step = run_row(sweep)
    rig.stop("scheduler")
    check(run_row(sweep)[1] == "running", "the run stopped with the scheduler")
    rig.start_scheduler()
    p = subprocess.run([BIN, "user", "add", "ann", "--url", f"http://127.0.0.1:{rig.api_port}",
                        "--token-file", rig.token], capture_output=True, text=True, timeout=30)
    check(p.returncode == 0, f"user add after the upgrade: {p.stderr}")
    st, data, _ = http_request(rig.api_port, "POST", f"/api/sweeps/{sweep}/cancel", {},
                               {"Authorization": "Bearer " + p.stdout.strip()})
    check(st == 403 and b"admin" in data, f"a member cancelling the admin's old sweep: {st} "
          f"{data!r}")
    check(until(lambda: run_row(sweep)[1] != "running", 120),
          f"the run did not finish: {run_row(sweep)}")
    _, status, attempt_after, step_after = run_row(sweep)
    check(status == "succeeded" and attempt_after == attempt == "1",
          f"run {rid}: {status} on attempt {attempt_after} (was attempt {attempt} at step {step})")
    # the sweep's status follows its runs' at the scheduler's next tick
    check(until(lambda: rig.get(f"/api/sweeps/{sweep}?limit=0").get("status") == "succeeded", 10),
          "the old sweep did not end succeeded")
    check(rig.get(f"/api/sweeps/{sweep}?limit=0").get("owner") == "admin", "the API's owner")
    print(f"users upgrade: old sweep owned by admin; run {rid} trained from step {step} across "
          f"the restart to step {step_after}, succeeded on attempt 1")
finally:
    rig.close()

"""Accounting (issue 36, README "A shared cluster") against the real
scheduler and a throwaway PostgreSQL, with a worker stand-in of one CPU
slot (tests/integration/test_fair_share_rig.py) that reports the steps
and checkpoints the test chooses:

- a sweep of two runs of 100 steps: run X's first attempt reports steps
  1-30 and a checkpoint at 20, then is killed (exit 137: failed, retried);
  run Y's first attempt reports 1-25 and a checkpoint at 10, then its
  worker fences it (interrupted, no attempt spent); each second attempt
  resumes from its checkpoint and reports the rest to step 100;
- the accounting adds up to what the metrics and checkpoints say, to the
  step: kept steps = the sweep's metric rows (200), lost steps = 10 + 15
  (those trained again after each checkpoint), FLOPs = steps x the run's
  FLOPs per step; each attempt's device-seconds (one slot x its wall time)
  match the time the test held it (within 0.25 s: the claim and the result
  are a database round trip from the messages the test sees);
- GET /api/sweeps/{id}/usage, GET /api/usage?by=sweep, the sweep's page,
  the usage page and `scalesweep usage --by sweep` say the same.

Usage: test_accounting.py SCALESWEEP_BINARY
"""
import sys
import time

from harness import http_request, psql
from test_fair_share_rig import Rig, spec

STEPS = 100  # tokens 25600 / (batch 8 x seq_len 32)
HOLD_S = 0.6  # each attempt runs this long at least
TOL_S = 0.25  # a claim and a result are one database round trip from what the test sees

rig = Rig(sys.argv[1], "ss-accounting-", {"alice": "member"})
try:
    w = rig.worker("one-slot", cpu_slots=1)
    sweep = rig.submit("alice", spec("acct", 2))
    plan = {}  # run id -> (how its first attempt ends, last step, checkpoint)
    held = []  # (run id, attempt, seconds the test held it)
    while len(held) < 4:
        a = w.assigned(15)
        rig.check(a is not None, "no assignment after %s" % held)
        t0 = time.monotonic()
        rid, att = a["run_id"], a["attempt"]
        if att == 1:
            plan[rid] = ("failed", 30, 20) if not plan else ("fenced", 25, 10)
            how, last, ck = plan[rid]
            w.metrics(a, range(1, last + 1))
            w.checkpoint(a, ck)
            time.sleep(HOLD_S)
            w.finish(a, how, ck)
        else:
            rig.check(a.get("resume") is True, "a second attempt should resume: %s" % a)
            first = plan[rid][2] + 1  # the trainer resumes from its checkpoint
            w.metrics(a, range(first, STEPS + 1))
            time.sleep(HOLD_S)
            w.finish(a)
        held.append((rid, att, time.monotonic() - t0))
    rows = psql("SELECT run_id, attempt, device_s, steps_kept, steps_lost, flops_trained, "
                "flops_lost, ended_as FROM attempt_accounting WHERE sweep_id = %d "
                "ORDER BY run_id, attempt" % sweep).splitlines()
    acct = {(int(c[0]), int(c[1])): c for c in (r.split("|") for r in rows)}
    print("accounting: per attempt (run, attempt, device_s, kept, lost, FLOPs trained, FLOPs "
          "lost, ended as):\n  " + "\n  ".join(rows))
    rig.check(len(acct) == 4, "four attempts expected: %s" % rows)
    for rid, att, secs in held:
        ds = float(acct[(rid, att)][2])
        rig.check(abs(ds - secs) < TOL_S, "run %d attempt %d: %.3f device-s, the test held it "
                  "%.3f s" % (rid, att, ds, secs))
    fps = {}
    for rid, (how, last, ck) in plan.items():
        fps[rid] = float(psql("SELECT flops * batch_size * (config->'model'->>'seq_len')::float8 "
                              "/ tokens FROM runs WHERE id = %d" % rid))
        k1, l1 = int(acct[(rid, 1)][3]), int(acct[(rid, 1)][4])
        k2, l2 = int(acct[(rid, 2)][3]), int(acct[(rid, 2)][4])
        rig.check((k1, l1) == (ck, last - ck) and (k2, l2) == (STEPS - ck, 0),
                  "run %d (%s at step %d, checkpoint %d): kept/lost %d/%d then %d/%d"
                  % (rid, how, last, ck, k1, l1, k2, l2))
        rig.check(acct[(rid, 1)][7] == "queued" and acct[(rid, 2)][7] == "succeeded",
                  "run %d's attempts ended as %s, %s" % (rid, acct[(rid, 1)][7],
                                                         acct[(rid, 2)][7]))
    metric_rows = int(psql("SELECT count(*) FROM metrics m JOIN runs r ON r.id = m.run_id "
                           "WHERE r.sweep_id = %d" % sweep))
    st, doc = rig.request("alice", "GET", "/api/sweeps/%d/usage" % sweep)
    rig.check(st == 200, "GET /api/sweeps/%d/usage: %s %s" % (sweep, st, doc))
    print("accounting: the sweep:", doc)
    lost = sum(p[1] - p[2] for p in plan.values())
    want_flops = sum(fps[r] * STEPS for r in plan)
    want_lost = sum(fps[r] * (p[1] - p[2]) for r, p in plan.items())
    rig.check(doc["steps_kept"] == metric_rows == 2 * STEPS and doc["steps_lost"] == lost == 25,
              "kept %s (metric rows %d), lost %s (expected 25)"
              % (doc["steps_kept"], metric_rows, doc["steps_lost"]))
    rig.check(abs(doc["flops_trained"] - want_flops) <= 1e-9 * want_flops
              and abs(doc["flops_lost"] - want_lost) <= 1e-9 * want_lost,
              "FLOPs trained %s (expected %s), lost %s (expected %s)"
              % (doc["flops_trained"], want_flops, doc["flops_lost"], want_lost))
    total = sum(h[2] for h in held)
    rig.check(abs(doc["cpu_slot_s"] - total) < 4 * TOL_S and doc["gpu_s"] == 0
              and doc["attempts"] == 4 and doc["retried_attempts"] == 2,
              "the sweep's CPU-slot-seconds %s (held %.3f), attempts %s" %
              (doc["cpu_slot_s"], total, doc["attempts"]))
    st, by = rig.request("admin", "GET", "/api/usage?by=sweep")
    row = [r for r in by["rows"] if r["sweep_id"] == sweep]
    rig.check(st == 200 and len(row) == 1 and row[0]["person"] == "alice"
              and row[0]["steps_lost"] == 25 and row[0]["device_s"] == doc["device_s"],
              "GET /api/usage?by=sweep: %s %s" % (st, by))
    st, page, _ = http_request(rig.api_port, "GET", "/sweeps/%d" % sweep)
    page = page.decode()
    rig.check(st == 200 and "Cost and waste" in page and "over 4 attempts ended" in page
              and "(25 steps trained again" in page,
              "the sweep page should say what it cost and wasted: %s" % page[-1500:])
    tok = {"Authorization": "Bearer " + open(rig.token_file["admin"]).read().strip()}
    st, page, _ = http_request(rig.api_port, "GET", "/usage?by=sweep", headers=tok)
    rig.check(st == 200 and "<td>alice</td>" in page.decode(), "the usage page: %s %s"
              % (st, page[-800:]))
    st, page, _ = http_request(rig.api_port, "GET", "/usage")
    rig.check(st == 200 and 'id="usage-token"' in page.decode(),
              "the usage page without a token asks for it: %s" % page[-800:])
    out = rig.cli("alice", "usage", "--by", "sweep")
    rig.check(out.returncode == 0 and "acct" in out.stdout and " 25" in out.stdout,
              "`usage --by sweep`: %d %s %s" % (out.returncode, out.stdout, out.stderr))
    print(out.stdout)
finally:
    rig.close()
print("PASS")

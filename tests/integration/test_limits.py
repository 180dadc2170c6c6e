"""Limits per person (issue 36, README "A shared cluster") against the real
scheduler and a throwaway PostgreSQL, with a worker stand-in of two
simulated GPUs (tests/integration/test_fair_share_rig.py):

- only an admin sets limits (`scalesweep limits`; a member is refused, 403,
  exit 1);
- alice at a 1-GPU limit never holds two GPUs: of her three 1-GPU runs one
  starts, the other GPU stays free for her, her sweep says why it waits,
  and bob's run takes that GPU; as her run ends the next starts, one at a
  time;
- a submission over her queued-runs or queued-FLOPs limit is refused with
  403 and the figures, through the API and the CLI (exit 1).

Usage: test_limits.py SCALESWEEP_BINARY
"""
import json
import os
import sys
import threading
import time

from harness import psql
from test_fair_share_rig import Rig, spec

rig = Rig(sys.argv[1], "ss-limits-", {"alice": "member", "bob": "member"})


def alice_gpus():
    return int(psql("SELECT coalesce(sum(r.gpus), 0) FROM runs r JOIN sweeps s ON "
                    "s.id = r.sweep_id JOIN users u ON u.id = s.owner_id WHERE "
                    "u.name = 'alice' AND r.status = 'running'"))


try:
    out = rig.cli("bob", "limits", "alice", "--gpus", "5")
    rig.check(out.returncode == 1 and "limits" in out.stderr,
              "a member setting limits: %d %s" % (out.returncode, out.stderr))
    out = rig.cli("admin", "limits", "alice", "--gpus", "many")
    rig.check(out.returncode == 2 and "--gpus many" in out.stderr,
              "a bad --gpus: %d %s" % (out.returncode, out.stderr))
    out = rig.cli("admin", "limits", "alice", "--gpus", "1")
    rig.check(out.returncode == 0, "the admin's limits: %d %s" % (out.returncode, out.stderr))
    w = rig.worker("two-gpus", gpus=2)
    sweep = rig.submit("alice", spec("alice-gpu", 3, gpus=1))
    first = w.assigned(10)
    rig.check(first is not None and rig.owner_of(first["run_id"]) == "alice",
              "alice's first run should start: %s" % first)
    rig.check(w.assigned(2.5) is None and alice_gpus() == 1,
              "alice at a 1-GPU limit got a second GPU (%d in use)" % alice_gpus())
    st, doc = rig.request("alice", "GET", "/api/sweeps/%d" % sweep)
    rig.check("limit of 1 GPU" in (doc.get("waiting") or ""),
              "her sweep should say it waits for her limit: %r" % doc.get("waiting"))
    rig.submit("bob", spec("bob-gpu", 1, gpus=1))
    b = w.assigned(10)
    rig.check(b is not None and rig.owner_of(b["run_id"]) == "bob",
              "bob's run should take the free GPU: %s" % b)
    held = [first]
    for _ in range(2):
        w.finish(held.pop())
        a = w.assigned(10)
        rig.check(a is not None and rig.owner_of(a["run_id"]) == "alice" and alice_gpus() == 1,
                  "alice's next run, alone: %s (%d GPUs)" % (a, alice_gpus()))
        rig.check(w.assigned(1.5) is None, "a second run of alice's started")
        held.append(a)
    print("limits: alice at 1 GPU held one of the two at every step; bob's run took the other")

    # queued limits: she has none queued now, her run of the last three running
    out = rig.cli("admin", "limits", "alice", "--gpus", "1", "--queued-runs", "2")
    rig.check(out.returncode == 0, "limits: %s" % out.stderr)
    st, doc = rig.request("alice", "POST", "/api/sweeps", spec("too-many", 3, gpus=1))
    msg = json.dumps(doc)
    rig.check(st == 403 and "max_queued_runs" in msg and "2" in msg and "3" in msg,
              "3 runs over a limit of 2 queued: %s %s" % (st, doc))
    path = os.path.join(rig.tmp, "spec.json")
    with open(path, "w") as f:
        json.dump(spec("too-many", 3, gpus=1), f)
    out = rig.cli("alice", "submit", path)
    rig.check(out.returncode == 1 and "max_queued_runs" in out.stderr,
              "`submit` over the limit: %d %s" % (out.returncode, out.stderr))
    rig.submit("alice", spec("two", 2, gpus=1))  # within it
    out = rig.cli("admin", "limits", "alice", "--queued-flops", "1")
    st, doc = rig.request("alice", "POST", "/api/sweeps", spec("flops", 1, gpus=1))
    rig.check(st == 403 and "max_queued_flops" in json.dumps(doc),
              "a run over a limit of 1 FLOP queued: %s %s" % (st, doc))
    print("limits: submissions over the queued-runs and queued-FLOPs limits refused (403) "
          "with the figures")

    # two submissions at once, each within the limit and both together over
    # it: the check and the store go one change at a time, so one is refused
    queued = int(psql("SELECT count(*) FROM runs r JOIN users u ON u.id = r.owner_id "
                      "WHERE u.name = 'alice' AND r.status = 'queued'"))
    out = rig.cli("admin", "limits", "alice", "--gpus", "1", "--queued-runs", str(queued + 3))
    rig.check(out.returncode == 0, "limits: %s" % out.stderr)
    results = []
    racers = [threading.Thread(target=lambda n=n: results.append(
        rig.request("alice", "POST", "/api/sweeps", spec("race-%d" % n, 2, gpus=1))))
        for n in range(2)]
    for t in racers:
        t.start()
    for t in racers:
        t.join(60)
    codes = sorted(st for st, _ in results)
    now = int(psql("SELECT count(*) FROM runs r JOIN users u ON u.id = r.owner_id "
                   "WHERE u.name = 'alice' AND r.status = 'queued'"))
    rig.check(codes == [201, 403] and now == queued + 2,
              "two submissions of 2 runs at once with room for 3: %s; queued %d -> %d"
              % (results, queued, now))
    print("limits: of two submissions at once that together go over, one refused")
    rig.check(alice_gpus() == 1, "alice holds %d GPUs" % alice_gpus())
    st, trail = rig.request("admin", "GET", "/api/audit?limit=100")
    rows = [r for r in (trail if isinstance(trail, list) else trail.get("rows", []))
            if r.get("action") == "limits"]
    rig.check(st == 200 and any(r.get("outcome") == "refused" and r.get("user") == "bob"
                                for r in rows)
              and any(r.get("outcome") == "ok" and "max_queued_runs 2" in (r.get("detail") or "")
                      for r in rows),
              "the audit trail should hold the limit changes, bob's refused: %s %s" % (st, rows))
finally:
    rig.close()
print("PASS")

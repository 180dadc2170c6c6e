"""Fair share (issue 36, README "A shared cluster") against the real
scheduler and a throwaway PostgreSQL, with a worker stand-in of two CPU
slots (tests/integration/test_fair_share_rig.py):

- alice queues 20 runs, then bob queues 4: as the next slots free, bob's
  runs start, not after alice's backlog (bob's effective usage, his
  running attempts so far, stays below alice's);
- with decayed usage equal (three people who have used nothing), the order
  falls back to priority, then submission: dave's sweep of priority 5, then
  erin's of priority 5 submitted after it, then carol's of priority 0
  (each run placed charges its owner, so after those three they alternate);
- `scalesweep usage` and GET /api/usage show each one's effective usage and
  standing; a member sees only their own.

Usage: test_fair_share.py SCALESWEEP_BINARY
"""
import sys
import time

from test_fair_share_rig import Rig, spec

rig = Rig(sys.argv[1], "ss-fair-share-",
          {"alice": "member", "bob": "member", "carol": "member", "dave": "member",
           "erin": "member"})
try:
    w = rig.worker("two-slots", cpu_slots=2)
    rig.submit("alice", spec("alice-backlog", 20))
    running = [w.assigned(10), w.assigned(10)]
    rig.check(all(running) and {rig.owner_of(a["run_id"]) for a in running} == {"alice"},
              "alice's first two runs should hold both slots: %s" % running)
    time.sleep(1.5)  # alice's usage grows
    rig.submit("bob", spec("bob-four", 4))
    order = []
    for _ in range(4):
        done = running.pop(0)
        w.finish(done)
        a = w.assigned(10)
        rig.check(a is not None, "no run started on the freed slot")
        order.append(rig.owner_of(a["run_id"]))
        running.append(a)
    print("fair share: after alice's 20 and bob's 4, the next four slots went to", order)
    rig.check(order == ["bob"] * 4,
              "bob's 4 runs should start as the next 4 slots free, not after alice's "
              "backlog: %s" % order)
    for a in running:
        w.finish(a)
    rest = [w.assigned(10), w.assigned(10)]
    rig.check(all(rest) and {rig.owner_of(a["run_id"]) for a in rest} == {"alice"},
              "with bob's runs done, alice's backlog goes on: %s" % rest)
    w.sock.close()  # its two runs stay running (their leases) until the test ends

    # equal usage: priority, then submission order; then they alternate
    rig.submit("carol", spec("carol-p0", 3, priority=0))
    rig.submit("dave", spec("dave-p5", 3, priority=5))
    rig.submit("erin", spec("erin-p5", 3, priority=5))
    w1 = rig.worker("one-slot", cpu_slots=1)
    order = []
    for _ in range(6):
        a = w1.assigned(10)
        rig.check(a is not None, "no run started on the one slot")
        order.append(rig.owner_of(a["run_id"]))
        # each run holds the slot for 1 s, so that one run's usage is about
        # the same for everyone: finished at once, the runs' lengths were
        # the test's own jitter, and a person whose run happened to end
        # soonest rightly went again
        time.sleep(1.0)
        w1.finish(a)
    print("fair share: with usage equal, one slot took", order)
    rig.check(order[:3] == ["dave", "erin", "carol"],
              "with equal usage the order is priority, then submission: %s" % order)
    rig.check(sorted(order[3:]) == ["carol", "dave", "erin"],
              "once each has had one run they alternate: %s" % order)

    # their standing: GET /api/usage (an admin: everyone), `usage` (a member: their own)
    st, doc = rig.request("admin", "GET", "/api/usage")
    rig.check(st == 200, "GET /api/usage: %s %s" % (st, doc))
    rows = {r["person"]: r for r in doc["rows"]}
    rig.check(rows["alice"]["cpu_slot_s"] > rows["bob"]["cpu_slot_s"] > 0,
              "alice used more than bob: %s" % doc)
    # queued: alice's backlog and the last runs of carol, dave and erin, who used far less
    rig.check(doc["people_queued"] >= 3 and rows["alice"]["standing"] == doc["people_queued"]
              and rows["bob"]["standing"] is None,
              "alice (most usage) stands last of those with runs queued; bob (none "
              "queued) has no standing: %s" % doc)
    st, mine = rig.request("bob", "GET", "/api/usage")
    rig.check(st == 200 and [r["person"] for r in mine["rows"]] == ["bob"],
              "a member sees only their own usage: %s %s" % (st, mine))
    out = rig.cli("carol", "usage")
    rig.check(out.returncode == 0 and "carol" in out.stdout and "alice" not in out.stdout,
              "`usage` as carol: %d %s %s" % (out.returncode, out.stdout, out.stderr))
    out = rig.cli("admin", "usage", "--since", "not-a-date")
    rig.check(out.returncode == 2 and "since" in out.stderr,
              "a bad --since is exit 2 naming it: %d %s" % (out.returncode, out.stderr))
    print("fair share: usage per person (admin), one's own (member); a bad --since refused")
    print(rig.cli("admin", "usage").stdout)
finally:
    rig.close()
print("PASS")

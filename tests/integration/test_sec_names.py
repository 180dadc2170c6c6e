#!/usr/bin/env python3
"""Names that reorder or hide text (issue 32), against the real scheduler and
a throwaway PostgreSQL (run through tests/integration/run_with_pg.sh):

- a spec whose name holds a right-to-left override (U+202E), a zero-width
  space or a tag character is refused: 400 from the API with the problem at
  $.name ("found U+202E at byte 2"), exit 2 from `scalesweep submit` with
  the same problem and no raw U+202E in what it prints;
- a name stored before the spec refused them (written here straight into
  the database with psql), and a run's error holding U+202E, print escaped
  (\\u202e) in `scalesweep status` (the table and one sweep's line) and
  `scalesweep runs`: no raw control or format character reaches the
  terminal, and the table's columns after the name stay in order; --json
  keeps the answer's own text;
- the status pages show the name inside <bdi>, so that its direction cannot
  spill over the rest of the line.

On the code before the fix the spec was accepted (201) and `status`
printed the raw U+202E.

Usage: test_sec_names.py SCALESWEEP_BINARY
"""
import json
import os
import sys

from harness import Rig, http_request, psql

BIN = sys.argv[1]
RLO = "\u202e"
# what must never reach the terminal raw: the overrides and isolates, the
# zero-width and other format characters, the C0 and C1 controls but '\n'
HIDDEN = ([chr(c) for c in range(0x20) if c != 0x0a] + [chr(c) for c in range(0x7f, 0xa0)] +
          ["\u00ad", "\u061c", "\u180e", "\ufeff"] +
          [chr(c) for c in range(0x200b, 0x2010)] + [chr(c) for c in range(0x2028, 0x202f)] +
          [chr(c) for c in range(0x2060, 0x2070)] + ["\U000e0001"])

rig = Rig(BIN, "ss-sec-names-", logs=("scheduler",), tail=3000)
fail, check, request = rig.fail, rig.check, rig.request


def page(path):
    h = {"Authorization": "Bearer " + open(rig.token).read().strip()}
    st, data, _ = http_request(rig.api_port, "GET", path, headers=h)
    return st, data.decode()


def cli(*args):
    r = rig.cli(*args, timeout=60)
    return r.returncode, r.stdout, r.stderr


def raw_hidden(text):
    return sorted({"U+%04X" % ord(ch) for ch in text if ch in HIDDEN})


def spec(name):
    return {"name": name, "method": "runs",
            "base": {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32},
                     "train": {"batch_size": 8, "lr": 0.003, "tokens": 25600}},
            "runs": [{"train": {"seed": 1}}, {"train": {"seed": 2}}]}


try:
    sched = rig.start_scheduler("--checkpoints", os.path.join(rig.tmp, "ck"))

    # ---- refused at submission
    for name, found in (("ab" + RLO + "cd", "found U+202E at byte 2"),
                        ("zero\u200bwidth", "found U+200B at byte 4"),
                        ("tag\U000e0001", "found U+E0001 at byte 3")):
        st, body = request("POST", "/api/sweeps", spec(name))
        probs = (body or {}).get("error", {}).get("problems", [])
        check(st == 400 and any(p["path"] == "$.name" and found in p["message"]
                                for p in probs),
              "a name with %s: expected 400 at $.name (%s), got %d %r" % (found[6:12], found, st,
                                                                          body))
    spec_file = os.path.join(rig.tmp, "rlo.json")
    with open(spec_file, "w") as f:
        json.dump(spec("ab" + RLO + "cd"), f, ensure_ascii=False)
    rc, out, err = cli("submit", spec_file)
    check(rc == 2 and "$.name: found U+202E at byte 2" in err,
          "scalesweep submit of a name with U+202E: exit %d, stderr %r" % (rc, err))
    check(not raw_hidden(out + err), "scalesweep submit printed raw %s" % raw_hidden(out + err))
    check(psql("SELECT count(*) FROM sweeps") == "0", "a refused spec was stored")
    print("submission: names with U+202E, U+200B and U+E0001 refused at $.name (400; "
          "submit exit 2)")

    # ---- stored before the refusal: printed escaped
    st, body = request("POST", "/api/sweeps", spec("plain"))
    check(st == 201, "submit: %d %r" % (st, body))
    sid = body["id"]
    psql("UPDATE sweeps SET name = E'ab\\u202ecd\\u2066x' WHERE id = %d" % sid)
    psql("UPDATE runs SET error = E'boom \\u202e\\u0007 tail' WHERE id = "
         "(SELECT min(id) FROM runs WHERE sweep_id = %d)" % sid)
    check(psql("SELECT name = E'ab\\u202ecd\\u2066x' FROM sweeps WHERE id = %d" % sid) == "t",
          "the name was not stored with its U+202E")
    rc, out, err = cli("status")
    check(rc == 0, "scalesweep status: exit %d, %s" % (rc, err))
    check(not raw_hidden(out), "scalesweep status printed raw %s:\n%s" % (raw_hidden(out), out))
    line = next((ln for ln in out.splitlines() if ln.split()[:1] == [str(sid)]), "")
    check("ab\\u202ecd\\u2066x" in line and line.split()[2:4] == ["queued", "2"],
          "scalesweep status: the sweep's line %r, expected the name escaped and then "
          "queued, 2 runs" % line)
    rc, out, err = cli("status", str(sid))
    check(rc == 0 and not raw_hidden(out) and "ab\\u202ecd\\u2066x: queued" in out,
          "scalesweep status %d: exit %d, raw %s: %r" % (sid, rc, raw_hidden(out), out))
    rc, out, err = cli("runs", str(sid))
    check(rc == 0 and not raw_hidden(out) and "boom \\u202e\\u0007 tail" in out,
          "scalesweep runs %d: exit %d, raw %s: %r" % (sid, rc, raw_hidden(out), out))
    rc, out, err = cli("status", "--json")
    check(rc == 0 and json.loads(out)[0]["name"] == "ab" + RLO + "cd\u2066x",
          "scalesweep status --json changed the name: %r" % out[:300])
    print("stored names: scalesweep status and runs print U+202E as \\u202e, the columns in "
          "order; --json keeps the text")

    # ---- the pages isolate the name's direction
    for path, where in (("/", "<bdi>ab" + RLO + "cd\u2066x</bdi>"),
                        ("/sweeps/%d" % sid, '<bdi class="name">ab' + RLO + "cd\u2066x</bdi>")):
        st, text = page(path)
        check(st == 200 and where in text, "%s: the name is not in <bdi> (%d)" % (path, st))
    run = int(psql("SELECT min(id) FROM runs WHERE sweep_id = %d" % sid))
    st, text = page("/runs/%d" % run)
    check(st == 200 and '<bdi class="name">ab' + RLO + "cd\u2066x</bdi>" in text,
          "/runs/%d: the sweep's name is not in <bdi> (%d)" % (run, st))
    print("pages: the name in <bdi> on the overview, the sweep's and the run's page")

    check(sched.poll() is None, "the scheduler exited")
    print("sec_names: all checks passed")
finally:
    rig.close()

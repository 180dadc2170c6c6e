#!/usr/bin/env python3
"""`scalesweep plan --json` against golden files made with the planner before
the run config's way from spec to trainer was restructured (issue 35): every
spec under sweeps/examples, the spec fuzz corpus and tests/cli/plan_specs is
planned, and its output must equal tests/integration/golden/plan/NAME.txt.

A planned spec's golden file holds each run's index, part, config_hash,
branch_of / rules_from (which runs share a WSD trunk) and config text, the
text the hash is taken over (checked to hash to config_hash), then the
table `scalesweep plan` prints; a refused spec's holds the exit code and the
problems as printed (JSON path, found vs expected). So a change to any
config's text or hash, to the WSD grouping, or to where a problem is
reported fails here.

Usage: test_plan_golden.py PATH/TO/scalesweep [--update]
--update rewrites the golden files (only ever with the planner unchanged)."""
import glob
import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GOLDEN = os.path.join(ROOT, "tests", "integration", "golden", "plan")
SOURCES = [("example", "sweeps/examples"), ("fuzz", "tests/fuzz/corpus/spec"),
           ("cli", "tests/cli/plan_specs")]


def specs():
    for prefix, folder in SOURCES:
        for path in sorted(glob.glob(os.path.join(ROOT, folder, "*.json"))):
            name = os.path.splitext(os.path.basename(path))[0]
            yield "%s-%s" % (prefix, name), os.path.relpath(path, ROOT)


def raw_configs(out):
    """Each run's config as printed, the text its hash is taken over
    (plan_run_json splices it in verbatim; re-dumping parsed JSON would hide a
    change in key order or number format). No config string holds a brace."""
    texts = []
    for seg in out.split('"config":')[1:]:
        depth = 0
        for i, c in enumerate(seg):
            depth += c == "{"
            depth -= c == "}"
            if depth == 0:
                texts.append(seg[:i + 1])
                break
    return texts


def render(binary, rel):
    p = subprocess.run([binary, "plan", "--json", rel], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    lines = ["exit %d" % p.returncode]
    if p.returncode != 0:
        lines.append(p.stderr.rstrip("\n"))
        return "\n".join(lines) + "\n"
    runs = json.loads(p.stdout)
    texts = raw_configs(p.stdout)
    if len(texts) != len(runs):
        raise SystemExit("%s: %d runs but %d config texts" % (rel, len(runs), len(texts)))
    for run, text in zip(runs, texts):
        lines.append("run %d %s %s branch_of=%s branch_step=%s rules_from=%s" % (
            run["index"], run["part"], run["config_hash"], run.get("branch_of"),
            run.get("branch_step"), run.get("rules_from")))
        if hashlib.sha256(text.encode()).hexdigest() != run["config_hash"]:
            raise SystemExit("%s: run %d's config_hash is not the SHA-256 of its config text"
                             % (rel, run["index"]))
        lines.append(text)
    table = subprocess.run([binary, "plan", rel], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    lines.append("table (exit %d):" % table.returncode)
    lines.append(table.stdout.rstrip("\n"))
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    update = "--update" in sys.argv[2:]
    os.makedirs(GOLDEN, exist_ok=True)
    failed, n = [], 0
    for name, rel in specs():
        n += 1
        got = render(binary, rel)
        gold = os.path.join(GOLDEN, name + ".txt")
        if update:
            with open(gold, "w") as f:
                f.write(got)
            continue
        if not os.path.exists(gold):
            failed.append("%s: no golden file %s (new spec? run with --update on the unchanged "
                          "planner)" % (rel, gold))
            continue
        with open(gold) as f:
            want = f.read()
        if got != want:
            gl, wl = got.splitlines(), want.splitlines()
            at = next((i for i in range(min(len(gl), len(wl))) if gl[i] != wl[i]),
                      min(len(gl), len(wl)))
            failed.append("%s: differs from %s at line %d:\n  want: %s\n  got:  %s" % (
                rel, os.path.relpath(gold, ROOT), at + 1, wl[at][:400] if at < len(wl) else "(end)",
                gl[at][:400] if at < len(gl) else "(end)"))
    if update:
        print("wrote %d golden files under %s" % (n, os.path.relpath(GOLDEN, ROOT)))
        return
    for f in failed:
        print("FAIL:", f, file=sys.stderr)
    if failed:
        sys.exit(1)
    print("ok: %d specs planned as their golden files say" % n)


if __name__ == "__main__":
    main()

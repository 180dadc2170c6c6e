"""Reading a study's printout (`scalesweep up --wait`): check_study.py's
helpers."""
import re
import sys

NUM = r"(-?[0-9.]+(?:e[-+]?\d+)?|n/a)"


def fail(msg, out=""):
    """Prints the printout's tail and the failure, and exits 1."""
    print(out[-6000:])
    print(f"FAIL: {msg}", file=sys.stderr)
    raise SystemExit(1)


def value(out, pattern, what):
    """The numbers pattern's groups match in out; a failure where it does
    not match or a number is n/a."""
    m = re.search(pattern, out)
    if not m:
        fail(f"the printout lacks {what} ({pattern})", out)
    try:
        return [float(x) for x in m.groups()]
    except ValueError:
        fail(f"{what}: n/a", out)


WALL = re.compile(r"result of sweep (\d+) \([^)]*from submission to the last fit\):")


def result_lines(text):
    """The lines of the result block: "result of sweep N (...):" and the
    indented lines after it, the wall time taken out (it varies)."""
    lines = text[text.index("result of sweep"):].splitlines()
    block = [lines[0]]
    for l in lines[1:]:
        if not l.startswith(" "):
            break
        block.append(l)
    return [WALL.sub(r"result of sweep \1:", l.rstrip()) for l in block]


def compare_with_readme(readme_text, out):
    """None when the printout's result block is the README's, line for line
    (the wall time aside); else the first differing lines as text."""
    want, got = result_lines(readme_text), result_lines(out)
    diff = [f"  README: {w}\n  here:   {g}" for w, g in zip(want, got) if w != g]
    if len(want) != len(got):
        diff.append(f"  the README shows {len(want)} lines, this run printed {len(got)}")
    return "\n".join(diff[:6]) if diff else None

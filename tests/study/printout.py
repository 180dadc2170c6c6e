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

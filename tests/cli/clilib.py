"""What the Python helpers of the tests of the real binary share: each
test_*.sh writes its own h.py into the run's directory, and cli_setup
(lib.sh) puts this directory on PYTHONPATH for it."""
import re
import sys

# the fields of a trainer line that differ between two runs of the same
# config: left out where runs are compared line for line
TIMING = re.compile(r',"(tok_per_s|wall_s|peak_rss_bytes)":[^,}]*')


def die(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def untimed(path):
    """path's lines without their timings"""
    return [TIMING.sub("", l) for l in open(path)]

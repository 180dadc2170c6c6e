"""Helpers shared by the Python integration tests (run through
tests/integration/run_with_pg.sh, which sets PGTEST_SH)."""
import socket
import subprocess


def free_port():
    """A TCP port on 127.0.0.1 free at the time of the call."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def psql(sql):
    """Runs sql on the throwaway cluster; its unaligned, tuples-only output."""
    out = subprocess.run(["bash", "-c", '. "$PGTEST_SH" && pg_psql -At -c "$0"', sql],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()

"""Side by side: GET latency of API endpoints through two scheduler binaries
on one database, in alternating rounds (each round starts each binary's
scheduler in turn on the same database and times N requests per path on one
keep-alive connection, after 2 warm-up ones). Prints medians, p99 and the
ratio new/old. It changes nothing in the database. Beside the wall times,
the CPU time per request (ms) of the scheduler and of the PostgreSQL
server's processes (the postmaster's children, read from /proc: the
server must run on this machine), medians of the rounds: on a machine
other work keeps busy the wall times wander, the CPU times much less.

  python3 tests/bench/ab_api.py OLD_BIN NEW_BIN ROUNDS N PATH...

SCALESWEEP_TEST_DB: a database to read (for issue 18's figures, the one
sched_bench.py's api part fills: 10,000 runs, 10 million metric rows)."""
import http.client, json, os, secrets, statistics, subprocess, sys, tempfile, time
DB = os.environ["SCALESWEEP_TEST_DB"]
old, new, rounds, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
paths = sys.argv[5:]
tmp = tempfile.mkdtemp()
tok = secrets.token_hex(16)
open(f"{tmp}/token", "w").write(tok + "\n"); os.chmod(f"{tmp}/token", 0o600)
def start(b):
    ready = f"{tmp}/ready.json"
    if os.path.exists(ready): os.unlink(ready)
    p = subprocess.Popen([b, "scheduler", "--database", DB, "--token-file", f"{tmp}/token",
        "--listen", "127.0.0.1:0", "--workers", "127.0.0.1:0", "--checkpoints", f"{tmp}/ck",
        "--ready-file", ready], stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/log", "a"))
    while not os.path.exists(ready): time.sleep(0.01)
    time.sleep(0.2)
    return p, json.load(open(ready))["http_port"]
res = {(b, pth): [] for b in ("old", "new") for pth in paths}
cpu = {(b, pth): [] for b in ("old", "new") for pth in paths}
def ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f: st = f.read().rsplit(")", 1)[1].split()
    except OSError: return 0, None
    return int(st[11]) + int(st[12]), int(st[1])  # utime + stime, ppid
postmaster = int(subprocess.run(["psql", "-X", "-At", DB, "-c", "SELECT pg_backend_pid()"],
                                capture_output=True, text=True, check=True).stdout)
postmaster = ticks(postmaster)[1]
def server_ticks():
    return sum(t for t, pp in (ticks(d) for d in os.listdir("/proc") if d.isdigit()) if pp == postmaster)
HZ = os.sysconf("SC_CLK_TCK")
size = {}
for r in range(rounds):
    for name, b in (("old", old), ("new", new)) if r % 2 == 0 else (("new", new), ("old", old)):
        p, port = start(b)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        # on a loaded machine its read connections may still be opening (503)
        for _ in range(200):
            c.request("GET", paths[0], headers={"Authorization": "Bearer " + tok})
            resp = c.getresponse(); resp.read()
            if resp.status != 503: break
            time.sleep(0.05)
        for pth in paths:
            for i in range(n + 2):
                if i == 2: t0 = (ticks(p.pid)[0], server_ticks())
                t = time.perf_counter()
                c.request("GET", pth, headers={"Authorization": "Bearer " + tok})
                resp = c.getresponse(); body = resp.read()
                dt = (time.perf_counter() - t) * 1e3
                assert resp.status == 200, (resp.status, body[:200])
                size[(name, pth)] = len(body)
                if i >= 2: res[(name, pth)].append(dt)
            cpu[(name, pth)].append(((ticks(p.pid)[0] - t0[0]) * 1e3 / HZ / n,
                                     (server_ticks() - t0[1]) * 1e3 / HZ / n))
        c.close(); p.terminate(); p.wait()
def pct(v, q): v = sorted(v); return v[min(len(v) - 1, int(q * len(v)))]
print(f"{'path':60s} {'old med':>8s} {'new med':>8s} {'old p99':>8s} {'new p99':>8s} {'ratio med':>9s} bytes old/new")
for pth in paths:
    o, nn = res[("old", pth)], res[("new", pth)]
    print(f"{pth[:60]:60s} {statistics.median(o):8.1f} {statistics.median(nn):8.1f} {pct(o,.99):8.1f} {pct(nn,.99):8.1f} {statistics.median(nn)/statistics.median(o):9.3f} {size[('old',pth)]}/{size[('new',pth)]}")
print(f"\nCPU ms per request, medians of the rounds: {'path':40s} {'sched old':>9s} {'sched new':>9s} {'pg old':>8s} {'pg new':>8s} {'pg ratio':>8s}")
for pth in paths:
    o = [statistics.median(v[k] for v in cpu[("old", pth)]) for k in (0, 1)]
    nn = [statistics.median(v[k] for v in cpu[("new", pth)]) for k in (0, 1)]
    print(f"{pth[:40]:40s} {o[0]:9.2f} {nn[0]:9.2f} {o[1]:8.2f} {nn[1]:8.2f} {nn[1]/o[1]:8.3f}")

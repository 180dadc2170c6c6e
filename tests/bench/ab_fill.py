"""A database for ab_api.py: one sweep of RUNS runs submitted through
BIN's API, then, straight in SQL as sched_bench_api.py's api part does,
its runs marked succeeded with METRICS metric rows each, and VACUUM
ANALYZE. Prints the sweep's id.

  python3 tests/bench/ab_fill.py BIN RUNS METRICS

SCALESWEEP_TEST_DB: the database (tests/pg/pgtest.sh's pg_start makes one)."""
import http.client, json, os, secrets, subprocess, sys, tempfile, time
DB = os.environ["SCALESWEEP_TEST_DB"]
binary, nruns, nmetrics = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
BASE = {"model": {"n_layer": 1, "d_model": 16, "n_head": 2, "seq_len": 16},
        "train": {"batch_size": 4, "tokens": 64}, "eval": {"tokens": 64}, "threads": 1}


def psql(sql):
    subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", DB, "-c", sql],
                   check=True, timeout=1800)


tmp = tempfile.mkdtemp()
tok = secrets.token_hex(16)
open(f"{tmp}/token", "w").write(tok + "\n"); os.chmod(f"{tmp}/token", 0o600)
ready = f"{tmp}/ready.json"
p = subprocess.Popen([binary, "scheduler", "--database", DB, "--token-file", f"{tmp}/token",
                      "--listen", "127.0.0.1:0", "--workers", "127.0.0.1:0",
                      "--checkpoints", f"{tmp}/ck", "--ready-file", ready],
                     stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/log", "a"))
while not os.path.exists(ready): time.sleep(0.05)
time.sleep(0.2)
spec = {"name": f"ab-{nruns}", "method": "runs", "base": BASE,
        "runs": [{"train": {"seed": i + 1}} for i in range(nruns)], "resources": {"cpus": 1}}
c = http.client.HTTPConnection("127.0.0.1", json.load(open(ready))["http_port"], timeout=600)
c.request("POST", "/api/sweeps", json.dumps(spec).encode(),
          {"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
resp = c.getresponse(); body = resp.read()
p.terminate(); p.wait()
assert resp.status == 201, (resp.status, body[:300])
sid = json.loads(body)["id"]
psql(f"UPDATE runs SET status = 'succeeded', attempt = 1, "
     f"started_at = now() - interval '1 hour' + id * interval '1 ms', "
     f"finished_at = now() - interval '30 minutes' + id * interval '1 ms', "
     f"final_val_loss = 3 + (id % 97) / 100.0, tokens = {nmetrics * 64}, "
     f"nonembedding_params = coalesce(nonembedding_params, 3200), "
     f"params = coalesce(params, 4416) WHERE sweep_id = {sid}")
psql(f"UPDATE sweeps SET status = 'succeeded' WHERE id = {sid}")
psql(f"INSERT INTO metrics (run_id, step, tokens, train_loss, val_loss, lr, grad_norm, "
     f"tok_per_s) SELECT r.id, s, s * 64::bigint, 5.5 - ln(s) * 0.3, "
     f"CASE WHEN s % 100 = 0 THEN 5.4 - ln(s) * 0.3 END, 3e-4, 1.0 + 1.0 / s, 1e5 "
     f"FROM (SELECT id FROM runs WHERE sweep_id = {sid} ORDER BY id) r, "
     f"LATERAL generate_series(1, {nmetrics} + 0 * r.id) s")
psql("VACUUM ANALYZE")
print(sid)

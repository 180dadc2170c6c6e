"""Declared trainers end to end (docs/trainers.md), against a throwaway
PostgreSQL (run through tests/integration/run_with_pg.sh), the real
scheduler and three real workers, and a declared trainer,
tests/integration/contract_trainer.py, whose behaviour each run's
train.seed chooses:

- a worker with a bad declaration (a name with a space, "builtin", an
  unterminated quote) exits with code 2 and says what is wrong;
- worker B runs only the built-in trainer; worker A also declares "fake"
  (in a --trainers-file) and "fake2" (--trainer), with 2 CPU slots and
  --hang-timeout 3; a run with trainer "fake" goes to A only, a built-in
  run to B;
- a good run of "fake" succeeds: its metrics, checkpoint and
  final_val_loss are stored, and the trainer saw the contract's
  environment (SCALESWEEP_*, RANK, WORLD_SIZE, ...; none of the worker's
  secrets, none of its own RANK or MASTER_PORT) in its attempt's log;
- each breach of the output contract (a line that is not JSON, a 10 MB
  line, an unknown event, an invalid step row, exit 0 without done, done
  without final_val_loss, a hang past --hang-timeout) fails its run (one
  attempt, not "interrupted") with an error that names the run, the
  attempt, the trainer, the line and the problem; the hung one within
  ~10 s, no process of it left; the workers and the scheduler live on, a
  later good run succeeds, and the good runs' rows are as they were;
- a run of world_size 2 on A's 2 slots: `scalesweep launch` gives its
  ranks RANK 0 and 1, WORLD_SIZE 2, one MASTER_ADDR:MASTER_PORT (rank 1
  connects to rank 0 there), and rank 1's stdout (not JSON) goes to the
  log and breaks nothing;
- a run of 3 ranks spread over A (ranks 0, 1) and worker C (rank 2,
  --hang-timeout 3): C's part, whose launcher sends no line to C (only
  rank 0's stdout is the run's), is not taken for a hung trainer;
- a trainer named "NULL" (C declares it) is placed like any other (the
  queue read gets the offered trainers as a PostgreSQL text array);
- the runs' placements are recorded by a trigger of the test's own
  (runs.worker is NULL again once a run ends), and each run's directory is
  in the work dir of the worker that ran it;
- a sweep of a trainer no worker runs ("nobody") stays queued, no attempt
  spent, and says why in GET /api/sweeps/N, GET /api/sweeps, `scalesweep
  status` and its page, until it is cancelled.

Usage: test_trainers.py SCALESWEEP_BINARY
"""
import html
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from harness import (api_request, free_port, make_token, post_sweep, psql, stop_all, until,
                     wait_healthz)

BIN = sys.argv[1]
DB = os.environ["SCALESWEEP_TEST_DB"]
PY = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = f"{PY} {shlex.quote(os.path.join(HERE, 'contract_trainer.py'))}"
T0 = time.time()

if not os.access(PY, os.X_OK):
    print(f"skipped: {PY} (the declared trainer's interpreter) not found")
    sys.exit(77)

tmp = tempfile.mkdtemp(prefix="ss-trainers-")
token = make_token(tmp)
api_port, wport = free_port(), free_port()
ckpt = os.path.join(tmp, "ckpt")
URL = f"http://127.0.0.1:{api_port}"
procs = {}


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    for name in ("scheduler", "wa", "wb", "wc"):
        path = os.path.join(tmp, name + ".log")
        if os.path.exists(path):
            print(f"--- {name}.log (end)", file=sys.stderr)
            print(open(path).read()[-4000:], file=sys.stderr)
    sys.exit(1)


def request(method, path, body=None):
    return api_request(api_port, token, method, path, body)


# the workers' environment: a secret and contract variables of their own,
# none of which a trainer may see
WORKER_ENV = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", SCALESWEEP_TOKEN="not-for-trainers",
                  RANK="7", WORLD_SIZE="9", MASTER_PORT="1", SCALESWEEP_RUN_ID="0")


def start(name, args, env=None):
    log = open(os.path.join(tmp, name + ".log"), "a")
    procs[name] = subprocess.Popen([BIN] + args, stdout=log, stderr=log, env=env or os.environ)


def start_worker(name, slots, extra):
    start(name, ["worker", "--scheduler", f"127.0.0.1:{wport}", "--token-file", token,
                 "--cpu-slots", str(slots), "--work-dir", os.path.join(tmp, name),
                 "--name", name] + extra, WORKER_ENV)


def alive(what):
    for name, p in procs.items():
        if p.poll() is not None:
            fail(f"{name} exited with code {p.returncode} ({what})")
    if request("GET", "/healthz")[0] != 200:
        fail(f"the scheduler does not answer /healthz ({what})")


MODEL = {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 32}


def spec(name, runs, trainer="fake", max_attempts=None, resources=None):
    base = {"model": MODEL, "train": {"batch_size": 8, "micro_batch_size": 4, "lr": 0.003,
                                      "tokens": 25600}}
    if trainer:
        base["trainer"] = trainer
    s = {"name": name, "method": "runs", "base": base,
         "runs": [{"train": r} for r in runs], "resources": resources or {"cpus": 1}}
    if max_attempts:
        s["max_attempts"] = max_attempts
    return s


def submit(s):
    return post_sweep(request, s, fail, s["name"])


def rows(sql):
    return [line.split("|") for line in psql(sql).splitlines()]


# runs.worker is the worker of a running run only (NULL again once it
# ends): a trigger keeps every worker a run was placed on, by attempt
RAN_ON = """
CREATE TABLE test_ran_on (run_id bigint, attempt int, worker bigint);
CREATE FUNCTION test_ran_on() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO test_ran_on VALUES (NEW.id, NEW.attempt, NEW.worker);
  RETURN NULL;
END $$;
CREATE TRIGGER test_ran_on AFTER UPDATE OF worker ON runs FOR EACH ROW
  WHEN (NEW.worker IS NOT NULL AND OLD.worker IS DISTINCT FROM NEW.worker)
  EXECUTE FUNCTION test_ran_on();
"""


def runs_of(sweep):
    """id, status, attempt, interruptions, the names of the workers it was
    placed on, seed, tokens, final_val_loss, checkpoint_step, error of each
    run of the sweep"""
    out = []
    for r in rows("SELECT r.id, r.status, r.attempt, r.interruptions, "
                  "(SELECT coalesce(string_agg(DISTINCT w.name, ','), '') FROM test_ran_on o "
                  "JOIN workers w ON w.id = o.worker WHERE o.run_id = r.id), "
                  "(r.config->'train'->>'seed')::int, (r.config->'train'->>'tokens')::bigint, "
                  "coalesce(r.final_val_loss::text, ''), coalesce(r.checkpoint_step::text, ''), "
                  "replace(coalesce(r.error, ''), E'\\n', ' ') FROM runs r "
                  f"WHERE r.sweep_id = {sweep} ORDER BY r.id"):
        i, st, a, intr, w, seed, tok, loss, ck = r[:9]
        out.append({"id": int(i), "status": st, "attempt": int(a), "interruptions": int(intr),
                    "worker": w, "seed": int(seed), "tokens": int(tok), "final": loss,
                    "ckpt_step": ck, "error": "|".join(r[9:])})
    return out


def wait_sweep(sweep, timeout=40):
    def done():
        st, s = request("GET", f"/api/sweeps/{sweep}?limit=0")
        c = s["counts"] if st == 200 else {}
        return c.get("total") and c["queued"] + c["running"] == 0
    if not until(done, timeout, 0.1):
        fail(f"sweep {sweep} did not finish in {timeout} s: {runs_of(sweep)}")
    return runs_of(sweep)


def attempt_log(worker, run_id, attempt=1):
    path = os.path.join(tmp, worker, "runs", str(run_id), f"attempt-{attempt}.log")
    if not os.path.exists(path):
        fail(f"run {run_id}: no attempt log at {path}")
    return open(path, errors="replace").read()


def trainer_env(log, rank):
    """What contract_trainer.py of this rank wrote of its environment."""
    env = {}
    for m in re.finditer(rf"^contract_trainer: rank {rank} env ([A-Z_]+)=(.*)$", log, re.M):
        env[m.group(1)] = m.group(2)
    return env


def metrics_of(run_id):
    return rows(f"SELECT step, tokens, train_loss, coalesce(val_loss::text, '') FROM metrics "
                f"WHERE run_id = {run_id} ORDER BY step")


try:
    # ---- 7. bad declarations: exit 2, the problem named -------------------------------------
    bad = [("bad name=x", "trainer name 'bad name': expected 1 to 32 letters"),
           ("builtin=x", "trainer name 'builtin'"),
           ('x=unterminated "quote', 'trainer "x": cannot split its command')]
    for decl, want in bad:
        out = subprocess.run([BIN, "worker", "--scheduler", f"127.0.0.1:{wport}", "--token-file",
                              token, "--work-dir", os.path.join(tmp, "bad"), "--trainer", decl],
                             capture_output=True, text=True, timeout=20)
        if out.returncode != 2 or want not in out.stderr:
            fail(f"worker --trainer {decl!r}: exit {out.returncode}, expected 2 and a message "
                 f"with {want!r}: {out.stderr!r}")
    print("bad declarations: a name with a space, \"builtin\", an unterminated quote: exit 2, "
          "each named")

    start("scheduler", ["scheduler", "--database", DB, "--token-file", token, "--listen",
                        f"127.0.0.1:{api_port}", "--workers", f"127.0.0.1:{wport}",
                        "--checkpoints", ckpt])
    if not wait_healthz(request, proc=procs["scheduler"]):
        fail("the scheduler did not come up")
    psql(RAN_ON)

    # ---- worker B: the built-in trainer only; a built-in run goes to it ---------------------
    start_worker("wb", 1, [])
    nobody = submit(spec("nobody", [{"seed": 1}, {"seed": 2}], trainer="nobody"))
    builtin = submit(spec("builtin", [{"seed": 1}], trainer=None))
    if not until(lambda: runs_of(builtin)[0]["worker"] == "wb", 20, 0.1):
        fail(f"the built-in run did not go to worker wb: {runs_of(builtin)}")

    # ---- worker A: declares fake (in a file) and fake2 -------------------------------------
    tfile = os.path.join(tmp, "trainers")
    with open(tfile, "w") as f:
        f.write("# the test's declared trainer\n\n   fake=" + FAKE + "\n")
    start_worker("wa", 2, ["--trainer", "fake2=/bin/false", "--trainers-file", tfile,
                           "--hang-timeout", "3"])

    # ---- 1. good runs of the declared trainer ----------------------------------------------
    good = submit(spec("good", [{"seed": 1, "tokens": t} for t in (25600, 51200, 76800)]))
    per_step = 8 * MODEL["seq_len"]
    for r in wait_sweep(good):
        want_final = 3 + r["tokens"] / 1e6
        if r["status"] != "succeeded" or r["attempt"] != 1 or r["worker"] != "wa":
            fail(f"good run {r['id']}: {r}, expected succeeded at attempt 1 on worker wa")
        if abs(float(r["final"] or 0) - want_final) > 1e-9 or r["ckpt_step"] != "4":
            fail(f"good run {r['id']}: final_val_loss {r['final']!r}, checkpoint step "
                 f"{r['ckpt_step']!r}; expected {want_final} and 4")
        m = metrics_of(r["id"])
        want = [[str(s), str(s * per_step), repr(want_final + 2.0 / s) if s > 1 else
                 repr(want_final + 2.0), repr(want_final + 1.0 / s - 0.25) if s % 2 == 0 else ""]
                for s in range(1, 5)]
        got = [[a, b, repr(float(c)), repr(float(d)) if d else ""] for a, b, c, d in m]
        if got != want:
            fail(f"good run {r['id']}: metrics {got}, expected {want}")
        log = attempt_log("wa", r["id"])
        env = trainer_env(log, 0)
        cfg = os.path.join(tmp, "wa", "runs", str(r["id"]), "config.json")
        want_env = {"SCALESWEEP_CONFIG": cfg,
                    "SCALESWEEP_CHECKPOINT_DIR": os.path.join(ckpt, f"run-{r['id']}"),
                    "SCALESWEEP_RUN_ID": str(r["id"]), "SCALESWEEP_ATTEMPT": "1",
                    "SCALESWEEP_TRAINER": "fake", "SCALESWEEP_TOKEN": "<unset>",
                    "SCALESWEEP_DIST_SECRET": "<unset>", "RANK": "0", "WORLD_SIZE": "1",
                    "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}
        for k, v in want_env.items():
            path = k in ("SCALESWEEP_CONFIG", "SCALESWEEP_CHECKPOINT_DIR")
            if (os.path.realpath(env.get(k, "")) != os.path.realpath(v)) if path else \
                    env.get(k) != v:
                fail(f"good run {r['id']}: the trainer saw {k}={env.get(k)!r}, expected {v!r}: "
                     f"{log[:3000]}")
        if env.get("SCALESWEEP_DATA_DIRS", "<unset>") == "<unset>" or \
                not env.get("MASTER_PORT", "").isdigit() or env["MASTER_PORT"] == "1":
            fail(f"good run {r['id']}: SCALESWEEP_DATA_DIRS {env.get('SCALESWEEP_DATA_DIRS')!r}, "
                 f"MASTER_PORT {env.get('MASTER_PORT')!r}: expected set, and a port of the "
                 "launcher's")
        if " launch --world-size 1 -- " + FAKE not in log.splitlines()[0]:
            fail(f"good run {r['id']}: the log's first line is not the launch of the declared "
                 f"trainer: {log.splitlines()[0]!r}")
    print("good runs: trainer fake on worker wa, metrics, checkpoint step and final_val_loss "
          "stored; the contract's environment, no secret of the worker's")

    # the stored rows of the good and the built-in runs, which nothing after may change
    b = wait_sweep(builtin, 60)
    if b[0]["status"] != "succeeded" or b[0]["worker"] != "wb" or not b[0]["final"]:
        fail(f"the built-in run: {b}, expected succeeded on worker wb")
    builtin_id = b[0]["id"]
    SNAP = (f"SELECT r.id, r.status, r.attempt, r.worker, r.final_val_loss, r.tokens, r.params, "
            f"r.flops, r.finished_at, coalesce(r.error, ''), r.checkpoint_step, "
            f"(SELECT count(*) || ':' || sum(m.train_loss) || ':' || sum(m.val_loss) "
            f"FROM metrics m WHERE m.run_id = r.id) FROM runs r "
            f"WHERE r.sweep_id IN ({good}, {builtin}) ORDER BY r.id")
    before = psql(SNAP)

    # ---- 2. and 3. breaches of the contract, and a hang -------------------------------------
    problems = {2: ["stdout line 3 is not JSON", "'this is not JSON'"],
                3: ["stdout line 3 is longer than 1048576 bytes"],
                4: ['stdout line 3: unknown event "gossip"'],
                5: ['it exited with code 0 without a "done" event'],
                6: ['stdout line 9: "done" without final_val_loss'],
                7: ["it printed no line for", "(the worker's --hang-timeout is 3 s): it hangs"],
                8: ["stdout line 3: ", "train_loss"]}
    breach = submit(spec("breaches", [{"seed": s, "tokens": 25600 + 256 * s} for s in problems],
                         max_attempts=1))
    for r in wait_sweep(breach, 60):
        prefix = f"run {r['id']} attempt 1: the trainer \"fake\" broke the trainer contract"
        want = [prefix] + problems[r["seed"]]
        if r["status"] != "failed" or r["attempt"] != 1 or r["interruptions"] != 0 or \
                r["worker"] != "wa" or r["final"]:
            fail(f"breach (seed {r['seed']}) run {r['id']}: {r}; expected failed on wa at attempt "
                 "1, not interrupted, no final_val_loss")
        for w in want:
            if w not in r["error"]:
                fail(f"breach (seed {r['seed']}) run {r['id']}: runs.error {r['error']!r} does "
                     f"not say {w!r}")
        print(f"seed {r['seed']}: {r['error'].split('(docs/trainers.md): ', 1)[-1][:110]}")
    hung = [r for r in runs_of(breach) if r["seed"] == 7][0]
    took = float(psql(f"SELECT extract(epoch FROM finished_at - started_at) FROM runs "
                      f"WHERE id = {hung['id']}"))
    if not 2.5 <= took <= 10:
        fail(f"the hung run {hung['id']} failed {took:.1f} s after it started; expected 3 to 10 s "
             "(--hang-timeout 3)")

    def leftover():  # a process of the hung run's trainer still alive
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue
            if b"contract_trainer.py" in cmd and \
                    f"SCALESWEEP_RUN_ID={hung['id']}".encode() in env:
                return pid
        return None
    if not until(lambda: leftover() is None, 5, 0.1):
        fail(f"the hung run's trainer is still alive (pid {leftover()}) after its attempt failed")
    print(f"hang: failed {took:.1f} s after it started (--hang-timeout 3); no process of it left")
    wlog = open(os.path.join(tmp, "wa.log")).read()
    for r in runs_of(breach):
        if r["error"] not in wlog:
            fail(f"worker wa's log does not say why run {r['id']} failed: {r['error']!r}")
    if wlog.count("; SIGKILL to pid ") != len(problems) - 1:  # all but exit 0 without done
        fail("worker wa's log does not say each SIGKILL of a trainer that broke the contract")
    alive("after the breaches")

    # ---- a later good run, and 6. world_size 2 ----------------------------------------------
    after = submit(spec("after", [{"seed": 1, "tokens": 102400}]))
    ws2 = submit(spec("ws2", [{"seed": 1}], resources={"cpus": 1, "ranks": 2}))
    a = wait_sweep(after)
    if a[0]["status"] != "succeeded" or a[0]["worker"] != "wa" or \
            abs(float(a[0]["final"] or 0) - (3 + 102400 / 1e6)) > 1e-9:
        fail(f"the good run after the breaches: {a}")
    after_rows = psql(SNAP)
    if after_rows != before:
        fail(f"the good runs' rows changed:\nbefore {before}\nafter  {after_rows}")
    print("after the breaches: the workers and the scheduler alive, a later good run succeeds, "
          "the earlier runs' rows unchanged")

    r = wait_sweep(ws2)[0]
    if r["status"] != "succeeded" or r["worker"] != "wa":
        fail(f"the world_size 2 run: {r}, expected succeeded on wa")
    log = attempt_log("wa", r["id"])
    e0, e1 = trainer_env(log, 0), trainer_env(log, 1)
    for rank, e in ((0, e0), (1, e1)):
        want = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "SCALESWEEP_TRAINER": "fake",
                "SCALESWEEP_RUN_ID": str(r["id"])}
        got = {k: e.get(k) for k in want}
        if got != want:
            fail(f"world_size 2, rank {rank} saw {got}, expected {want}: {log[:3000]}")
    if not e0.get("MASTER_PORT", "").isdigit() or e0["MASTER_PORT"] != e1.get("MASTER_PORT"):
        fail(f"world_size 2: MASTER_PORT {e0.get('MASTER_PORT')!r} and {e1.get('MASTER_PORT')!r}, "
             "expected one port")
    if "rank 1 of 2: nothing for the worker here" not in log or \
            f"rank 0 heard 'rank 1' on port {e0['MASTER_PORT']}" not in log:
        fail(f"world_size 2: rank 1's stdout is not in the log, or the ranks did not meet: "
             f"{log[:3000]}")
    if " launch --world-size 2 -- " not in log.splitlines()[0]:
        fail(f"world_size 2: the log's first line: {log.splitlines()[0]!r}")
    if len(metrics_of(r["id"])) != 4:
        fail(f"world_size 2: metrics {metrics_of(r['id'])}, expected rank 0's 4 steps")
    print(f"world_size 2: ranks 0 and 1 on one worker, MASTER_PORT {e0['MASTER_PORT']}, rank 1's "
          "stdout in the log; succeeded")

    # ---- 4. placement by trainer -----------------------------------------------------------
    on = rows("SELECT coalesce(r.config->>'trainer', 'builtin'), w.name, count(*) FROM runs r "
              "JOIN test_ran_on o ON o.run_id = r.id JOIN workers w ON w.id = o.worker "
              "GROUP BY 1, 2 ORDER BY 1, 2")
    want = [["builtin", "wb", "1"], ["fake", "wa", str(3 + len(problems) + 2)]]
    if on != want:
        fail(f"runs by trainer and the worker each was placed on: {on}, expected {want}")
    fake_ids = [x[0] for x in rows("SELECT id FROM runs WHERE config->>'trainer' = 'fake' "
                                   "ORDER BY id")]
    ran = sorted(os.listdir(os.path.join(tmp, "wa", "runs")), key=int)
    if ran != fake_ids or os.listdir(os.path.join(tmp, "wb", "runs")) != [str(builtin_id)]:
        fail(f"the runs in wa's work dir {ran}, in wb's "
             f"{os.listdir(os.path.join(tmp, 'wb', 'runs'))}; expected {fake_ids} and "
             f"[{builtin_id}]")
    print("placement: every run of trainer fake on wa, none on wb; the built-in run on wb")

    # ---- a run spread over two workers: the part without rank 0 prints no
    # line to its worker, and is not taken for a hung trainer ------------------------------
    start_worker("wc", 1, ["--trainer", "fake=" + FAKE, "--trainer", "NULL=" + FAKE,
                           "--hang-timeout", "3"])
    gang = submit(spec("gang", [{"seed": 9, "batch_size": 12}], resources={"cpus": 1, "ranks": 3}))
    r = wait_sweep(gang)[0]
    logs = {w: attempt_log(w, r["id"]) for w in ("wa", "wc")}
    if r["status"] != "succeeded" or r["worker"] != "wa":
        fail(f"the run spread over wa and wc: {r}, expected succeeded with rank 0 on wa; "
             f"wc's part: {logs['wc'][-2000:]}")
    e0, e2 = trainer_env(logs["wa"], 0), trainer_env(logs["wc"], 2)
    want = {"RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": e0.get("MASTER_PORT"),
            "SCALESWEEP_RUN_ID": str(r["id"])}
    got = {k: e2.get(k) for k in want}
    if got != want or e0.get("LOCAL_WORLD_SIZE") != "2":
        fail(f"the part on wc saw {got}, expected {want} (rank 0 saw {e0})")
    if " --ranks 0,1 --dist 127.0.0.1:" not in logs["wa"].splitlines()[0] or \
            " --ranks 2 --dist 127.0.0.1:" not in logs["wc"].splitlines()[0]:
        fail(f"the parts' launches: {logs['wa'].splitlines()[0]!r} {logs['wc'].splitlines()[0]!r}")
    wclog = open(os.path.join(tmp, "wc.log")).read()
    if "rank 2: rank 0 said 'finished'" not in logs["wc"] or "broke the trainer contract" in wclog:
        fail(f"the part on wc (no line to its worker for 5 s, --hang-timeout 3) did not run to "
             f"the end: {wclog[-2000:]}")
    print("a run spread over wa (ranks 0, 1) and wc (rank 2): one MASTER_PORT; wc's part, "
          "silent on stdout for 5 s, is not taken for a hung trainer; succeeded")

    # a trainer named like SQL's NULL is a name as any other (the queue read
    # is given the offered trainers as a text array)
    r = wait_sweep(submit(spec("null", [{"seed": 1}], trainer="NULL")), 20)[0]
    if r["status"] != "succeeded" or r["worker"] != "wc" or \
            trainer_env(attempt_log("wc", r["id"]), 0).get("SCALESWEEP_TRAINER") != "NULL":
        fail(f"the run of the trainer \"NULL\" that wc declares: {r}")
    print("trainer \"NULL\": placed on wc, which declares it, and succeeded")

    # ---- 5. a trainer no worker runs ------------------------------------------------------
    n = runs_of(nobody)
    if [(x["status"], x["attempt"], x["worker"]) for x in n] != [("queued", 0, "")] * 2:
        fail(f"the sweep of trainer nobody: {n}, expected 2 runs queued, no attempt, no worker")
    st, doc = request("GET", f"/api/sweeps/{nobody}")
    why = (doc or {}).get("waiting") or ""
    m = re.fullmatch(r'no connected worker runs the trainer "nobody" \(the connected workers run '
                     r'(.*); a worker\'s operator offers it with --trainer nobody=COMMAND, '
                     r'docs/trainers.md\)', why)
    if st != 200 or not m or sorted(m.group(1).split(", ")) != ["NULL", "builtin", "fake", "fake2"]:
        fail(f"GET /api/sweeps/{nobody}: {st}, waiting {why!r}; expected the trainer \"nobody\" "
             "and the trainers builtin, fake, fake2, NULL (once each)")
    st, lst = request("GET", "/api/sweeps")
    if [x.get("waiting") for x in lst if x["id"] == nobody] != [why] or \
            any("waiting" in x for x in lst if x["id"] != nobody):
        fail(f"GET /api/sweeps: {[(x['id'], x.get('waiting')) for x in lst]}, expected only "
             f"sweep {nobody} waiting, {why!r}")
    cli_env = dict(os.environ, SCALESWEEP_TOKEN=open(token).read().strip())
    out = subprocess.run([BIN, "status", str(nobody), "--url", URL], capture_output=True,
                         text=True, timeout=30, env=cli_env)
    if out.returncode != 0 or "waiting: " + why not in out.stdout:
        fail(f"scalesweep status {nobody}: {out.returncode} {out.stdout!r} {out.stderr!r}")
    out = subprocess.run([BIN, "status", "--url", URL], capture_output=True, text=True,
                         timeout=30, env=cli_env)
    if out.returncode != 0 or f"sweep {nobody} waits: {why}" not in out.stdout:
        fail(f"scalesweep status: {out.returncode} {out.stdout!r} {out.stderr!r}")
    page = urllib.request.urlopen(f"{URL}/sweeps/{nobody}", timeout=10).read().decode()
    p = re.search(r'<p class="waiting"[^>]*>(.*?)</p>', page, re.S)
    if not p or html.unescape(p.group(1)).strip() != "Waiting: " + why:
        found = p.group(0) if p else 'no <p class="waiting">'
        fail(f"the page of sweep {nobody}: {found}, expected Waiting: {why}")
    st, body = request("POST", f"/api/sweeps/{nobody}/cancel")
    if st not in (200, 202):
        fail(f"cancel sweep {nobody}: {st} {body}")
    n = runs_of(nobody)
    if [(x["status"], x["attempt"]) for x in n] != [("cancelled", 0)] * 2:
        fail(f"the sweep of trainer nobody after its cancel: {n}")
    st, doc = request("GET", f"/api/sweeps/{nobody}")
    if "waiting" in doc:
        fail(f"a cancelled sweep still says it waits: {doc['waiting']!r}")
    print(f"trainer nobody: queued, no attempt spent, and says why (API, list, status, page): "
          f"{why}; cancelled")
    alive("at the end")
    print(f"PASS ({time.time() - T0:.1f} s)")
finally:
    stop_all(procs)
    shutil.rmtree(tmp, ignore_errors=True)

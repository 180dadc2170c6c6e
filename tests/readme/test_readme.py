#!/usr/bin/env python3
"""Runs every command of the README, so that the README cannot drift from the
program (ctest readme_commands; through tests/integration/run_with_pg.sh,
which provides a throwaway PostgreSQL as SCALESWEEP_TEST_DB).

  test_readme.py SCALESWEEP_BINARY SOURCE_DIR

A command is a line of a ```sh block (a trailing `\\` joins lines; a line
ending in <<'WORD' takes the lines up to WORD as its input). Each must have
an entry in COMMANDS below, and each entry must still be in the README. An
entry runs the command as written where it can; where it cannot (a port
taken, a host name, a 12-minute study) it runs a stated stand-in that keeps
the README's program, subcommand and every option the README shows, and the
options the README shows as optional (in [brackets]) must be in the
command's --help. Commands for hardware or packages the machine lacks (a
GPU, PyTorch) run where they can and are listed as not run otherwise (so
is the trainer's example in a sanitized build, 20 times slower); the
two quick-start commands are run by the study_quickstart test and by
.ci/run.

Everything runs in a scratch directory with the layout of a checkout:
build/scalesweep is the binary under test, and sweeps/, trainer/, scripts/,
tests/ and README.md are the source tree's."""
import json
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness import free_port, psql  # noqa: E402

BIN, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
DB = os.environ.get("SCALESWEEP_TEST_DB")
T0 = time.time()
procs = []


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    raise SystemExit(1)


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


# ---- the README's commands -------------------------------------------------

def readme_commands(path):
    """[(line number, command, heredoc or None)] of every ```sh block; a
    heredoc is its input lines and the end marker, to append to the command."""
    out, lines = [], open(path).read().split("\n")
    i, in_sh = 0, False
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_sh = not in_sh and line.strip() == "```sh"
            i += 1
            continue
        if not in_sh or not line.strip() or line.lstrip().startswith("#"):
            i += 1
            continue
        start, cmd = i + 1, line
        while cmd.endswith("\\"):
            i += 1
            cmd = cmd[:-1] + " " + lines[i].strip()
        cmd = re.sub(r"\s+#\s.*$", "", cmd).strip()  # a trailing comment
        cmd = re.sub(r"\s+", " ", cmd)
        here = None
        m = re.search(r"<<\s*'(\w+)'$", cmd)
        if m:
            body = []
            i += 1
            while lines[i] != m.group(1):
                body.append(lines[i])
                i += 1
            here = "\n".join(body) + "\n" + m.group(1) + "\n"  # the input and its end
        out.append((start, cmd, here))
        i += 1
    return out


def options(cmd):
    """The --options of a command: (outside brackets, inside brackets)."""
    inside = set(re.findall(r"--[a-z][a-z0-9-]*", " ".join(re.findall(r"\[[^\]]*\]", cmd))))
    every = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", cmd))
    return every - inside, inside


def program(cmd):
    """The program and subcommand words before the first option or argument:
    './build/scalesweep fit', 'bash scripts/test.sh', 'curl'."""
    words = [w for w in shlex.split(cmd.split("<<")[0]) if "=" not in w or w.startswith("-")]
    head = []
    for w in words:
        if w.startswith("-") or w.startswith("[") or (head and not re.fullmatch(r"[a-z]+", w)):
            break
        head.append(w)
        if w in ("bash", "sbatch") or w.endswith("scalesweep"):
            continue
        if len(head) >= 2:
            break
    return " ".join(head)


# ---- the scratch checkout ----------------------------------------------------

work = tempfile.mkdtemp(prefix="scalesweep-readme-")
os.chmod(work, 0o755)  # as root, the private PostgreSQL runs as postgres and must reach it
os.makedirs(os.path.join(work, "build"))
os.makedirs(os.path.join(work, "bin"))
os.symlink(BIN, os.path.join(work, "build", "scalesweep"))
os.symlink(BIN, os.path.join(work, "bin", "scalesweep"))
for name in ("sweeps", "trainer", "trainers", "scripts", "tests", "docs", "README.md"):
    os.symlink(os.path.join(SRC, name), os.path.join(work, name))
# Slurm stand-ins: sbatch runs the script in the background as Slurm would
# start it (the environment passed on), srun runs its command once
with open(os.path.join(work, "bin", "sbatch"), "w") as f:
    f.write("#!/usr/bin/env bash\n# sbatch stand-in: options dropped, the script run in the background\n"
            "while [ $# -gt 1 ]; do shift; done\n"
            "setsid bash \"$1\" > sbatch.log 2>&1 < /dev/null &\necho \"Submitted batch job $!\"\n")
with open(os.path.join(work, "bin", "srun"), "w") as f:
    f.write("#!/usr/bin/env bash\n# srun stand-in: options dropped, the command run once\n"
            "while [ \"${1#-}\" != \"$1\" ]; do shift; done\nexec \"$@\"\n")
for n in ("sbatch", "srun"):
    os.chmod(os.path.join(work, "bin", n), 0o755)
ENV = dict(os.environ, PATH=os.path.join(work, "bin") + ":" + os.environ["PATH"],
           OMP_WAIT_POLICY="PASSIVE")
ENV.pop("SCALESWEEP_URL", None)
ENV.pop("SCALESWEEP_TOKEN", None)


def sh(cmd, timeout=600, env=None):
    """Runs cmd with bash in the scratch checkout."""
    try:
        return subprocess.run(["bash", "-c", cmd], cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout, env=env or ENV)
    except subprocess.TimeoutExpired:
        fail(f"{cmd!r} did not finish in {timeout} s")


def background(cmd, env=None):
    p = subprocess.Popen(["bash", "-c", "exec " + cmd], cwd=work, env=env or ENV,
                         stdout=open(os.path.join(work, f"bg{len(procs)}.log"), "w"),
                         stderr=subprocess.STDOUT, start_new_session=True)
    procs.append(p)
    return p


def stop(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGINT)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def until(what, fn, timeout=120):
    t = time.time()
    while time.time() - t < timeout:
        try:
            v = fn()
            if v:
                return v
        except OSError:
            pass
        time.sleep(0.3)
    fail(f"timed out waiting for {what}")


def healthy(port):
    return lambda: get(f"http://127.0.0.1:{port}/healthz", 2)[0] == 200


# ---- what each command is, and how it is checked ----------------------------

state = {}


def expect(r, *texts, rc=0):
    if r.returncode != rc:
        fail(f"exit {r.returncode}, expected {rc}\nstdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}")
    for t in texts:
        if t not in r.stdout:
            fail(f"the output lacks {t!r}:\n{r.stdout[-3000:]}\nstderr: {r.stderr[-2000:]}")
    return r


def worker_runs(log):
    """{(run, attempt): [events]} from a worker's log."""
    runs = {}
    for m in re.finditer(r"worker: run (\d+) attempt (\d+): (started pid|checkpoint at step|"
                         r"exited with code \d+|finished and acknowledged)", log):
        runs.setdefault((int(m[1]), int(m[2])), []).append(m[3])
    return runs


def run_up_study(readme, concrete, here):
    """The quick start's study: a stand-in spec of 13 tiny runs, in the
    state directory scripts/quickstart.sh keeps (.scalesweep/quickstart-latest).
    It is interrupted first (Ctrl-C: SIGINT to the process group) once a run
    has finished and another has checkpointed; the same command again goes
    on with the same sweep: finished runs are not run again, the interrupted
    one resumes from its checkpoint."""
    os.makedirs(os.path.join(work, ".scalesweep", "quickstart-test"))
    os.symlink("quickstart-test", os.path.join(work, ".scalesweep", "quickstart-latest"))
    wlog = os.path.join(work, ".scalesweep", "quickstart-test", "worker.log")
    first = background(concrete)

    def mid_run():
        runs = worker_runs(open(wlog).read()) if os.path.exists(wlog) else {}
        done = [k for k, ev in runs.items() if "exited with code 0" in ev]
        flying = [k for k, ev in runs.items()
                  if "checkpoint at step" in ev and not any(e.startswith("exited") for e in ev)]
        return done and flying and (done, flying)
    done, flying = until("a finished run and a checkpointed running one", mid_run, 300)
    stop(first)
    if first.returncode == 0:
        fail("up --wait, interrupted before its sweep finished: exit 0")
    # a run that finished between the look and the signal has nothing to resume
    at_stop = worker_runs(open(wlog).read())
    flying = [k for k in flying if "exited with code 0" not in at_stop[k]]
    r = expect(sh(concrete), "sweep 1: this spec was submitted before; following that sweep",
               "sweep 1 finished: 13 of 13 runs succeeded", "result of sweep 1:")
    runs = worker_runs(open(wlog).read())
    again = [k for k in runs if k[0] in {d[0] for d in done} and k not in done]
    if again:
        fail(f"runs finished before the interruption ran again: {again}")
    wtext = open(wlog).read()
    for run, attempt in flying:
        if not re.search(rf"run {run} attempt \d+: started pid \d+ .*resuming", wtext):
            fail(f"run {run}, interrupted after a checkpoint, did not resume from it:\n{wtext[-2000:]}")
    log(f"up --wait interrupted (exit {first.returncode}) after {len(done)} finished run(s); run(s) "
        f"{sorted(k[0] for k in flying)} resumed from their checkpoints when it ran again")
    expect(r, "sweep 1 finished: 13 of 13 runs succeeded",
               "L(N, D) = E + A/N^alpha + B/D^beta", "the corpus: entropy rate",
               "from IsoFLOP minima", "critical batch size (tokens)",
               "from the gradient noise scale: B_noise", "stability: fitted without the smallest budget")
    if not os.path.exists(os.path.join(work, ".scalesweep", "quickstart-latest", "database")):
        fail("up did not write STATE/database")


def serve_study(readme, concrete, here):
    port = free_port()
    state["port"] = port
    state["serve"] = background(f"{concrete} --listen 127.0.0.1:{port}")
    until("the served study", healthy(port))


def local_port(concrete):
    return concrete.replace("127.0.0.1:8080", f"127.0.0.1:{state['port']}")


def check_fit_table(r):
    expect(r, "chinchilla:", "isoflop:", "batch:")


def check_fit_json(r):
    j = json.loads(expect(r).stdout)
    if j.get("law") != "isoflop" or "a" not in j.get("params", {}):
        fail(f"fit --law isoflop --json: {r.stdout[:500]}")


def check_next(r):
    """The tiny study's largest budget is 3e10: its next, 1e11, designed; or,
    where the tiny study's 9 runs fit a surface with an exponent at or below
    0 (they do here: alpha -24), refused with that reason and exit 2 (the
    designs themselves are checked by next_e2e and test_next)."""
    if r.returncode == 2 and "has no compute-optimal size (alpha" in r.stderr:
        return
    out = expect(r, "N_opt", "predicted loss").stdout
    rows = [l for l in out.splitlines() if re.match(r"\s+\d+\s+\d+x\d+\s", l)]
    if len(rows) != 5 or out.count("[") < 7:
        fail(f"scalesweep next: {out}")


def check_runs(r):
    rows = [l for l in expect(r).stdout.splitlines() if re.match(r"\s*\d+\s", l)]
    if len(rows) != 13:
        fail(f"runs: {len(rows)} rows, expected 13:\n{r.stdout}")


def check_curl_fit(r):
    j = json.loads(expect(r).stdout)
    if not {"chinchilla", "isoflop", "batch"} <= set(j):
        fail(f"GET /api/sweeps/1/fit: laws {sorted(j)}")


def check_curl_points(r):
    j = json.loads(expect(r).stdout)
    if len(j.get("final_val_loss", [])) != 13:  # not the reproduction: the same observation
        fail(f"GET /api/sweeps/1/points: {r.stdout[:300]}")


def check_sql(r):
    expect(r, "alpha", "beta")
    if "(0 rows)" in r.stdout or "ERROR" in r.stderr:
        fail(f"the SQL example found nothing: {r.stdout} {r.stderr}")
    stop(state["serve"])  # the served study is done with


def text_prepare(r):
    j = json.loads(expect(r).stdout.strip().splitlines()[-1])
    if j["train_tokens"] < 1_000_000:
        fail(f"data prepare on Python's standard library: {j}")


def text_study(r):
    expect(r, "sweep 1 finished: 9 of 9 runs succeeded", "L(N, D) = E + A/N^alpha + B/D^beta")
    if "the corpus: entropy rate" in r.stdout:
        fail("a study on real text printed a synthetic corpus's entropy rate")


def torch_study(r):
    expect(r, "sweep 1 finished: 12 of 12 runs succeeded", "L(N, D) = E + A/N^alpha + B/D^beta",
           "from IsoFLOP minima")
    cfg = os.path.join(work, ".scalesweep", "torch", "worker", "runs", "1", "config.json")
    if json.load(open(cfg)).get("trainer") != "torch":
        fail(f"{cfg}: the study's runs do not name the trainer torch")


def migrate(r):
    expect(r)
    if psql("SELECT count(*) FROM schema_migrations") in ("", "0"):
        fail("migrate applied nothing")


def external_up(r):
    expect(r, "sweep 1 finished: 13 of 13 runs succeeded")
    if psql("SELECT count(*) FROM runs WHERE status = 'succeeded'") != "13":
        fail("up --database: the runs are not in that database")


def token_file(r):
    expect(r)
    p = os.path.join(work, "cluster.token")
    tok = open(p).read()
    if not re.fullmatch(r"[0-9a-f]{64}", tok) or os.stat(p).st_mode & 0o077:
        fail(f"cluster.token: {tok!r}, mode {oct(os.stat(p).st_mode)}")


def cluster_scheduler(readme, concrete, here):
    state["api"], state["wport"] = free_port(), free_port()
    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    c = (concrete.replace("0.0.0.0:8080", f"127.0.0.1:{state['api']}")
         .replace("0.0.0.0:8081", f"127.0.0.1:{state['wport']}"))
    state["sched"] = background(c)
    until("the cluster's scheduler", healthy(state["api"]))


def cluster_worker(readme, concrete, here):
    background(concrete.replace("SCHEDULER_HOST:8081", f"127.0.0.1:{state['wport']}"))
    until("the worker", lambda: any(w["name"] == "host1" and w.get("connected", True)
                                    for w in json.loads(get(f"http://127.0.0.1:{state['api']}/api/workers")[1])))


def cluster_submit(readme, concrete, here):
    """sweeps/examples/gpu-cluster.json with its shards under this
    scheduler's --data-dir (data/, relative) instead of /data"""
    spec = json.load(open(os.path.join(SRC, "sweeps", "examples", "gpu-cluster.json")))
    for k in ("train", "val"):
        spec["base"]["data"][k] = spec["base"]["data"][k].replace("/data/", "data/", 1)
    json.dump(spec, open(os.path.join(work, "data", "gpu-cluster.json"), "w"))
    # the scheduler resolves every shard pattern and refuses one that matches
    # nothing: small stand-in shards (llm.c format) where the FineWeb ones
    # would lie; the runs wait for GPU workers and are cancelled unrun
    shards = os.path.join(work, "data", "fineweb10B")
    os.makedirs(shards, exist_ok=True)
    for name in ("fineweb_train_000001.bin", "fineweb_val_000000.bin"):
        ntok = 4096
        with open(os.path.join(shards, name), "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, ntok, *([0] * 253)))
            f.write(struct.pack(f"<{ntok}H", *[(7 * i) % 50257 for i in range(ntok)]))
    c = concrete.replace("SCHEDULER_HOST:8080", f"127.0.0.1:{state['api']}")
    r = expect(sh(c), "sweep 1 submitted:")
    planned = int(re.search(r"(\d+) runs planned", r.stdout).group(1))
    if planned < 20:
        fail(f"gpu-cluster.json planned {planned} runs")
    # no GPU here: its runs wait for GPU workers; a CPU sweep runs through
    expect(sh(f"./build/scalesweep cancel 1 --url http://127.0.0.1:{state['api']} --token-file cluster.token"))
    expect(sh(f"./build/scalesweep submit tests/readme/tiny.json --url http://127.0.0.1:{state['api']} "
              "--token-file cluster.token"), "sweep 2 submitted: 13 runs planned")
    until("the CPU sweep on the cluster", lambda: json.loads(
        get(f"http://127.0.0.1:{state['api']}/api/sweeps/2?limit=0")[1])["counts"]["succeeded"] == 13,
        timeout=300)


def shared(*texts):
    """A shared cluster's command (README) against the cluster's scheduler,
    whose token (cluster.token) is the admin's: its output holds texts
    (a compiled pattern is searched for)."""
    def check(readme, concrete, here):
        r = expect(sh(concrete.replace("SCHEDULER_HOST:8080", f"127.0.0.1:{state['api']}")))
        for t in texts:
            if not (t.search(r.stdout) if hasattr(t, "search") else t in r.stdout):
                fail(f"{readme!r}: the output lacks {t!r}:\n{r.stdout[-2000:]}\n{r.stderr[-1000:]}")
    return ("self", check)


TOKEN_LINE = re.compile(r"^[0-9a-f]{64}$", re.M)


def slurm(readme, concrete, here):
    c = (concrete.replace("SCHEDULER_HOST:8081", f"127.0.0.1:{state['wport']}")
         .replace("/shared/cluster.token", os.path.join(work, "cluster.token")))
    expect(sh(c), "Submitted batch job")
    name = socket.gethostname().split(".")[0] + "-local"
    log_ = os.path.join(work, "sbatch.log")
    until(f"the Slurm job's worker {name} (sbatch.log: {open(log_).read()[-2000:] if os.path.exists(log_) else ''})",
          lambda: any(w["name"] == name for w in json.loads(
              get(f"http://127.0.0.1:{state['api']}/api/workers")[1])), timeout=30)
    # the job ends: Slurm's SIGTERM reaches the worker
    sh("pkill -TERM -f -- '--name " + name + "'")
    for p in procs:
        stop(p)


def train_quickstart(r):
    done = [json.loads(l) for l in expect(r).stdout.splitlines() if '"event":"done"' in l]
    if not done or abs(done[0]["final_val_loss"] - 0.96) > 0.01:
        fail(f"trainer/examples/quickstart.json: {done}, the README says 0.96")


def print_config(r):
    j = json.loads(expect(r).stdout)  # the resolved config alone
    if j["model"]["d_model"] != 96 or "lr" not in j["train"]:
        fail(f"--print-config: {r.stdout[:300]}")


def print_memory(r):
    j = json.loads(expect(r).stdout)  # one line: the estimate, in bytes
    parts = sum(j[k] for k in ("params", "grads", "optimizer", "activations", "other"))
    if j.get("event") != "memory" or j.get("of") != "host" or j["total"] != parts:
        fail(f"--print-memory: {r.stdout[:300]}")


def train_dp(r):
    done = json.loads(expect(r).stdout.strip().splitlines()[-1])
    if done.get("event") != "done" or done.get("world_size") != 2:
        fail(f"train with world_size 2: {r.stdout[-400:]}")


def devices(r):
    out = expect(r).stdout
    if not re.search(r"^cpu: \d+ cores?$", out, re.M) or not re.search(r"^cuda: ", out, re.M):
        fail(f"devices: {out!r}")


def data_prepare(r):
    j = json.loads(expect(r).stdout.strip().splitlines()[-1])
    if not (j["train_tokens"] > 0 and j["val_tokens"] > 0):
        fail(f"data prepare: {j}")


def data_synth(r):
    j = json.loads(expect(r).stdout.strip().splitlines()[-1])
    if j["train_tokens"] != 10000 or not j["entropy_rate"] > 0:
        fail(f"data synth: {j}")


def have_torch():  # Debian's interpreter: the one with python3-torch
    return subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                          capture_output=True).returncode == 0


def have_scipy():
    return subprocess.run(["/usr/bin/python3", "-c", "import scipy"],
                          capture_output=True).returncode == 0


def have_gpu():
    return shutil.which("nvidia-smi") and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).returncode == 0


# README command -> (stand-in or None for as written, check); a check takes
# the finished process, or (readme, concrete, heredoc) when it runs the
# command itself (services in the background).
TINY = "tests/readme/tiny.json"
COMMANDS = [
    ("bash scripts/quickstart.sh", "study_quickstart", None),
    ("bash scripts/test.sh", ".ci/run", None),
    ("./build/scalesweep up --sweep sweeps/examples/quickstart.json --wait",
     f"./build/scalesweep up --state .scalesweep/quickstart-latest --sweep {TINY} --wait "
     "--listen 127.0.0.1:0", ("self", run_up_study)),
    ("./build/scalesweep up --state .scalesweep/quickstart-latest", None, ("self", serve_study)),
    ("./build/scalesweep fit 1 --state .scalesweep/quickstart-latest", None, check_fit_table),
    ("./build/scalesweep fit 1 --law isoflop --json --state .scalesweep/quickstart-latest", None,
     check_fit_json),
    ("./build/scalesweep runs 1 --state .scalesweep/quickstart-latest", None, check_runs),
    ("./build/scalesweep next 1 --flops 1e13 --state .scalesweep/quickstart-latest",
     "./build/scalesweep next 1 --flops 1e11 --state .scalesweep/quickstart-latest", check_next),
    ("./build/scalesweep reproduce 3 --wait --state .scalesweep/quickstart-latest", None,
     lambda r: expect(r, "reproduces run 3 exactly")),
    ("curl -s http://127.0.0.1:8080/api/sweeps/1/fit", "port", check_curl_fit),
    ("curl -s http://127.0.0.1:8080/api/sweeps/1/points", "port", check_curl_points),
    ("psql \"$(cat .scalesweep/quickstart-latest/database)\" <<'SQL'", None, check_sql),
    ("./build/scalesweep data prepare --out data/text --shuffle 1 --chunk-bytes 4096 $(find /usr/lib/python3.11 -name '*.py' | sort)",
     None, text_prepare),
    ("./build/scalesweep up --state .scalesweep/text --sweep sweeps/examples/text.json --wait",
     "./build/scalesweep up --state .scalesweep/text --sweep tests/readme/tiny-text.json --wait "
     "--listen 127.0.0.1:0", text_study),
    # the llama studies (10 minutes each): ctest study_llama and study_llama_mup, labelled slow
    ("./build/scalesweep up --state .scalesweep/llama --sweep sweeps/examples/llama.json --wait",
     "study_llama", None),
    ("./build/scalesweep up --state .scalesweep/llama-mup --sweep sweeps/examples/llama-mup.json "
     "--wait", "study_llama_mup", None),
    # the adaptive design on text, and against the grid (about 15 minutes): ctest
    # study_adaptive_text, labelled slow, runs the comparison, the study with it
    ("./build/scalesweep up --state .scalesweep/text-adaptive --sweep "
     "sweeps/examples/text-adaptive.json --wait", "study_adaptive_text", None),
    ("python3 tests/bench/adaptive_vs_grid.py ./build/scalesweep sweeps/examples/text-adaptive.json "
     ".scalesweep/adaptive-vs-grid", "study_adaptive_text", None),
    ("./build/scalesweep plan sweeps/examples/quickstart.json", None,
     lambda r: expect(r, "48 runs", "35 runs start their decay", "37.0% saved")),
    ("./build/scalesweep plan sweeps/examples/wsd-grid.json", None,
     lambda r: expect(r, "from #5 at step 1562", "37.3% saved")),
    ("./build/scalesweep plan sweeps/examples/bcrit.json", None,
     lambda r: expect(r, "13 runs", "from #12 at step 256",
                      "12 rungs start from the checkpoints of 1 trunk")),
    ("./build/scalesweep migrate --database postgresql://scalesweep@db.example.org/scalesweep",
     "./build/scalesweep migrate --database \"$SCALESWEEP_TEST_DB\"", migrate),
    ("./build/scalesweep up --database postgresql://scalesweep@db.example.org/scalesweep "
     "--sweep sweeps/examples/quickstart.json --wait",
     f"./build/scalesweep up --state .scalesweep/external --database \"$SCALESWEEP_TEST_DB\" "
     f"--sweep {TINY} --wait --listen 127.0.0.1:0", external_up),
    ("(umask 077; od -An -N32 -tx1 /dev/urandom | tr -d ' \\n' > cluster.token)", None, token_file),
    ("./build/scalesweep scheduler --database postgresql://scalesweep@db.example.org/scalesweep "
     "--listen 0.0.0.0:8080 --workers 0.0.0.0:8081 --token-file cluster.token --data-dir /data "
     "--checkpoints /shared/checkpoints",
     "./build/scalesweep scheduler --database \"$SCALESWEEP_CLUSTER_DB\" --listen 0.0.0.0:8080 "
     "--workers 0.0.0.0:8081 --token-file cluster.token --data-dir \"$PWD/data\" "
     "--checkpoints \"$PWD/checkpoints\"", ("self", cluster_scheduler)),
    ("./build/scalesweep worker --scheduler SCHEDULER_HOST:8081 --token-file cluster.token [--gpus 0,1]",
     "./build/scalesweep worker --scheduler SCHEDULER_HOST:8081 --token-file cluster.token "
     "--gpus none --work-dir worker1 --name host1", ("self", cluster_worker)),
    ("./build/scalesweep submit sweeps/examples/gpu-cluster.json --url http://SCHEDULER_HOST:8080 "
     "--token-file cluster.token",
     "./build/scalesweep submit data/gpu-cluster.json --url http://SCHEDULER_HOST:8080 "
     "--token-file cluster.token", ("self", cluster_submit)),
    ("./build/scalesweep user add ann --role member --url http://SCHEDULER_HOST:8080 --token-file cluster.token", None, shared(TOKEN_LINE)),
    ("./build/scalesweep user set ann --priority-range -10:10 --url http://SCHEDULER_HOST:8080 --token-file cluster.token", None,
     shared("user ann: member, priority -10..10")),
    ("./build/scalesweep user list --url http://SCHEDULER_HOST:8080 --token-file cluster.token", None, shared("ann", "admin")),
    ("./build/scalesweep user token ann --url http://SCHEDULER_HOST:8080 --token-file cluster.token", None, shared(TOKEN_LINE)),
    ("./build/scalesweep user revoke ann --url http://SCHEDULER_HOST:8080 --token-file cluster.token", None, shared("revoked")),
    ("./build/scalesweep audit --since 2026-12-01 --user admin --url http://SCHEDULER_HOST:8080 --token-file cluster.token", None,
     shared("user revoke", "user token", "user add")),
    ("SCALESWEEP_SCHEDULER=SCHEDULER_HOST:8081 SCALESWEEP_TOKEN_FILE=/shared/cluster.token "
     "sbatch --nodes=4 --gres=gpu:8 scripts/slurm-workers.sbatch", None, ("self", slurm)),
    ("./build/scalesweep scheduler --database postgresql://scalesweep@db.example.org/scalesweep "
     "--listen 0.0.0.0:8080 --workers 0.0.0.0:8081 --token-file /shared/cluster.token "
     "--checkpoints /shared/checkpoints --slurm gpu --slurm-gpus-per-node 8 --slurm-max-nodes 8",
     ("needs", lambda: False, "it needs a Slurm cluster with a GPU partition; ctest "
      "slurm_elastic runs the scheduler's --slurm under a real Slurm (CPU nodes)"),
     lambda r: expect(r)),
    ("./build/scalesweep train --config trainer/examples/quickstart.json",
     ("needs", lambda: not os.environ.get("SCALESWEEP_TEST_SANITIZED"),
      "a sanitized build: over 10 minutes; the other build's run checks it"), train_quickstart),
    ("./build/scalesweep train --config run.json [--checkpoint-dir DIR] [--resume DIR] [--print-config]",
     "./build/scalesweep train --config trainer/examples/quickstart.json --print-config",
     print_config),
    ("./build/scalesweep train --config run.json --print-memory",
     "./build/scalesweep train --config trainer/examples/quickstart.json --print-memory",
     print_memory),
    ("./build/scalesweep train --config run.json",
     "./build/scalesweep train --config tests/readme/dp.json", train_dp),
    ("./build/scalesweep devices", None, devices),
    ("./build/scalesweep data prepare --out DIR [--val-fraction 0.1] [--shuffle SEED [--chunk-bytes B]] FILE...",
     "./build/scalesweep data prepare --out data/prepared --val-fraction 0.1 --shuffle 7 --chunk-bytes 512 README.md "
     "docs/*.md", 
     data_prepare),
    ("./build/scalesweep data synth --out DIR [--tokens N] [--words W] [--zipf S] ...",
     "./build/scalesweep data synth --out data/synth --tokens 10000 --words 64 --zipf 1.1",
     data_synth),
    ("bash scripts/install-deps.sh --bench", ("needs", have_scipy, "SciPy is not installed "
     "(the command installs it; this test installs nothing)"), lambda r: expect(r)),
    ("/usr/bin/python3 tests/bench/trainers_bench.py",
     ("needs", have_torch, "PyTorch is not installed",
      "/usr/bin/python3 tests/bench/trainers_bench.py --repeats 1 --shapes small"),
     lambda r: expect(r, "built-in tok/s", "PyTorch spawn->step")),
    ("./build/scalesweep up --state .scalesweep/torch --sweep sweeps/examples/torch.json --wait "
     "--listen 127.0.0.1:0 --trainer torch='/usr/bin/python3 trainers/torch/train.py'",
     ("needs", have_torch, "PyTorch is not installed"), torch_study),
    ("bash tests/bench/run.sh", ("needs", have_torch, "PyTorch is not installed"),
     lambda r: expect(r, "tok/s")),
    ("bash tests/gpu/bundle.sh", ("needs", lambda: False, "it builds the whole source tree, "
     "which this scratch copy is not; ctest gpu_bundle runs it"), lambda r: expect(r)),
    ("bash tests/gpu/run.sh", ("needs", have_gpu, "no GPU here"), lambda r: expect(r)),
]
BENCH_ENV = dict(ENV, BENCH_SHAPES="a", BENCH_PRECISIONS="fp32", BENCH_REPEATS="1",
                 BENCH_STEPS_A="4", BENCH_WARMUP="1", BENCH_BIN=os.path.join(work, "build", "scalesweep"))


def main():
    found = readme_commands(os.path.join(SRC, "README.md"))
    entries = {e[0]: e for e in COMMANDS}
    missing = [(n, c) for n, c, _ in found if c not in entries]
    if missing:
        fail("README commands without a test entry (tests/readme/test_readme.py):\n" +
             "\n".join(f"  README.md:{n}: {c}" for n, c in missing))
    here = {c: h for _, c, h in found}
    stale = [c for c in entries if c not in here]
    if stale:
        fail("test entries no longer in the README:\n" + "\n".join(f"  {c}" for c in stale))

    # a second database for the cluster, so that its sweeps start at 1
    psql("CREATE DATABASE readme_cluster")
    ENV["SCALESWEEP_CLUSTER_DB"] = re.sub(r"dbname=\S+", "dbname=readme_cluster", DB)
    not_run = []
    for readme, how, check in COMMANDS:
        if how in ("study_quickstart", "study_llama", "study_llama_mup", "study_adaptive_text",
                   ".ci/run"):
            where = os.path.join(SRC, ".ci", "run") if how == ".ci/run" else \
                os.path.join(SRC, "tests", "CMakeLists.txt")
            want = readme if how == ".ci/run" else f"NAME {how} "
            if want not in open(where).read():
                fail(f"{readme!r}: {where} does not run it")
            log(f"run by {how}: {readme}")
            continue
        if isinstance(how, tuple):  # ("needs", predicate, reason[, stand-in])
            if not how[1]():
                not_run.append(f"{readme}  ({how[2]})")
                log(f"not run: {readme} ({how[2]})")
                continue
            how = how[3] if len(how) > 3 else None
        concrete = readme if how in (None, "port") else how
        if how == "port":
            concrete = local_port(readme)
        # the stand-in keeps the program and every option shown
        shown, optional = options(readme)
        used, _ = options(concrete)
        if program(readme) != program(concrete) or not shown <= used:
            fail(f"stand-in {concrete!r} for {readme!r}: program or options differ "
                 f"({program(readme)!r} vs {program(concrete)!r}; missing {sorted(shown - used)})")
        if optional:
            helptext = sh(f"{program(readme)} --help")
            for o in optional:
                if o not in helptext.stdout + helptext.stderr:
                    fail(f"{readme!r}: {o} is not in `{program(readme)} --help`")
        log(f"run: {concrete}" + ("" if concrete == readme else f"   (for: {readme})"))
        if isinstance(check, tuple):
            check[1](readme, concrete, here[readme])
        else:
            env = BENCH_ENV if "bench" in readme else None
            script = concrete + "\n" + here[readme] if here[readme] else concrete
            check(sh(script, env=env))
    log(f"every README command: {len(COMMANDS) - len(not_run)} run or run elsewhere, "
        f"{len(not_run)} not run here")
    for n in not_run:
        print(f"  not run here: {n}")


try:
    main()
finally:
    for p in procs:
        stop(p)
    shutil.rmtree(work, ignore_errors=True)
print("readme commands: ok")

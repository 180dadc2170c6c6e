"""A throwaway Slurm cluster on this machine, for the tests that run
scalesweep's workers under a real Slurm (Debian's slurm-wlm and munge):
one munged with its own key and socket, one slurmctld and NODES slurmd
daemons, each slurmd a node of its own (n1, n2, ...) on 127.0.0.1 with its
own port, all under one directory and on ports free at start.

    c = SlurmCluster(tmp, nodes=2)
    why = c.start()            # None, or why Slurm cannot run here
    c.run(["sbatch", ...])     # with SLURM_CONF set
    c.stop()

Nothing is read from or written to /etc: the commands find the cluster
through SLURM_CONF (c.env()), and the cluster's munge socket is named in
its slurm.conf (AuthInfo). The daemons run as the user who starts them;
Slurm launches jobs as that user (root in CI)."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from harness import free_port, print_tail, psql

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel", "scontrol",
           "sinfo")


def missing():
    """the Slurm and munge programs this machine lacks, [] when it has all"""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [d for d in DAEMONS if not shutil.which(d, path=path)]


class SlurmCluster:
    def __init__(self, tmp, nodes=2, cpus=1, kill_wait=10, preempt_grace=None):
        """preempt_grace: seconds; with it, a second partition "urgent" on
        the same nodes preempts jobs of "test" (cancelled after SIGTERM and
        that grace time), as a lab's high-priority queue does"""
        self.preempt_grace = preempt_grace
        self.dir = os.path.join(tmp, "slurm")
        self.nodes = [f"n{i + 1}" for i in range(nodes)]
        self.cpus = cpus
        self.kill_wait = kill_wait
        self.procs = []
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.sock = os.path.join(self.dir, "munge", "munge.sock")

    def env(self, extra=None):
        e = dict(os.environ, SLURM_CONF=self.conf)
        e["PATH"] = e.get("PATH", "") + ":/usr/sbin:/sbin"
        e.update(extra or {})
        return e

    def run(self, argv, timeout=30, check=True, **kw):
        """runs a Slurm command against this cluster; its CompletedProcess"""
        p = subprocess.run(argv, env=kw.pop("env", self.env()), capture_output=True, text=True,
                           timeout=timeout, **kw)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}")
        return p

    def log(self, name):
        try:
            return open(os.path.join(self.dir, "log", name), errors="replace").read()
        except OSError:
            return ""

    def print_logs(self, tmp, tail):
        """On stderr, for a failed test: the end (tail characters) of each
        job's output file in tmp (slurm-JOB.out, sbatch's default name) and
        of the controller's log."""
        for name in sorted(n for n in os.listdir(tmp) if n.startswith("slurm-")):
            print_tail(os.path.join(tmp, name), tail, f"---- {name} (last {tail} bytes)")
        sys.stderr.write("---- slurmctld.log (last 1500 bytes)\n")
        sys.stderr.write(self.log("slurmctld.log")[-1500:])

    def start_or_skip(self, tmp):
        """start(); where Slurm cannot run here, the test skips (exit 77,
        ctest's SKIP_RETURN_CODE), its scratch directory tmp removed."""
        why = self.start()
        if why:
            print(f"SKIP: Slurm cannot run here: {why}")
            self.stop()
            shutil.rmtree(tmp, ignore_errors=True)
            sys.exit(77)

    def print_failure(self, tmp, slog, tail, job_tail, run_columns, jobs=False):
        """On stderr, for a failed test: the end (tail bytes) of the
        scheduler's log slog, the jobs' and controller's logs (job_tail), the
        runs table's run_columns and, with jobs, the jobs the controller knows.
        The database or Slurm may be the thing that failed: what cannot be
        read is left out."""
        print_tail(slog, tail, f"---- scheduler.log (last {tail} bytes)")
        self.print_logs(tmp, job_tail)
        try:
            print(psql(f"SELECT {run_columns} FROM runs ORDER BY id"), file=sys.stderr)
            if jobs:
                print(self.job_rows(), file=sys.stderr)
        except (subprocess.CalledProcessError, OSError):
            pass

    def _daemon(self, argv):
        p = subprocess.Popen(argv, env=self.env(), stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(self.dir, "log", "daemons.err"), "a"),
                             start_new_session=True)
        self.procs.append(p)
        return p

    def start(self):
        """starts munged, slurmctld and the slurmd daemons and waits until
        every node is idle; None, or a sentence saying why Slurm cannot run
        here (the caller skips)"""
        gone = missing()
        if gone:
            return "not installed: " + ", ".join(gone) + " (scripts/install-deps.sh installs slurm-wlm and munge)"
        d = self.dir
        for sub in ("munge", "state", "log") + tuple("spool/" + n for n in self.nodes):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        os.chmod(os.path.join(d, "munge"), 0o700)
        key = os.path.join(d, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        # -F: in the foreground, so that the process kept here is the daemon
        self._daemon(["munged", "-F", "-f", f"--socket={self.sock}", f"--key-file={key}",
                      f"--log-file={d}/log/munged.log", f"--pid-file={d}/munge/munged.pid",
                      f"--seed-file={d}/munge/seed"])
        for _ in range(100):
            if os.path.exists(self.sock):
                break
            time.sleep(0.05)
        else:
            return "munged did not start: " + self.log("munged.log")[-300:]
        user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
        host = socket.gethostname().split(".")[0]
        ctld_port, slurmd_port = free_port(), free_port()
        node_ports = [free_port() for _ in self.nodes]
        lines = [
            "ClusterName=scalesweep-test",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.sock}",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/slurmctld.pid",
            f"SlurmdPidFile={d}/slurmd-%n.pid",  # one per node, or each slurmd stops the last
            f"SlurmctldLogFile={d}/log/slurmctld.log",
            f"SlurmdLogFile={d}/log/slurmd-%n.log",
            # no cgroups: a container's cgroup tree is not Slurm's to manage
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=bf_interval=1",
            f"KillWait={self.kill_wait}",
            "InactiveLimit=0",
            "MinJobAge=600",
            "SlurmdTimeout=30",
        ]
        for n, p in zip(self.nodes, node_ports):
            lines.append(f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} "
                         f"CPUs={self.cpus} RealMemory=1000 State=UNKNOWN")
        nodes = ",".join(self.nodes)
        if self.preempt_grace is None:
            lines.append(f"PartitionName=test Nodes={nodes} Default=YES MaxTime=INFINITE State=UP")
        else:
            lines += ["PreemptType=preempt/partition_prio", "PreemptMode=CANCEL",
                      f"PartitionName=test Nodes={nodes} Default=YES MaxTime=INFINITE State=UP "
                      f"PriorityTier=1 GraceTime={self.preempt_grace}",
                      f"PartitionName=urgent Nodes={nodes} MaxTime=INFINITE State=UP "
                      "PriorityTier=10"]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        self._daemon(["slurmctld", "-D", "-f", self.conf])
        for n in self.nodes:
            self._daemon(["slurmd", "-D", "-f", self.conf, "-N", n])
        deadline = time.time() + 30
        while time.time() < deadline:
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                return (f"{dead[0].args[0]} exited {dead[0].returncode}: "
                        + (self.log("slurmctld.log") + self.log("daemons.err"))[-400:])
            p = self.run(["sinfo", "--Node", "--noheader", "--format=%N %t"], check=False)
            states = dict(ln.split() for ln in p.stdout.splitlines() if ln.strip())
            if p.returncode == 0 and all(states.get(n) == "idle" for n in self.nodes):
                return None
            time.sleep(0.3)
        return "the nodes did not come up idle in 30 s: " + self.log("slurmctld.log")[-400:]

    def jobs(self):
        """{job id: state} of the jobs the controller knows (finished ones too)"""
        p = self.run(["squeue", "--noheader", "--states=all", "--format=%i %T"], check=False)
        return dict(ln.split() for ln in p.stdout.splitlines() if ln.strip())

    def job_rows(self):
        """the jobs the controller knows, finished ones too: dicts of id,
        name, state, nodes, time (the limit), partition and comment"""
        keys = ("id", "name", "state", "nodes", "time", "partition", "comment")
        p = self.run(["squeue", "--noheader", "--states=all",
                      "--format=%i|%j|%T|%D|%l|%P|%k"], check=False)
        return [dict(zip(keys, ln.split("|", 6))) for ln in p.stdout.splitlines() if ln.strip()]

    def _strays(self):
        """pids of the processes started under this cluster that outlive its
        daemons (slurmstepd detaches from slurmd; the jobs' processes): all
        carry its SLURM_CONF in their environment"""
        mark = ("SLURM_CONF=" + self.conf).encode()
        pids = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            except OSError:
                continue
            if mark in env:
                pids.append(int(pid))
        return pids

    def stop(self):
        """cancels every job, stops the daemons and kills whatever of the
        jobs is left; may be called again"""
        if self.procs and os.path.exists(self.conf):
            try:
                ids = [j for j, st in self.jobs().items()
                       if st in ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING")]
                if ids:
                    self.run(["scancel", "--full"] + ids, check=False, timeout=10)
                    deadline = time.time() + self.kill_wait + 5
                    while time.time() < deadline and any(
                            self.jobs().get(j) in ("RUNNING", "COMPLETING") for j in ids):
                        time.sleep(0.3)
            except subprocess.TimeoutExpired:
                pass
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs = []
        for pid in self._strays():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

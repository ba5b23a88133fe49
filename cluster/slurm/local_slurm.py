"""A one-node SLURM on this machine, private to one directory: for tests/test_slurm.py, and for
trying the recipes here before a real cluster.

    python cluster/slurm/local_slurm.py install    # Debian/Ubuntu packages, as root (make test runs it)

    with LocalSlurm("/tmp/slurm", cpus=2) as slurm:       # munged, slurmctld, slurmd, as root
        subprocess.run(["sbatch", "--wait", ...], env=slurm.env)

Nothing global is touched: the config, state, logs, munge key and socket all live in the
directory, clients find them through SLURM_CONF, and the ports are free ones picked at start,
so two of these (or a real SLURM) can run side by side. Tested with Debian 12's SLURM 22.05.
"""
import os
import shutil
import socket
import subprocess
import sys
import time

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
COMMANDS = ["munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "squeue", "scancel"]
# `install` writes what it did to LOG, and the reason SLURM is unavailable to REASON_FILE (the
# Makefile's convention for optional installs, which tests/test_optional_installs.py reports)
LOG = os.path.join(sys.prefix, "optional-slurm.log")
REASON_FILE = os.path.join(sys.prefix, "optional-slurm.failed")
# the daemons live in sbin, which a non-login PATH may lack
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])


def which(command):
    return shutil.which(command, path=SEARCH_PATH)


def missing():
    return [c for c in COMMANDS if which(c) is None]


def install():
    """Install SLURM's Debian packages when a command is missing. Returns None when SLURM is
    there, else why it is not."""
    lacking = missing()
    if not lacking:
        return None
    what = f"SLURM is not installed ({', '.join(lacking)} not found)"
    if os.geteuid() != 0:
        return f"{what} and installing it needs root: apt-get install {' '.join(PACKAGES)}"
    if shutil.which("apt-get") is None:
        return f"{what} and there is no apt-get to install it: install {' '.join(PACKAGES)} by hand"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *PACKAGES]):
        try:
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            return f"{what} and `{' '.join(cmd)}` did not finish in 900 s"
        if out.returncode:
            return f"{what} and `{' '.join(cmd)}` failed (status {out.returncode}): {(out.stdout + out.stderr)[-1500:]}"
    lacking = missing()
    return f"apt-get installed {' '.join(PACKAGES)} but {', '.join(lacking)} are still not found" if lacking else None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalSlurm:
    """munged, slurmctld and slurmd run in the foreground under `root`, stopped by stop() (or the
    end of a with block); `env` is os.environ plus the SLURM_CONF that clients need."""

    def __init__(self, root, cpus=2):
        self.root, self.cpus = os.path.abspath(root), cpus
        self.host = socket.gethostname().split(".")[0]  # slurmd finds its NodeName as `hostname -s`
        self.conf = os.path.join(self.root, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf, PATH=SEARCH_PATH)
        self.procs = []

    def _path(self, *parts):
        return os.path.join(self.root, *parts)

    def _write_config(self):
        for d in ("munge", "state", "spool", "log"):
            os.makedirs(self._path(d), mode=0o700, exist_ok=True)
        key = self._path("munge", "munge.key")
        if not os.path.exists(key):
            with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o400), "wb") as f:
                f.write(os.urandom(1024))
        lines = [
            "ClusterName=daskgradtest",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={self._path('munge', 'munge.socket')}",
            "CredType=cred/munge",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            # the node has the CPUs written here whatever the machine has
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            # sbatch --wait polls every 2 s only while MinJobAge <= 5 (else after 8 s, then 32 s);
            # a finished job stays visible to scontrol for at least this long
            "MinJobAge=5",
            f"StateSaveLocation={self._path('state')}",
            f"SlurmdSpoolDir={self._path('spool')}",
            f"SlurmctldPidFile={self._path('slurmctld.pid')}",
            f"SlurmdPidFile={self._path('slurmd.pid')}",
            f"SlurmctldLogFile={self._path('log', 'slurmctld.log')}",
            f"SlurmdLogFile={self._path('log', 'slurmd.log')}",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN",
            f"PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP",
        ]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _start(self, name, *args):
        log = open(self._path("log", f"{name}.out"), "w")
        self.procs.append(subprocess.Popen([which(name), *args], env=self.env, stdout=log, stderr=log))
        log.close()

    def _logs(self):
        text = []
        for name in sorted(os.listdir(self._path("log"))):
            with open(self._path("log", name), errors="replace") as f:
                text.append(f"--- {name}\n{f.read()[-1500:]}")
        return "\n".join(text)

    def start(self, timeout=60):
        """Start the daemons and wait until the node is idle; RuntimeError with their logs when
        it is not within `timeout` seconds."""
        if os.geteuid() != 0:
            raise PermissionError("slurmd runs jobs as their users, so it must run as root")
        self._write_config()
        munge = self._path("munge")
        # --force: the socket's directory is private (pytest's tmp_path is 0700), which munged
        # refuses by default; every client here runs as root
        self._start("munged", "--foreground", "--force", f"--key-file={munge}/munge.key",
                    f"--socket={munge}/munge.socket", f"--pid-file={munge}/munged.pid",
                    f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed")
        self._start("slurmctld", "-D", "-f", self.conf)
        self._start("slurmd", "-D", "-f", self.conf)
        deadline, state, dead = time.monotonic() + timeout, [], []
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "--noheader", "--format=%T"], env=self.env,
                                   capture_output=True, text=True).stdout.split()
            if state == ["idle"]:
                return self
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the one-node SLURM in {self.root} did not come up (node state {state}, "
                           f"exited: {dead or 'none'}):\n{self._logs()}")

    def stop(self):
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit(__doc__)
    reason = install()
    with open(LOG, "w") as f:
        f.write((reason or "SLURM is installed") + "\n")
    if reason:
        with open(REASON_FILE, "w") as f:
            f.write(reason + "\n")
        print(f"optional install failed: slurm (see test summary): {reason}")
    elif os.path.exists(REASON_FILE):
        os.remove(REASON_FILE)

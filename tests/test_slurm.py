"""cluster/slurm/scheduler-file.sbatch under a real one-node SLURM (munged, slurmctld, slurmd
started for the session by cluster/slurm/local_slurm.py): the job trains on two workers and ends
cleanly, and a job whose scheduler fails or stalls fails quickly with a clear message instead of
waiting for its time limit."""
import os
import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = os.path.join(ROOT, "cluster", "slurm", "scheduler-file.sbatch")
TRAIN = os.path.join(ROOT, "examples", "train.py")
sys.path.insert(0, ROOT)  # `cluster` recipes are scripts beside the package, not part of it

from cluster.slurm import local_slurm  # noqa: E402


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    if local_slurm.missing():
        if os.path.exists(local_slurm.REASON_FILE):  # `make test` tried to install it and failed
            with open(local_slurm.REASON_FILE) as f:
                pytest.skip(f"{f.read().strip()} (from {local_slurm.REASON_FILE}; delete it to retry)")
        reason = local_slurm.install()
        if reason:
            pytest.skip(reason)
    if os.geteuid() != 0:
        pytest.skip("a private SLURM needs root: slurmd runs jobs as their users")
    with local_slurm.LocalSlurm(tmp_path_factory.mktemp("slurm"), cpus=2) as cluster:
        yield cluster


def sbatch(slurm, workdir, *args, **env):
    """Submit the recipe with --wait; returns (sbatch's exit status, scontrol's job record, the
    job's output)."""
    env = {**slurm.env, "PATH": os.pathsep.join([os.path.dirname(sys.executable), slurm.env["PATH"]]),
           "DASK_HOST": "127.0.0.1", "DASK_DASHBOARD": "127.0.0.1:0", **env}
    out = subprocess.run(["sbatch", "--wait", "--parsable", "--nodes=1", "--ntasks=2", "--cpus-per-task=1",
                          "--time=3", f"--chdir={workdir}", "--output=job.out", RECIPE, *args],
                         env=env, capture_output=True, text=True, timeout=240)
    job_id = out.stdout.split(";")[0].strip()
    assert job_id.isdigit(), out.stderr
    record = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True).stdout
    return out.returncode, dict(re.findall(r"(\w+)=(\S+)", record)), (workdir / "job.out").read_text()


def test_sbatch_recipe_trains_on_two_workers_and_the_job_ends_without_a_traceback(slurm, tmp_path):
    rc, job, output = sbatch(slurm, tmp_path, TRAIN, "--steps", "3")
    assert (rc, job["JobState"], job["ExitCode"]) == (0, "COMPLETED", "0:0"), output[-3000:]
    assert "connected: 2 workers" in output and "final loss" in output
    for noise in ("Traceback", "CommClosedError", " ERROR ", "error:"):
        assert noise not in output, output[-3000:]
    # the scheduler removes its file only when it shuts down cleanly
    assert not (tmp_path / f"scheduler-{job['JobId']}.json").exists()


def test_scheduler_that_exits_before_writing_its_file_fails_the_job_with_the_reason(slurm, tmp_path):
    # an address that is not this machine's: the scheduler cannot bind and exits with status 1
    rc, job, output = sbatch(slurm, tmp_path, TRAIN, DASK_HOST="192.0.2.1")
    assert (rc, job["JobState"], job["ExitCode"]) == (1, "FAILED", "1:0"), output[-3000:]
    assert "scheduler-file.sbatch: error: dask scheduler exited (status 1) before writing" in output
    assert "connected" not in output


STAND_IN_DASK = """#!/usr/bin/env bash
# the real dask, except that the subcommand named in $BREAK hangs (scheduler) or dies (worker)
case "$1:$BREAK" in
    scheduler:scheduler) exec sleep 600 ;;
    worker:worker) exit 3 ;;
esac
exec {dask} "$@"
"""


@pytest.fixture
def breakable_dask(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dask").write_text(STAND_IN_DASK.format(dask=os.path.join(os.path.dirname(sys.executable), "dask")))
    (bin_dir / "dask").chmod(0o755)
    return str(bin_dir)


def test_scheduler_that_never_writes_its_file_fails_the_job_after_the_start_timeout(slurm, tmp_path,
                                                                                     breakable_dask):
    rc, job, output = sbatch(slurm, tmp_path, TRAIN, BREAK="scheduler", DASK_START_TIMEOUT="2",
                             PATH=os.pathsep.join([breakable_dask, os.path.dirname(sys.executable), slurm.env["PATH"]]))
    assert (rc, job["JobState"]) == (1, "FAILED"), output[-3000:]
    assert "scheduler-file.sbatch: error: no scheduler file" in output and "after 2s (DASK_START_TIMEOUT)" in output


def test_worker_step_that_dies_fails_the_job_while_the_script_waits_for_workers(slurm, tmp_path, breakable_dask):
    rc, job, output = sbatch(slurm, tmp_path, TRAIN, BREAK="worker",
                             PATH=os.pathsep.join([breakable_dask, os.path.dirname(sys.executable), slurm.env["PATH"]]))
    assert (rc, job["JobState"]) == (1, "FAILED"), output[-3000:]
    assert "scheduler-file.sbatch: error: srun dask worker step exited (status 3) while" in output
    assert "connected" not in output

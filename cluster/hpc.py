"""dask-jobqueue recipes: a SLURM or PBS cluster whose workers run daskgrad's backward graphs.

    from cluster.hpc import slurm_cluster
    cluster = slurm_cluster(queue="gpu", account="proj123", gpus_per_job=1)
    cluster.scale(jobs=4)
    client = daskgrad.connect(cluster.scheduler_address)

GPU jobs get `--resources GPU=1` on their workers so VJP tasks of cupy tensors land there.
Needs the `hpc` extra (dask-jobqueue).
"""


def _worker_args(gpus_per_job):
    return ["--resources", f"GPU={gpus_per_job}"] if gpus_per_job else []


def slurm_cluster(cores=8, memory="32GiB", processes=1, walltime="01:00:00", queue=None, account=None,
                  gpus_per_job=0, prologue=(), **kwargs):
    from dask_jobqueue import SLURMCluster

    extra = [f"--gres=gpu:{gpus_per_job}"] if gpus_per_job else []
    return SLURMCluster(cores=cores, memory=memory, processes=processes, walltime=walltime, queue=queue,
                        account=account, job_extra_directives=extra, worker_extra_args=_worker_args(gpus_per_job),
                        job_script_prologue=list(prologue), **kwargs)


def pbs_cluster(cores=8, memory="32GB", processes=1, walltime="01:00:00", queue=None, account=None,
                gpus_per_job=0, prologue=(), **kwargs):
    from dask_jobqueue import PBSCluster

    select = f"select=1:ncpus={cores}:mem={memory}" + (f":ngpus={gpus_per_job}" if gpus_per_job else "")
    return PBSCluster(cores=cores, memory=memory, processes=processes, walltime=walltime, queue=queue,
                      account=account, resource_spec=select, worker_extra_args=_worker_args(gpus_per_job),
                      job_script_prologue=list(prologue), **kwargs)

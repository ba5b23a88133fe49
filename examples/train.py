"""A batch-job training script: logistic regression on data made on the workers.

    python examples/train.py                               # embedded LocalCluster
    python examples/train.py --scheduler-file sched.json   # a cluster from cluster/ (SLURM, PBS)
    mpirun -np 4 python examples/train.py --mpi            # dask-mpi: rank 0 scheduler, rank 1 this script

With --shutdown the cluster is stopped at the end, which ends a batch job.
"""
import argparse
import os

import daskgrad as dg


def train(steps=10, n=40_000, d=8, chunks=10_000, lr=0.5):
    dg.manual_seed(0)
    X = dg.randn(n, d, chunks=(chunks, d))  # lazy: each step makes its chunks on the workers again
    y = (X @ dg.ones(d) > 0).astype("float32")
    model = dg.nn.Linear(d, 1)
    criterion = dg.nn.BCEWithLogitsLoss()
    optimizer = dg.optim.SGD(model.parameters(), lr=lr, momentum=0.5)
    for step in range(steps):
        loss = criterion(model(X)[:, 0], y)
        optimizer.zero_grad()
        loss.backward()      # one submission: gradients, the loss, the previous step's update
        optimizer.step()
        print(f"step {step}: loss {loss.item():.4f}", flush=True)
    final = loss.item()
    print(f"final loss {final:.4f}")
    return final


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--scheduler-file")
    parser.add_argument("--mpi", action="store_true")
    parser.add_argument("--shutdown", action="store_true")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--workers", type=int, default=int(os.environ.get("SLURM_NTASKS", 1)),
                        help="wait for this many workers first (default: $SLURM_NTASKS or 1)")
    args = parser.parse_args()
    if args.mpi:
        from dask_mpi import initialize

        initialize(nthreads=1, dashboard=False, interface="lo")  # ranks 0 and >=2 never return
        from mpi4py import MPI

        client = dg.connect("auto-mpi")
        args.workers = MPI.COMM_WORLD.Get_size() - 2
    elif args.scheduler_file:
        client = dg.connect(scheduler_file=args.scheduler_file)
    else:
        client = dg.connect("local", dashboard_address=None)
    client.wait_for_workers(args.workers, timeout=120)
    n_workers = len(client.scheduler_info()["workers"])
    print(f"connected: {n_workers} workers")
    train(args.steps)
    if args.shutdown or args.mpi:
        client.shutdown()
    else:
        client.close()


if __name__ == "__main__":
    main()

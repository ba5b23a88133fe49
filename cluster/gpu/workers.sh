#!/usr/bin/env bash
# One dask worker per visible GPU, each pinned to its device and advertising GPU=1.
# Usage: SCHEDULER=tcp://host:8786 bash cluster/gpu/workers.sh   (or SCHEDULER_FILE=scheduler.json)
set -euo pipefail
target=${SCHEDULER_FILE:+--scheduler-file "$SCHEDULER_FILE"}
target=${target:-${SCHEDULER:?set SCHEDULER or SCHEDULER_FILE}}
ngpu=$(nvidia-smi -L | wc -l)
for ((i = 0; i < ngpu; i++)); do
  CUDA_VISIBLE_DEVICES=$i dask worker $target --nthreads 1 --resources "GPU=1" --name "gpu-$i" &
done
wait

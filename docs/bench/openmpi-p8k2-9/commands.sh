#!/usr/bin/env bash
# Run from the repository root. Open MPI, P = 8, two ranks per node: four more
# invocations of one full cycle (raw, raw-node, lmdbio x 6), cold, default settings.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for i in 1 2 3 4; do
  mpiexec.openmpi --oversubscribe -n 8 target/openmpi/release/lmdbio bench --ranks-per-node 2 \
    --batch 64 --cold --repeat 6 --method raw --method raw-node --method lmdbio \
    --json docs/bench/openmpi-p8k2-9/run-$i.json target/bench-data/image-7700
done
# lmdbio / limit: 0.94, 0.93, 0.93, 0.94

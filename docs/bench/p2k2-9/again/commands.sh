#!/usr/bin/env bash
# Run from the repository root. MPICH, P = 2, two ranks per node: four more
# invocations of one full cycle (raw, raw-node, lmdbio x 6), cold, default settings.
for i in 1 2 3 4; do
  mpiexec.mpich -n 2 target/release/lmdbio bench --ranks-per-node 2 --batch 64 --cold --repeat 6 \
    --method raw --method raw-node --method lmdbio \
    --json docs/bench/p2k2-9/again/run-$i.json target/bench-data/image-7700
done
# lmdbio / limit: 0.90, 0.92, 0.98, 0.95

#!/bin/bash
# Peak RSS per rank for two database sizes and two window sizes, warm,
# P = 2 on one node (fifth round: prepare maps the window). Run from the
# repository root.
set -eu
for db in image-7700 image-15400; do
  for w in 268435456 67108864; do
    mpiexec.mpich -n 2 target/release/lmdbio bench --ranks-per-node 2 --batch 64 --window $w \
      --method lmdbio --method lmdb-skip --method raw \
      --json docs/bench/memory-5/mem-$db-$w.json target/bench-data/$db
  done
done

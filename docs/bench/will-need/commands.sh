#!/bin/bash
# posix_fadvise(WILLNEED) ahead of the reads (experiment.patch on f096cec,
# built with `cargo build --release -p lmdbio-tools --target-dir
# target/exp`): LMDBIO_WILLNEED=none (as shipped), next (each stream advises
# its next run before reading the current one), all (every run of the round
# advised before reading). One binary, the three settings alternating, one
# full cycle each, cold, MPICH. Not kept. Run from the repository root.
set -eu
for i in 1 2; do for point in 8:1 4:1 2:2; do p=${point%:*}; k=${point#*:}
  for mode in none next all; do
    LMDBIO_WILLNEED=$mode mpiexec.mpich -n $p target/exp/release/lmdbio bench \
      --ranks-per-node $k --method raw --method raw-node --method lmdbio --repeat 6 --cold \
      --json docs/bench/will-need/$mode-p$p-k$k-$i.json target/bench-data/image-7700 >/dev/null
  done; done; done

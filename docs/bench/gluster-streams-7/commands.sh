#!/bin/bash
# GlusterFS at P = 8, one rank per node: the default (two read streams per
# machine, so one per reader here) against two streams per reader, in
# alternating invocations (g-s1, g-s2, g-s1b, g-s2b), 4 repetitions each,
# at 0ebab19 plus the review fix of the refused-direct-read path (which
# the default never takes). Run from the repository root, as root.
set -eu
db=target/bench-data/image-7700
for run in s1 s2 s1b s2b; do
  args="--batch 64 --cold --repeat 4"
  case $run in s2*) args="$args --read-streams 2" ;; esac
  POINTS="8:1" REPEAT=4 METHODS="raw raw-node lmdbio" BENCH_ARGS="$args" \
    scripts/gluster-bench.sh "$db" "docs/bench/gluster-streams-7/g-$run"
done

#!/usr/bin/env bash
# Run from the repository root.
# P = 2, two ranks per node (one reader), ninth round. run.sh runs each named
# variant of lmdbio's flags in turn, one invocation each (raw, raw-node,
# lmdbio x 6, cold), for ROUNDS rounds, and prints one line per invocation.
# Variants: read streams, direct reads with 8 streams of 1 MiB, a reader per
# rank, 8 MiB coalescing.
docs/bench/p2k2-9/run.sh docs/bench/p2k2-9/variants 2 2 2 default "" s1 "--read-streams 1" \
  d8 "--direct-io always --read-streams 8 --coalesce 1048576" \
  r2 "--readers-per-node 2" c8 "--coalesce 8388608"
# the default against direct reads, five more pairs
docs/bench/p2k2-9/run.sh docs/bench/p2k2-9/direct-pairs 2 2 5 default "" d8 "--direct-io always --read-streams 8 --coalesce 1048576"

#!/bin/bash
# One agreement for every run of steps already in on every node, instead of
# one per step: the code of the commit that added this directory (new)
# against 5a951a8 (old; built with `cargo build --release -p lmdbio-tools
# --target-dir target/old` from a worktree of that commit). Three
# alternating pairs per point, then three more at the two one-rank-per-node
# points where the first three differed most. Run from the repository root.
set -eu
POINTS="8:1 4:1 2:2 8:2 2:1" PAIRS="1 2 3" scripts/bench-ab.sh docs/bench/step-run \
  target/old/release/lmdbio target/release/lmdbio
POINTS="2:1 8:1" PAIRS="4 5 6" scripts/bench-ab.sh docs/bench/step-run \
  target/old/release/lmdbio target/release/lmdbio
# Three more pairs at P = 2 one per node, where the first two pairs differed.
POINTS="2:1" PAIRS="7 8 9" scripts/bench-ab.sh docs/bench/step-run \
  target/old/release/lmdbio target/release/lmdbio

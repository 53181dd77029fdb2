#!/bin/bash
# Steps served as soon as their own bytes are in, rounds without a ramp,
# two read streams per machine shared among its readers, and shorter polite
# waits in MPI: 0ebab19 (new) against 3414d08 (old: the sixth round's code
# plus the bench's cpu_s_per_node; built with `cargo build --release -p
# lmdbio-tools --target-dir target/old` from a worktree of that commit).
# Three alternating pairs per point. Run from the repository root.
set -eu
POINTS="8:1 4:1 2:2 8:2 2:1" PAIRS="1 2 3" scripts/bench-ab.sh docs/bench/step-ready \
  target/old/release/lmdbio target/release/lmdbio

#!/bin/bash
# The epoch limit (the bench asks the engine for exactly --epochs epochs, so
# each rank's last batch no longer reads records of the next epoch that the
# bench threw away), together with rounds that shrink toward a known end
# (taken out again after docs/bench/ramp-down), at 1b4a011 (new) against
# e69a5aa (old, built with `cargo build --release -p lmdbio-tools
# --target-dir target/old` from a worktree of that commit). Run from the
# repository root.
set -eu
POINTS="8:1 4:1 2:2 8:2 2:1" scripts/bench-ab.sh docs/bench/epoch-limit \
  target/old/release/lmdbio target/release/lmdbio

#!/bin/bash
# Rounds that shrink again toward a known end (new: 1b4a011) against the
# same commit with that one line undone, `.min(left)` for
# `.min(left.div_ceil(2))` in `steps_that_fit` (old, built with `cargo
# build --release -p lmdbio-tools --target-dir target/old` from a
# worktree). Both have the epoch limit. Run from the repository root.
set -eu
POINTS="1:1 2:1 4:1 8:1 2:2" scripts/bench-ab.sh docs/bench/ramp-down \
  target/old/release/lmdbio target/release/lmdbio

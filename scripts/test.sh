#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine (run as root, or with
# sudo available): installs system packages, then format and lint checks,
# every unit and integration test, a bounded fuzz run and a benchmark smoke
# run. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

# Pin MPICH explicitly: with Open MPI also installed, the generic names may
# point at either implementation.
export MPICC=mpicc.mpich MPIEXEC=mpiexec.mpich
# The Caffe plugin (caffe-plugin/) must build and its tests must run here:
# without Caffe's headers the build fails instead of skipping.
export LMDBIO_REQUIRE_CAFFE=1

step() { printf '\n== %s\n' "$*"; }

step "format"
cargo fmt --all -- --check

step "lint"
cargo clippy --workspace --all-targets --locked -q -- -D warnings

step "tests (MPICH)"
cargo test --workspace --locked

step "MPI tests again with Open MPI (built against it in its own target dir)"
MPICC=mpicc.openmpi LMDBIO_MPIEXEC="mpiexec.openmpi --oversubscribe" \
  cargo test --locked --target-dir target/openmpi -p lmdbio-tools --test mpi --test c_abi
MPICC=mpicc.openmpi LMDBIO_MPIEXEC="mpiexec.openmpi --oversubscribe" \
  cargo test --locked --target-dir target/openmpi -p lmdbio-caffe --test caffe
# Open MPI's ROMIO component (not its default OMPIO) crashed in
# MPI_File_iread_at_all; the engine's reads must work through it too.
MPICC=mpicc.openmpi LMDBIO_MPIEXEC="mpiexec.openmpi --oversubscribe --mca io romio321" \
  cargo test --locked --target-dir target/openmpi -p lmdbio-tools --test mpi -- \
  every_record_once_per_epoch read_modes_and_partitions

step "fuzz smoke (bounded)"
LMDBIO_FUZZ_SECONDS="${LMDBIO_FUZZ_SECONDS:-30}" bash scripts/fuzz-smoke.sh

step "benchmark smoke (small data; figures in docs/PERFORMANCE.md come from full runs)"
LMDBIO_BENCH_RECORDS="${LMDBIO_BENCH_RECORDS:-300}" cargo bench -p lmdbio-benches --locked -q

step "all checks passed"

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
shellcheck -x scripts/*.sh

step "docs build without warnings"
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps --locked -q

step "C ABI: include/lmdbio.h against lmdbio::ffi (abi-check)"
cargo test --locked -q -p lmdbio-abi-check

step "lmdbio-core builds and tests with no MPI"
# The core (parser, index, plans, schedules, cursors) must not need an MPI
# toolchain: nothing MPI in its dependency tree, and a build and its unit
# tests with no MPI compiler wrapper or launcher on PATH.
if cargo tree --locked -p lmdbio-core -e normal,build,dev --prefix none | grep -E '^(mpi|mpi-sys) '; then
  echo "lmdbio-core depends on MPI" >&2
  exit 1
fi
nompi_bin=$(mktemp -d)
IFS=: read -r -a path_dirs <<<"$PATH"
for dir in "${path_dirs[@]}"; do
  for exe in "$dir"/*; do
    name=${exe##*/}
    case $name in mpi* | *mpicc* | orte* | ompi*) continue ;; esac
    [ -x "$exe" ] && [ ! -e "$nompi_bin/$name" ] && ln -s "$exe" "$nompi_bin/$name"
  done
done
if PATH=$nompi_bin command -v mpicc mpicc.mpich mpicc.openmpi mpiexec; then
  echo "an MPI tool is still on the no-MPI PATH" >&2
  exit 1
fi
env -u MPICC -u MPIEXEC PATH="$nompi_bin" \
  cargo test --locked --target-dir target/no-mpi -p lmdbio-core
rm -rf "$nompi_bin"

step "tests (MPICH)"
cargo test --workspace --locked

step "MPI tests again with Open MPI (built against it in its own target dir)"
MPICC=mpicc.openmpi LMDBIO_MPIEXEC="mpiexec.openmpi --oversubscribe" \
  cargo test --locked --target-dir target/openmpi -p lmdbio-tools --test mpi --test c_abi
# The header's MPI_Comm is Open MPI's pointer here, MPICH's int above.
MPICC=mpicc.openmpi cargo test --locked -q --target-dir target/openmpi -p lmdbio-abi-check
MPICC=mpicc.openmpi LMDBIO_MPIEXEC="mpiexec.openmpi --oversubscribe" \
  cargo test --locked --target-dir target/openmpi -p lmdbio-caffe --test caffe
# Open MPI's ROMIO component (not its default OMPIO) crashed in
# MPI_File_iread_at_all; the engine's reads must work through it too.
MPICC=mpicc.openmpi LMDBIO_MPIEXEC="mpiexec.openmpi --oversubscribe --mca io romio321" \
  cargo test --locked --target-dir target/openmpi -p lmdbio-tools --test mpi -- \
  every_record_once_per_epoch read_modes_and_partitions

step "install as a user into a prefix, build the C quick start against it (MPICH, Open MPI)"
python3 tests/spack_recipe.py
bash scripts/test-install.sh

step "fuzz smoke (bounded)"
LMDBIO_FUZZ_SECONDS="${LMDBIO_FUZZ_SECONDS:-30}" bash scripts/fuzz-smoke.sh

step "fault smoke (special files, convert, disagreeing and stopped ranks, damaged files)"
cargo build --locked -q -p lmdbio-tools -p lmdbio-testkit --bins
python3 scripts/fault-fuzz.py --smoke --bin target/debug

step "benchmark smoke (small data; figures in docs/PERFORMANCE.md come from full runs)"
LMDBIO_BENCH_RECORDS="${LMDBIO_BENCH_RECORDS:-300}" cargo bench -p lmdbio-benches --locked -q

step "Python package (pytest under mpiexec)"
bash scripts/test-python.sh

step "all checks passed"

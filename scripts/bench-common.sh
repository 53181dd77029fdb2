# shellcheck shell=bash
# Sourced first by the benchmark scripts (bench-*.sh, gluster-bench.sh):
# strict mode, the repository's root as the working directory, and the
# checks and the launcher they share. $0 is the sourcing script.
set -euo pipefail
cd "$(dirname "$0")/.."

# bench_usage N "USAGE" "$@": exits 2 with "usage: $0 USAGE" unless the
# script got N arguments.
bench_usage() {
  local n=$1 usage=$2
  shift 2
  if [ $# -ne "$n" ]; then
    echo "usage: $0 $usage" >&2
    exit 2
  fi
}

# bench_need_db DB: exits 1 unless DB exists.
bench_need_db() {
  if [ ! -e "$1" ]; then
    echo "$0: no database at $1" >&2
    exit 1
  fi
}

# bench_launcher: sets the array `launcher` to $MPIEXEC (default
# mpiexec.mpich) with what Open MPI needs to run as root and with more
# ranks than cores, which it refuses unless told.
bench_launcher() {
  local mpiexec=${MPIEXEC:-mpiexec.mpich}
  launcher=("$mpiexec")
  case "$("$mpiexec" --version 2>&1 | head -n 3)" in
    *"Open MPI"* | *OpenRTE*)
      export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
      launcher+=(--oversubscribe)
      ;;
  esac
}

# bench_prepare [OUTDIR]: what every sweep does before its first run. Sets
# `lmdbio` to $LMDBIO (default target/release/lmdbio, built if missing),
# makes OUTDIR if given, and suspends the kernel's free page reporting for the
# script's life where it can (`page_reporting_state` says what it did; see
# scripts/page-reporting.sh). Interrupts end the script with status 130
# unless the caller sets its own trap afterwards.
bench_prepare() {
  lmdbio=${LMDBIO:-target/release/lmdbio}
  if [ ! -x "$lmdbio" ]; then
    MPICC=${MPICC:-mpicc.mpich} cargo build --release -q -p lmdbio-tools
  fi
  if [ -n "${1:-}" ]; then mkdir -p "$1"; fi
  # shellcheck source=scripts/page-reporting.sh
  . scripts/page-reporting.sh
  suspend_page_reporting
  trap 'exit 130' INT TERM
}

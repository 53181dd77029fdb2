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

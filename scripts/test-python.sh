#!/usr/bin/env bash
# The Python package's tests (python/tests) under real mpiexec: builds
# `pip install ./python` into a virtual environment under target/ and runs
# pytest on 1-4 ranks. Installs what it needs, idempotently: numpy, pytest,
# maturin, py-lmdb and torch from PyPI, and mpi4py built against MPICH
# (about 6 minutes on two cores, so its wheel is kept in
# ~/.cache/lmdbio-wheels and reused). Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

export MPICC="${MPICC:-mpicc.mpich}"
MPIEXEC="${LMDBIO_PY_MPIEXEC:-mpiexec.mpich}"
PYTHON="${PYTHON:-python3}"
VENV="${LMDBIO_PY_VENV:-target/python-venv}"
WHEELS="${LMDBIO_WHEEL_CACHE:-$HOME/.cache/lmdbio-wheels}/$(basename "$MPICC")"

step() { printf '\n== python: %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  step "virtual environment $VENV"
  "$PYTHON" -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
pip() { python -m pip --disable-pip-version-check -q "$@"; }

if ! python -c 'import numpy, pytest, maturin, lmdb, torch' 2>/dev/null; then
  step "numpy, pytest, maturin, py-lmdb, torch (CPU use of the PyPI wheels)"
  pip install numpy pytest maturin lmdb torch
fi

if ! python -c 'from mpi4py import MPI; import sys; sys.exit("MPICH" not in MPI.Get_library_version())' 2>/dev/null; then
  if ! ls "$WHEELS"/mpi4py-*.whl >/dev/null 2>&1; then
    step "building mpi4py against $MPICC (once; cached in $WHEELS)"
    mkdir -p "$WHEELS"
    pip wheel --no-binary mpi4py --no-deps -w "$WHEELS" mpi4py
  fi
  pip install --force-reinstall --no-deps "$WHEELS"/mpi4py-*.whl
fi

step "pip install ./python (dev profile: shares the engine's build with cargo test)"
# The engine crates are optimised in the dev profile too (Cargo.toml);
# figures come from release builds (benches/python-input.sh).
MATURIN_PEP517_ARGS="${MATURIN_PEP517_ARGS:---profile dev}" \
  pip install --no-deps --force-reinstall ./python

LOGS="$PWD/target/python-test-logs"
mkdir -p "$LOGS"
# Every rank runs every test (they are collective); rank 0 reports, the
# others log to $LOGS, shown if the run fails. Each rank has its own pytest
# temporary folder (ranks cleaning one shared folder race).
run() {
  local ranks=$1
  shift
  step "pytest on $ranks rank(s): $*"
  rm -f "$LOGS"/rank*.log
  # The rank's own shell expands PMI_RANK and LOGS (exported), not this one.
  # shellcheck disable=SC2016
  if ! (cd python/tests && LOGS="$LOGS" "$MPIEXEC" -n "$ranks" bash -c '
        if [ "${PMI_RANK:-0}" = 0 ]; then
          exec python -m pytest -p no:cacheprovider -q --basetemp "$LOGS/tmp0" "$@"
        else
          exec python -m pytest -p no:cacheprovider -q --basetemp "$LOGS/tmp${PMI_RANK}" "$@" \
            > "$LOGS/rank${PMI_RANK}.log" 2>&1
        fi' pytest "$@"); then
    for f in "$LOGS"/rank*.log; do
      [ -e "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }
    done
    echo "python tests failed on $ranks rank(s)" >&2
    exit 1
  fi
}

run 1 test_reader.py test_caffe.py test_torch.py test_torchrun.py
run 2 test_reader.py test_torch.py
run 3 test_reader.py
run 4 test_reader.py
step "all python tests passed"

#!/usr/bin/env bash
# Installs every system package lmdbio needs on a Debian 12 machine, as root.
# Idempotent: when everything is present it prints one line and does nothing.
#
# Caffe 1.0 is only packaged up to Debian 11, so the bullseye suite is added
# with an apt pin of 100: nothing is taken from it unless asked for by name
# or with `-t bullseye`.
set -euo pipefail

BOOKWORM_PACKAGES=(
  build-essential pkg-config
  mpich libmpich-dev            # the default MPI (what CI uses)
  openmpi-bin libopenmpi-dev    # the second MPI the engine must work with
  libclang-dev clang            # bindgen
  shellcheck                    # scripts/test.sh lints scripts/*.sh
  liblmdb-dev lmdb-utils        # the writer and the oracle (mdb_dump, mdb_stat)
  libhdf5-dev                   # lmdbio convert --hdf5
  cmake                         # the installed CMake package's test (test-install.sh)
  python3 python3-venv python3-dev   # the Python package (scripts/test-python.sh)
)
# Caffe and the dev packages its headers need, all from bullseye so the
# protobuf headers match the generated caffe.pb.h.
BULLSEYE_PACKAGES=(
  caffe libcaffe-dev
  libprotobuf-dev protobuf-compiler libgoogle-glog-dev libgflags-dev
  libboost-dev libboost-system-dev libboost-thread-dev libopenblas-dev
  # OpenCV piecemeal: the libopencv-dev metapackage drags in bullseye's
  # libhdf5-dev, which conflicts with bookworm's (needed by convert --hdf5).
  libopencv-core-dev libopencv-imgproc-dev libopencv-imgcodecs-dev
)

log() { [ -n "${LMDBIO_SETUP_QUIET:-}" ] || echo "setup: $*"; }

missing_packages() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
  done
}

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi

configure_bullseye() {
  local sources=/etc/apt/sources.list.d/lmdbio-bullseye.sources
  local pin=/etc/apt/preferences.d/lmdbio-bullseye
  if [ ! -f "$sources" ]; then
    log "adding the Debian 11 (bullseye) suite for Caffe, pinned at priority 100"
    $SUDO tee "$sources" >/dev/null <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bullseye
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  fi
  if [ ! -f "$pin" ]; then
    $SUDO tee "$pin" >/dev/null <<'EOF'
Package: *
Pin: release n=bullseye
Pin-Priority: 100
EOF
  fi
}

configure_bullseye

mapfile -t missing_main < <(missing_packages "${BOOKWORM_PACKAGES[@]}")
mapfile -t missing_old < <(missing_packages "${BULLSEYE_PACKAGES[@]}")

if [ ${#missing_main[@]} -eq 0 ] && [ ${#missing_old[@]} -eq 0 ]; then
  log "system packages present"
else
  export DEBIAN_FRONTEND=noninteractive
  apt_opts=(-y -qq -o Dpkg::Use-Pty=0 --no-install-recommends)
  log "installing: ${missing_main[*]} ${missing_old[*]}"
  $SUDO apt-get update -qq >/dev/null
  if [ ${#missing_main[@]} -gt 0 ]; then
    $SUDO apt-get install "${apt_opts[@]}" "${missing_main[@]}" >/dev/null
  fi
  if [ ${#missing_old[@]} -gt 0 ]; then
    $SUDO apt-get install "${apt_opts[@]}" -t bullseye "${missing_old[@]}" >/dev/null
  fi
fi

# Both MPIs are installed; the default (`mpicc`, `mpiexec`) is whatever the
# alternatives system picked. Our scripts call the `.mpich` names explicitly,
# but make the generic names agree so hand-typed commands do too.
if command -v update-alternatives >/dev/null; then
  for alt in mpi mpirun; do
    target=$(update-alternatives --list "$alt" 2>/dev/null | grep -m1 mpich || true)
    if [ -n "$target" ] && [ "$(readlink -f "/etc/alternatives/$alt")" != "$(readlink -f "$target")" ]; then
      $SUDO update-alternatives --quiet --set "$alt" "$target" || true
    fi
  done
fi

# Rust tools the test suite uses; the toolchain itself comes with the machine.
if ! command -v cargo >/dev/null; then
  echo "setup: cargo is not on PATH; install a Rust toolchain (rustup) first" >&2
  exit 1
fi

#!/usr/bin/env bash
# Builds and installs lmdbio as an unprivileged user (nobody) into a
# temporary prefix, once against MPICH and once against Open MPI, and then,
# with only the installed tree: makes a sample database with the installed
# `lmdbio`, compiles the C quick start (share/lmdbio/examples/read_epochs.c)
# with pkg-config and with a CMake project using find_package(lmdbio),
# runs both on 3 ranks and checks that every record came twice (two
# epochs), checks the SONAME, uninstalls and checks nothing is left.
#
# Run as root (scripts/test.sh does): the user gets the repository and the
# Rust toolchain through bind mounts in a private mount namespace, so
# neither needs to be readable where it lives (/root is not). Each MPI's
# release build is kept in target/release-install-<mpi> for the next run.
#
# usage: scripts/test-install.sh [mpich|openmpi]...   (default: both)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUN_AS=${LMDBIO_INSTALL_USER:-nobody}

# --- the user's part: everything below runs as $RUN_AS ------------------------

# expect_each_record_twice OUTPUT RECORDS: OUTPUT is read_epochs' output on
# 3 ranks; every record must come once in epoch 0 and once in epoch 1.
expect_each_record_twice() {
  local out=$1 records=$2
  awk -v n="$records" '
    $1 == "rank" && $3 == "epoch" && $5 == "record" {
      sub(":", "", $6); seen[$4 " " $6]++; ranks[$2] = 1; lines++; next
    }
    { print "unexpected line: " $0; bad = 1 }
    END {
      for (e = 0; e < 2; e++) for (r = 0; r < n; r++)
        if (seen[e " " r] != 1) { print "epoch " e " record " r ": " seen[e " " r] + 0 " times"; bad = 1 }
      if (lines != 2 * n) { print lines " lines for " n " records"; bad = 1 }
      if (length(ranks) != 3) { print "records from " length(ranks) " ranks, not 3"; bad = 1 }
      exit bad
    }' "$out"
}

inner() {
  local mpi=$1 src=$2 work=$3
  local mpicc mpiexec
  case "$mpi" in
    mpich) mpicc=mpicc.mpich mpiexec="mpiexec.mpich" ;;
    openmpi) mpicc=mpicc.openmpi mpiexec="mpiexec.openmpi --oversubscribe" ;;
  esac
  local prefix=$work/prefix-$mpi scratch=$work/scratch-$mpi
  echo "-- $mpi: install as $(id -un) into $prefix"
  local t0=$SECONDS
  MPICC=$mpicc bash "$src/scripts/install.sh" --prefix "$prefix" \
    --target-dir "$src/target/release-install-$mpi" >"$work/install-$mpi.log" 2>&1 ||
    { tail -n 40 "$work/install-$mpi.log"; echo "install as $(id -un) failed"; exit 1; }
  echo "   build + install: $((SECONDS - t0)) s"

  # From here on only the installed tree (and the system's MPI and tools).
  mkdir -p "$scratch"
  cd "$scratch"
  export PATH="$prefix/bin:$PATH" PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
  lmdbio --help >/dev/null
  lmdbio sample-images --help | grep -q '^Usage: lmdbio sample-images'
  lmdbio sample-images images 3 20 16 png >/dev/null
  lmdbio convert -q --folders images train_lmdb >/dev/null
  local records
  records=$(lmdbio inspect --json train_lmdb | sed -n 's/.*"entries": *\([0-9]*\).*/\1/p')
  [ "$records" = 60 ] || { echo "the sample database has ${records:-no} entries, not 60"; exit 1; }

  local lib=$prefix/lib/liblmdbio.so.0.1.0
  readelf -d "$lib" | grep -q 'Library soname: \[liblmdbio.so.0\]' ||
    { readelf -d "$lib"; echo "no SONAME liblmdbio.so.0"; exit 1; }
  [ "$(readlink "$prefix/lib/liblmdbio.so.0")" = liblmdbio.so.0.1.0 ]
  [ "$(readlink "$prefix/lib/liblmdbio.so")" = liblmdbio.so.0 ]
  local want_module=mpich
  [ "$mpi" = openmpi ] && want_module=ompi-c
  grep -qx "Requires: $want_module" "$prefix/lib/pkgconfig/lmdbio.pc" ||
    { cat "$prefix/lib/pkgconfig/lmdbio.pc"; echo "lmdbio.pc does not require $want_module"; exit 1; }
  if [ -f /usr/include/caffe/caffe.hpp ]; then
    [ -f "$prefix/lib/libcaffe_lmdbio.so" ] || { echo "Caffe is here but its plugin was not installed"; exit 1; }
  fi
  grep -q '^\.SH "LMDBIO SAMPLE-IMAGES"' "$prefix/share/man/man1/lmdbio.1"

  # pkg-config: the compile line of the README's C quick start.
  local example=$prefix/share/lmdbio/examples/read_epochs.c
  # shellcheck disable=SC2046
  cc -std=c11 -Wall -Wextra -Werror "$example" $(pkg-config --cflags --libs lmdbio) -o read_epochs
  readelf -d read_epochs | grep -q 'NEEDED.*\[liblmdbio.so.0\]'
  # shellcheck disable=SC2086
  LD_LIBRARY_PATH="$prefix/lib" timeout -k 5 120 $mpiexec -n 3 ./read_epochs train_lmdb >pc.out
  expect_each_record_twice pc.out "$records"

  # CMake: find_package(lmdbio REQUIRED) and lmdbio::lmdbio, as in the README.
  mkdir cmake-project
  cp "$example" cmake-project/
  cp "$work/CMakeLists.readme.txt" cmake-project/CMakeLists.txt
  cmake -S cmake-project -B cmake-build -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >cmake.log 2>&1 || { cat cmake.log; exit 1; }
  cmake --build cmake-build >>cmake.log 2>&1 || { cat cmake.log; exit 1; }
  # No LD_LIBRARY_PATH: CMake's run path names the installed library.
  # shellcheck disable=SC2086
  timeout -k 5 120 $mpiexec -n 3 cmake-build/read_epochs train_lmdb >cmake.out
  expect_each_record_twice cmake.out "$records"

  cd "$work"
  bash "$src/scripts/install.sh" --prefix "$prefix" --uninstall >/dev/null
  local left
  left=$(find "$prefix" -mindepth 1)
  [ -z "$left" ] || { echo "left after uninstall:"; echo "$left"; exit 1; }
  rm -rf "$scratch"
  echo "   $mpi: installed, compiled with pkg-config and CMake, ran on 3 ranks, uninstalled ($((SECONDS - t0)) s)"
}

if [ "${1:-}" = --inner ]; then
  shift
  mpi=$1 src=$2 work=$3
  inner "$mpi" "$src" "$work"
  exit 0
fi

# --- root's part: a private view of the repository and the toolchain ----------

[ "$(id -u)" -eq 0 ] || { echo "test-install.sh: run as root (it switches to $RUN_AS)" >&2; exit 1; }
mpis=("$@")
[ ${#mpis[@]} -gt 0 ] || mpis=(mpich openmpi)
command -v cmake >/dev/null || { echo "test-install.sh: cmake is missing (scripts/setup.sh installs it)" >&2; exit 1; }

# The README's C quick start is examples/read_epochs.c, and its CMake
# snippet is the project built below.
readme_block() { # LANG: the first ```LANG block after "## C quick start"
  awk -v lang="$1" '
    /^## C quick start/ { in_section = 1; next }
    in_section && /^## / { exit }
    in_section && $0 == "```" lang { copying = 1; next }
    copying && /^```/ { exit }
    copying { print }' "$ROOT/README.md"
}
if ! diff -u "$ROOT/examples/read_epochs.c" <(readme_block c); then
  echo "test-install.sh: the README's C quick start differs from examples/read_epochs.c" >&2
  exit 1
fi
readme_cmake=$(readme_block cmake)
grep -q 'find_package(lmdbio REQUIRED)' <<<"$readme_cmake" ||
  { echo "test-install.sh: no CMake snippet with find_package(lmdbio REQUIRED) in the README" >&2; exit 1; }

uid=$(id -u "$RUN_AS")
gid=$(id -g "$RUN_AS")
toolchain=$(rustc --print sysroot)
# The user's home: its cargo home keeps the crates between runs, seeded
# from root's (the suite has downloaded them all by now).
home=$ROOT/target/install-home
mkdir -p "$home/.cargo"
root_registry=${CARGO_HOME:-$HOME/.cargo}/registry
if [ ! -d "$home/.cargo/registry" ] && [ -d "$root_registry" ]; then
  mkdir -p "$home/.cargo/registry"
  cp -a "$root_registry/index" "$root_registry/cache" "$home/.cargo/registry/"
fi
for mpi in "${mpis[@]}"; do
  mkdir -p "$ROOT/target/release-install-$mpi"
  chown -R "$uid:$gid" "$ROOT/target/release-install-$mpi"
done
chown -R "$uid:$gid" "$home"

# The user sees the repository, the toolchain and a scratch directory at
# fixed paths (mount points private to each run): cargo's fingerprints hold
# the paths of the sources and of its home, and the kept release builds are
# reused only if these stay the same from run to run.
view=/tmp/lmdbio-install-view
mkdir -p "$view/src" "$view/toolchain" "$view/work"
chmod 755 "$view" "$view/src" "$view/toolchain" "$view/work"
scratch=$(mktemp -d /tmp/lmdbio-install-test.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
printf '%s\n' "$readme_cmake" >"$scratch/CMakeLists.readme.txt"
chown "$uid:$gid" "$scratch"

for mpi in "${mpis[@]}"; do
  # shellcheck disable=SC2016
  unshare --mount --propagation private bash -c '
    set -e
    mount --bind "$1" "$2/src"
    mount --bind "$3" "$2/toolchain"
    mount --bind "$4" "$2/work"
    shift 4
    exec "$@"' _ "$ROOT" "$view" "$toolchain" "$scratch" \
    setpriv --reuid="$uid" --regid="$gid" --clear-groups \
    env -i PATH="$view/toolchain/bin:/usr/local/bin:/usr/bin:/bin" \
    HOME="$view/src/target/install-home" \
    CARGO_HOME="$view/src/target/install-home/.cargo" \
    TERM=dumb LANG=C.UTF-8 \
    bash "$view/src/scripts/test-install.sh" --inner "$mpi" "$view/src" "$view/work"
done
echo "test-install: ${mpis[*]}: passed"

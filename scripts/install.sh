#!/usr/bin/env bash
# Builds lmdbio in release and installs it under a prefix, as any user (no
# root): the command, the C library (shared, with its SONAME, and static),
# the header, pkg-config and CMake files, a man page, and the Caffe plugin
# where Caffe is found. Every file it installs is listed in
# PREFIX/share/lmdbio/install-manifest.txt; --uninstall removes exactly
# those (and the directories the install made, once empty).
#
# MPI: the one named by $MPICC, else `mpicc` on PATH (Cray: MPICC=cc,
# Intel MPI: MPICC=mpiicc). docs/install.md has the details.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/install.sh --prefix DIR [options]
       scripts/install.sh --prefix DIR --uninstall

  --prefix DIR         install under DIR (bin/, lib/, include/, share/)
  --uninstall          remove what an earlier install into DIR installed
  --target-dir DIR     cargo's target directory (default: target)
  --no-build           install what an earlier build into --target-dir made
  --build-only         build, install nothing
  --with-caffe         build the Caffe plugin; fail without Caffe's headers
  --without-caffe      do not build it (default: build it when Caffe is found)
  --with-python        also `pip install` the Python package (python/)
  -h, --help           this text

environment: MPICC (the MPI compiler wrapper to build against), CARGO
(default: cargo), CAFFE_INCLUDE_DIR (default: /usr/include), PYTHON
(default: python3), and cargo's own (CARGO_HOME, RUSTUP_HOME, ...).
EOF
}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PREFIX='' TARGET_DIR='' UNINSTALL=0 BUILD=1 INSTALL=1 CAFFE=auto PYTHON_PKG=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) PREFIX=${2:?--prefix needs a directory}; shift ;;
    --prefix=*) PREFIX=${1#*=} ;;
    --target-dir) TARGET_DIR=${2:?--target-dir needs a directory}; shift ;;
    --target-dir=*) TARGET_DIR=${1#*=} ;;
    --uninstall) UNINSTALL=1 ;;
    --no-build) BUILD=0 ;;
    --build-only) INSTALL=0 ;;
    --with-caffe) CAFFE=yes ;;
    --without-caffe) CAFFE=no ;;
    --with-python) PYTHON_PKG=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

die() { echo "install.sh: $*" >&2; exit 1; }
log() { echo "install.sh: $*"; }

MANIFEST_REL=share/lmdbio/install-manifest.txt

uninstall() {
  local manifest="$PREFIX/$MANIFEST_REL" line
  [ -f "$manifest" ] || die "no $manifest: nothing installed there by this script"
  local -a dirs=()
  while IFS= read -r line; do
    case "$line" in
      */) dirs+=("$line") ;;
      *) rm -f -- "${PREFIX:?}/$line" ;;
    esac
  done <"$manifest"
  # Directories the install made, deepest (listed last) first, when empty.
  local i
  for ((i = ${#dirs[@]} - 1; i >= 0; i--)); do
    rmdir -- "$PREFIX/${dirs[i]%/}" 2>/dev/null || true
  done
  log "removed what $manifest listed"
}

if [ "$UNINSTALL" = 1 ]; then
  [ -n "$PREFIX" ] || die "--uninstall needs --prefix"
  PREFIX=$(cd "$PREFIX" && pwd)
  uninstall
  exit 0
fi
[ -n "$PREFIX" ] || [ "$INSTALL" = 0 ] || { usage >&2; exit 2; }

# --- what to build with -------------------------------------------------------

# The repository's .cargo/config.toml names Debian's mpicc.mpich only when
# MPICC is unset; elsewhere the MPI on PATH is the one to use.
if [ -z "${MPICC:-}" ]; then
  MPICC=$(command -v mpicc || command -v mpicc.mpich || true)
  [ -n "$MPICC" ] || die "no MPI: set MPICC to your MPI's C compiler wrapper (mpicc, cc on Cray, mpiicc for Intel MPI)"
fi
MPICC_PATH=$(command -v "$MPICC" || true)
[ -n "$MPICC_PATH" ] || die "MPICC=$MPICC is not a command"
export MPICC
CARGO=${CARGO:-cargo}
TARGET_DIR=${TARGET_DIR:-$ROOT/target}
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR=$PWD/$TARGET_DIR ;; esac
OUT=$TARGET_DIR/release
# lmdb-rkv links the system liblmdb through this alias (else its own copy).
export PKG_CONFIG_PATH="$ROOT/build/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -n1)
[ -n "$VERSION" ] || die "no version in $ROOT/Cargo.toml"
MAJOR=${VERSION%%.*}

caffe_found() {
  local inc=${CAFFE_INCLUDE_DIR:-/usr/include}
  [ -f "$inc/caffe/caffe.hpp" ] && [ -f /usr/include/opencv4/opencv2/core/core.hpp ]
}
case "$CAFFE" in
  auto) if caffe_found; then CAFFE=yes; else CAFFE=no; fi ;;
  yes) caffe_found || die "--with-caffe: Caffe's headers are missing (libcaffe-dev; or set CAFFE_INCLUDE_DIR)" ;;
esac

# --- build ----------------------------------------------------------------------

if [ "$BUILD" = 1 ]; then
  packages=(-p lmdbio -p lmdbio-tools)
  if [ "$CAFFE" = yes ]; then
    packages+=(-p lmdbio-caffe)
    export LMDBIO_REQUIRE_CAFFE=1
  fi
  log "building in release against $MPICC_PATH into $TARGET_DIR"
  (cd "$ROOT" && "$CARGO" build --release --locked --target-dir "$TARGET_DIR" \
    "${packages[@]}" --lib --bin lmdbio)
fi
[ "$INSTALL" = 1 ] || exit 0

for f in lmdbio liblmdbio.so liblmdbio.a; do
  [ -f "$OUT/$f" ] || die "$OUT/$f is missing: build first (without --no-build)"
done
if ! readelf -d "$OUT/liblmdbio.so" | grep -q "Library soname: \[liblmdbio.so.$MAJOR\]"; then
  die "$OUT/liblmdbio.so has no SONAME liblmdbio.so.$MAJOR (lib/build.rs sets it)"
fi
if [ "$CAFFE" = yes ] && ! readelf -d "$OUT/libcaffe_lmdbio.so" 2>/dev/null | grep -q 'libcaffe\.so'; then
  die "$OUT/libcaffe_lmdbio.so holds no Caffe layer: build with --with-caffe"
fi

# --- install --------------------------------------------------------------------

mkdir -p "$PREFIX"
PREFIX=$(cd "$PREFIX" && pwd)
if [ -f "$PREFIX/$MANIFEST_REL" ]; then
  log "replacing an earlier install in $PREFIX"
  uninstall
fi
MANIFEST=()

# make_dir REL: makes PREFIX/REL and its parents, listing the ones it made.
make_dir() {
  local rel=$1
  [ -d "$PREFIX/$rel" ] && return
  case "$rel" in */*) make_dir "${rel%/*}" ;; esac
  mkdir "$PREFIX/$rel"
  MANIFEST+=("$rel/")
}
# put MODE SRC REL: installs the file SRC as PREFIX/REL.
put() {
  make_dir "$(dirname "$3")"
  install -m "$1" "$2" "$PREFIX/$3"
  MANIFEST+=("$3")
}
# put_text MODE REL: installs standard input as PREFIX/REL. Feed it by a
# redirection, never a pipe: in a pipe it runs in a subshell, and the
# manifest would lose the file.
put_text() {
  make_dir "$(dirname "$2")"
  cat >"$PREFIX/$2"
  chmod "$1" "$PREFIX/$2"
  MANIFEST+=("$2")
}
link() { # link TARGET REL
  ln -sfn "$1" "$PREFIX/$2"
  MANIFEST+=("$2")
}

LIBFILE=liblmdbio.so.$VERSION
put 755 "$OUT/lmdbio" bin/lmdbio
put 755 "$OUT/liblmdbio.so" "lib/$LIBFILE"
link "$LIBFILE" "lib/liblmdbio.so.$MAJOR"
link "liblmdbio.so.$MAJOR" lib/liblmdbio.so
put 644 "$OUT/liblmdbio.a" lib/liblmdbio.a
put 644 "$ROOT/include/lmdbio.h" include/lmdbio.h
if [ "$CAFFE" = yes ]; then
  put 755 "$OUT/libcaffe_lmdbio.so" lib/libcaffe_lmdbio.so
fi
put 644 "$ROOT/examples/read_epochs.c" share/lmdbio/examples/read_epochs.c

# pkg-config: the MPI it was built against, by its own module where it has
# one (Requires), else its flags from the wrapper.
show=$("$MPICC" -show 2>/dev/null || true)
mpi_module=
case "$show" in
  *mpich*) mpi_module=mpich ;;
  *openmpi*) mpi_module=ompi-c ;;
esac
# rsmpi itself takes these before the wrapper: a module of the user's
# choice, or cray-mpich's own.
if [ -n "${MPI_PKG_CONFIG:-}" ]; then
  mpi_module=$MPI_PKG_CONFIG
  # A file, not a module name: its flags go in lmdbio.pc itself.
  case "$mpi_module" in
    *.pc) show="$(pkg-config --cflags --libs "$mpi_module")" mpi_module= ;;
  esac
elif [ -n "${CRAY_MPICH_DIR:-}" ]; then
  mpi_module=mpich
  export PKG_CONFIG_PATH="$CRAY_MPICH_DIR/lib/pkgconfig:$PKG_CONFIG_PATH"
fi
if [ -n "$mpi_module" ] && ! pkg-config --exists "$mpi_module" 2>/dev/null; then
  mpi_module=
fi
# The module must be the wrapper's installation (not, say, the system's
# MPICH beside a module's): it names the wrapper's include directory.
# shellcheck disable=SC2086 # the wrapper's words
wrapper_include=$(printf '%s\n' $show | sed -n 's/^-I//p' | head -n1)
if [ -n "$mpi_module" ] && [ -n "$wrapper_include" ] &&
  ! pkg-config --cflags-only-I "$mpi_module" | tr ' ' '\n' | grep -qxF -- "-I$wrapper_include"; then
  mpi_module=
fi
mpi_cflags='' mpi_libs=''
for word in $show; do
  case "$word" in
    -I*) mpi_cflags+=" $word" ;;
    -L*|-l*|-Wl,*) mpi_libs+=" $word" ;;
  esac
done
# shellcheck disable=SC2016 # ${prefix} and the like are pkg-config's
pc_text() {
  echo "prefix=$PREFIX"
  echo 'exec_prefix=${prefix}'
  echo 'libdir=${prefix}/lib'
  echo 'includedir=${prefix}/include'
  echo
  echo "# Built against the MPI of $MPICC_PATH; link programs against the same one."
  echo 'Name: lmdbio'
  echo 'Description: Scalable reads of stock LMDB training data for MPI jobs'
  echo "Version: $VERSION"
  if [ -n "$mpi_module" ]; then
    echo "Requires: $mpi_module"
    echo 'Cflags: -I${includedir}'
    echo 'Libs: -L${libdir} -llmdbio'
    echo 'Libs.private: -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc'
  else
    echo "Cflags: -I\${includedir}$mpi_cflags"
    echo 'Libs: -L${libdir} -llmdbio'
    echo "Libs.private:$mpi_libs -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
  fi
}
put_text 644 lib/pkgconfig/lmdbio.pc < <(pc_text)

# CMake: lmdbio::lmdbio, with MPI found through the same wrapper.
put_text 644 lib/cmake/lmdbio/lmdbioConfig.cmake <<EOF
# lmdbio $VERSION: find_package(lmdbio REQUIRED) gives the imported target
# lmdbio::lmdbio (the shared C library, its header and the MPI it was built
# against: $MPICC_PATH, unless MPI_C_COMPILER says otherwise).
include(CMakeFindDependencyMacro)
if(NOT DEFINED MPI_C_COMPILER)
  set(MPI_C_COMPILER "$MPICC_PATH")
endif()
find_dependency(MPI COMPONENTS C)
get_filename_component(_lmdbio_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET lmdbio::lmdbio)
  add_library(lmdbio::lmdbio SHARED IMPORTED)
  set_target_properties(lmdbio::lmdbio PROPERTIES
    IMPORTED_LOCATION "\${_lmdbio_prefix}/lib/$LIBFILE"
    IMPORTED_SONAME "liblmdbio.so.$MAJOR"
    INTERFACE_INCLUDE_DIRECTORIES "\${_lmdbio_prefix}/include"
    INTERFACE_LINK_LIBRARIES MPI::MPI_C)
endif()
if(NOT TARGET lmdbio::lmdbio_static)
  add_library(lmdbio::lmdbio_static STATIC IMPORTED)
  set_target_properties(lmdbio::lmdbio_static PROPERTIES
    IMPORTED_LOCATION "\${_lmdbio_prefix}/lib/liblmdbio.a"
    INTERFACE_INCLUDE_DIRECTORIES "\${_lmdbio_prefix}/include"
    INTERFACE_LINK_LIBRARIES "MPI::MPI_C;gcc_s;util;rt;pthread;m;dl")
endif()
unset(_lmdbio_prefix)
EOF
put_text 644 lib/cmake/lmdbio/lmdbioConfigVersion.cmake <<EOF
# Compatible: the same major version (before 1.0 the same minor too), at
# least the version asked for.
set(PACKAGE_VERSION "$VERSION")
if(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
elseif(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(NOT "$MAJOR" STREQUAL "0" AND NOT PACKAGE_FIND_VERSION_MAJOR STREQUAL "$MAJOR")
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif("$MAJOR" STREQUAL "0" AND NOT PACKAGE_FIND_VERSION VERSION_GREATER_EQUAL "${VERSION%.*}")
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
if(NOT CMAKE_SIZEOF_VOID_P STREQUAL "8")
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
endif()
EOF

# The man page: each subcommand's --help, as the command prints it.
roff() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }
man_text() {
  echo ".TH LMDBIO 1 \"\" \"lmdbio $VERSION\" \"User Commands\""
  echo '.SH NAME'
  echo 'lmdbio \- scalable reads of LMDB training data for MPI jobs'
  echo '.SH SYNOPSIS'
  echo '.B lmdbio'
  echo '.I COMMAND'
  printf '%s\n' '[\fIOPTIONS\fR]'
  echo '.SH DESCRIPTION'
  echo '.nf'
  "$OUT/lmdbio" --help | roff
  echo '.fi'
  for cmd in $("$OUT/lmdbio" --help | sed -n '/^Commands:/,/^$/s/^  \([a-z-]*\) .*/\1/p' | grep -vx help); do
    echo ".SH \"LMDBIO ${cmd^^}\""
    echo '.nf'
    "$OUT/lmdbio" "$cmd" --help | roff
    echo '.fi'
  done
  echo '.SH SEE ALSO'
  echo 'The C library: include/lmdbio.h; pkg-config --cflags --libs lmdbio.'
}
put_text 644 share/man/man1/lmdbio.1 < <(man_text)

if [ "$PYTHON_PKG" = 1 ]; then
  [ -f "$ROOT/python/pyproject.toml" ] || die "--with-python: no python/pyproject.toml in $ROOT"
  before=$(cd "$PREFIX" && find . -mindepth 1 | sort)
  "${PYTHON:-python3}" -m pip install --no-deps --prefix "$PREFIX" "$ROOT/python"
  after=$(cd "$PREFIX" && find . -mindepth 1 | sort)
  # What pip made, directories marked as the manifest marks them.
  while IFS= read -r rel; do
    rel=${rel#./}
    if [ -d "$PREFIX/$rel" ] && [ ! -L "$PREFIX/$rel" ]; then MANIFEST+=("$rel/"); else MANIFEST+=("$rel"); fi
  done < <(comm -13 <(echo "$before") <(echo "$after"))
fi

make_dir "$(dirname "$MANIFEST_REL")"
MANIFEST+=("$MANIFEST_REL")
printf '%s\n' "${MANIFEST[@]}" >"$PREFIX/$MANIFEST_REL"
log "installed lmdbio $VERSION into $PREFIX (built against $MPICC_PATH; Caffe plugin: $CAFFE)"
log "uninstall: scripts/install.sh --prefix $PREFIX --uninstall"

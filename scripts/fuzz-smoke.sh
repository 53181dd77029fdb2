#!/usr/bin/env bash
# Fuzz smoke test for lmdbio's parsers.
#
# Builds the cargo-fuzz targets in core/fuzz (they need lmdbio-core only,
# no MPI), seeds their corpora with small real LMDB data files written by
# liblmdb's mdb_load (so the fuzzer starts from valid structure: meta
# pages, branch and leaf pages, overflow runs, named databases), runs each
# target for a bounded time and exits non-zero if any target found a crash,
# a timeout or an out-of-memory input.
#
# Environment:
#   LMDBIO_FUZZ_SECONDS  seconds per target (default 60)
#   LMDBIO_FUZZ_TARGETS  targets to run (default "parse_db parse_page")
#
# Only a stable toolchain is installed; cargo-fuzz needs nightly flags
# (-Zsanitizer=address), which RUSTC_BOOTSTRAP=1 unlocks.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CORE=$ROOT/core
FUZZ=$CORE/fuzz
CORPUS=$FUZZ/corpus
ARTIFACTS=$FUZZ/artifacts
SECONDS_PER_TARGET=${LMDBIO_FUZZ_SECONDS:-60}
read -r -a TARGETS <<<"${LMDBIO_FUZZ_TARGETS:-parse_db parse_page}"
export RUSTC_BOOTSTRAP=1

log() { echo "fuzz-smoke: $*"; }
die() { echo "fuzz-smoke: $*" >&2; exit 2; }

case $SECONDS_PER_TARGET in
  '' | *[!0-9]*) die "LMDBIO_FUZZ_SECONDS must be a whole number of seconds" ;;
esac

if ! cargo fuzz --version >/dev/null 2>&1; then
  log "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
command -v mdb_load >/dev/null ||
  die "mdb_load not found: install lmdb-utils (scripts/setup.sh does)"

# --- Seed corpus -----------------------------------------------------------

# Hex of stdin, as mdb_dump's bytevalue format wants it.
hex() { od -An -v -tx1 | tr -d ' \n'; }

# One record of a dump: key and value lines, each led by a space.
record() {
  printf ' %s\n %s\n' "$(printf '%s' "$1" | hex)" "$(printf '%s' "$2" | hex)"
}

# A `len`-byte value made of one repeated character.
filled() { head -c "$1" /dev/zero | tr '\0' "$2"; }

# Dump header for MAIN or a named database. The mapsize line keeps
# mdb_load from hitting MDB_MAP_FULL with its 1 MiB default.
header() {
  local name=${1:-} flags=${2:-}
  echo VERSION=3
  echo format=bytevalue
  [ -z "$name" ] || echo "database=$name"
  echo type=btree
  echo mapsize=16777216
  echo maxreaders=126
  [ -z "$flags" ] || echo "$flags"
  echo HEADER=END
}

dump_tiny() {
  header
  record apple red
  record banana yellow
  record cherry ""
  echo DATA=END
}

# Enough records for a branch page over several leaves (depth 2).
dump_two_levels() {
  local i
  header
  for i in $(seq 0 149); do
    record "$(printf '%08d_class%d/img_%d.JPEG' "$i" $((i % 10)) "$i")" "value-$i-$(filled 20 x)"
  done
  echo DATA=END
}

# Values that go out of line into overflow runs of one and three pages.
dump_overflow() {
  header
  record a small
  record b "$(filled 3000 b)"
  record c "$(filled 9000 c)"
  record d tail
  echo DATA=END
}

# MAIN with a plain record and two named databases, one reverse-keyed.
dump_named() {
  local i
  header
  record aaa-plain "in main"
  echo DATA=END
  header train
  for i in $(seq 0 39); do
    record "$(printf '%08d' "$i")" "$(filled $((i * 97 % 3000)) t)"
  done
  echo DATA=END
  header rev reversekey=1
  for i in $(seq 0 19); do
    record "k$i-$((i * 7 % 13))" "v$i"
  done
  echo DATA=END
}

seed_corpus() {
  local work name pages p
  work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" RETURN
  mkdir -p "$CORPUS/parse_db" "$CORPUS/parse_page"
  for name in tiny two_levels overflow named; do
    "dump_$name" | mdb_load -n "$work/$name.mdb"
    cp "$work/$name.mdb" "$CORPUS/parse_db/seed-$name.mdb"
    # Every page of the seeds, one file each, for the page parser.
    pages=$(($(stat -c %s "$work/$name.mdb") / 4096))
    for ((p = 0; p < pages; p++)); do
      dd if="$work/$name.mdb" of="$CORPUS/parse_page/seed-$name-page$p" \
        bs=4096 skip="$p" count=1 status=none
    done
  done
  log "seeded $(find "$CORPUS/parse_db" -type f | wc -l) data files and $(find "$CORPUS/parse_page" -type f | wc -l) pages in $CORPUS"
}

seed_corpus

# --- Build and run ---------------------------------------------------------

cd "$CORE"
log "building fuzz targets"
cargo fuzz build --fuzz-dir "$FUZZ" 2>&1 | tail -n 3

failed=()
for target in "${TARGETS[@]}"; do
  mkdir -p "$ARTIFACTS/$target"
  before=$(find "$ARTIFACTS/$target" -type f | wc -l)
  log "running $target for ${SECONDS_PER_TARGET}s"
  # -timeout: an input taking over 10 s counts as a hang (a crash).
  set +e
  cargo fuzz run --fuzz-dir "$FUZZ" "$target" "$CORPUS/$target" -- \
    -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 >"$ARTIFACTS/$target.log" 2>&1
  status=$?
  set -e
  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)|panicked|^SUMMARY|Test unit written|deadly signal|^==[0-9]+==ERROR' \
    "$ARTIFACTS/$target.log" || true
  after=$(find "$ARTIFACTS/$target" -type f | wc -l)
  if [ "$status" -ne 0 ] || [ "$after" -gt "$before" ]; then
    log "$target: FAILED (exit $status, $((after - before)) new artifacts in $ARTIFACTS/$target; log in $ARTIFACTS/$target.log)"
    failed+=("$target")
  else
    log "$target: no crash in ${SECONDS_PER_TARGET}s"
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  log "crashes found in: ${failed[*]}"
  log "replay one with: cd core && RUSTC_BOOTSTRAP=1 cargo fuzz run TARGET ARTIFACT"
  exit 1
fi
log "all targets clean"

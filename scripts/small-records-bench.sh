#!/usr/bin/env bash
# The small-record sweep (docs/PERFORMANCE.md, "Small records"): one run
# that writes the database's saved index, then scripts/bench-sweep.sh with
# both ways of opening in every invocation: `lmdbio` loads the saved index,
# `lmdbio-scan` scans the tree as a job's first open does.
#
#   scripts/small-records-bench.sh DB OUTDIR
#   SWEEP=scripts/small-records-bench.sh scripts/gluster-bench.sh DB OUTDIR
#
# Databases: scripts/make-small-db.sh. Environment as for bench-sweep.sh;
# here POINTS defaults to "1:1 2:1 4:1 4:2", METHODS to "raw raw-node
# lmdb-skip lmdbio-scan lmdbio" and REPEAT to 3.
# shellcheck source=scripts/bench-common.sh
. "$(dirname "$0")/bench-common.sh"
bench_usage 2 "DB OUTDIR" "$@"
db=$1
out=$2
bench_need_db "$db"
bench_prepare "$out"
bench_launcher
# The saved index goes beside the database where it is writable, else in
# the cache directory; either way every later `lmdbio` run loads it.
"${launcher[@]}" -n 1 "$lmdbio" bench --method lmdbio "$db" >/dev/null
POINTS=${POINTS:-1:1 2:1 4:1 4:2} \
  METHODS=${METHODS:-raw raw-node lmdb-skip lmdbio-scan lmdbio} \
  REPEAT=${REPEAT:-3} LMDBIO=$lmdbio \
  bash scripts/bench-sweep.sh "$db" "$out"

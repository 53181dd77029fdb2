#!/usr/bin/env bash
# Runs `lmdbio bench` over a grid of rank counts and ranks per node, every
# method in one invocation per grid point (so each row's ratios compare
# figures measured minutes apart, not sessions apart), then writes a
# Markdown table and an SVG plot of throughput against ranks.
#
#   scripts/bench-sweep.sh DB OUTDIR
#
# Environment (all optional):
#   RANKS      rank counts             (default "1 2 4 8")
#   PER_NODE   ranks per virtual node  (default "1 2"; skipped when > P)
#   POINTS     explicit P:K pairs instead of RANKS x PER_NODE, e.g. "1:1 2:1 4:2 8:2"
#   METHODS    bench methods           (default "raw raw-node lmdb-skip lmdb-walk lmdbio lmdbio-shuffled")
#   BENCH_ARGS extra arguments to `lmdbio bench` (default "--batch 64 --cold --drop-all-caches --repeat $REPEAT")
#   REPEAT     runs of each method per grid point, medians reported (default 3)
#   MPIEXEC    launcher                (default mpiexec.mpich)
#   LMDBIO     the lmdbio binary       (default target/release/lmdbio, built if missing)
#   TITLE      plot title
#   PAGE_REPORTING=keep  leave the kernel's free page reporting on (it is
#              suspended while the sweep runs where possible: see
#              scripts/page-reporting.sh)
# shellcheck source=scripts/bench-common.sh
. "$(dirname "$0")/bench-common.sh"
bench_usage 2 "DB OUTDIR" "$@"
db=$1
out=$2
ranks=${RANKS:-1 2 4 8}
per_node=${PER_NODE:-1 2}
methods=${METHODS:-raw raw-node lmdb-skip lmdb-walk lmdbio lmdbio-shuffled}
bench_args=${BENCH_ARGS:---batch 64 --cold --drop-all-caches --repeat ${REPEAT:-3}}

bench_need_db "$db"
bench_prepare "$out"

method_args=()
for m in $methods; do method_args+=(--method "$m"); done

bench_launcher

{
  echo "command: $0 $*"
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo +changes)"
  echo "launcher: ${launcher[*]}"
  echo "bench args: $bench_args ${method_args[*]}"
  echo "database: $db ($(du -sh "$db" | cut -f1))"
  echo "file system: $(findmnt -n -o FSTYPE,SOURCE -T "$db" 2>/dev/null || echo unknown)"
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "$page_reporting_state"
} > "$out/sweep.txt"

points=${POINTS:-}
if [ -z "$points" ]; then
  for p in $ranks; do
    for k in $per_node; do
      if [ "$k" -le "$p" ]; then points="$points $p:$k"; fi
    done
  done
fi

for point in $points; do
  p=${point%:*}
  k=${point#*:}
  echo "== P=$p, $k rank(s) per node"
  # shellcheck disable=SC2086 # BENCH_ARGS is a list of words
  "${launcher[@]}" -n "$p" "$lmdbio" bench $bench_args --progress \
    --ranks-per-node "$k" "${method_args[@]}" \
    --json "$out/runs-p$p-k$k.json" "$db" | tee "$out/table-p$p-k$k.txt"
done

python3 scripts/plot-bench.py --title "${TITLE:-lmdbio bench: $(basename "$db")}" "$out"
echo "== wrote $out/summary.md and $out/throughput.svg"

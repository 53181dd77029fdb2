#!/usr/bin/env bash
# The node stage benchmark of issue 33, as a SWEEP for scripts/gluster-bench.sh:
# per point two invocations, cold, EPOCHS epochs each: one with a node stage
# (raw, raw-stage, lmdb-skip, lmdbio-global) and one without (raw, lmdbio).
# `--stage` applies to every engine method of an invocation, hence two; `raw`
# is in both so each invocation's ratios stand on their own.
#
#   SWEEP=scripts/stage-bench.sh scripts/gluster-bench.sh DB OUTDIR
#
# Environment: POINTS (P:K pairs, default "2:1 2:2 4:1 4:2"), EPOCHS (3),
# STAGE_DIR (/dev/shm/lmdbio-stage-bench), MPIEXEC, LMDBIO as for
# scripts/bench-sweep.sh.
# shellcheck source=scripts/bench-common.sh
. "$(dirname "$0")/bench-common.sh"
bench_usage 2 "DB OUTDIR" "$@"
db=$1
out=$2
lmdbio=${LMDBIO:-target/release/lmdbio}
stage=${STAGE_DIR:-/dev/shm/lmdbio-stage-bench}
common=(--batch 64 --cold --drop-all-caches --repeat 1 --epochs "${EPOCHS:-3}")
bench_need_db "$db"
mkdir -p "$out"
bench_launcher
{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "file system: $(findmnt -n -o FSTYPE,SOURCE -T "$db" 2>/dev/null || echo unknown)"
} > "$out/stage-bench.txt"
for point in ${POINTS:-2:1 2:2 4:1 4:2}; do
  p=${point%:*}
  k=${point#*:}
  echo "== P=$p, $k rank(s) per node, load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$out/stage-bench.txt"
  "${launcher[@]}" -n "$p" "$lmdbio" bench "${common[@]}" --ranks-per-node "$k" \
    --stage "$stage" --method raw --method raw-stage --method lmdb-skip \
    --method lmdbio-global --json "$out/stage-p$p-k$k.json" "$db" | tee -a "$out/stage-bench.txt"
  rm -rf "$stage"
  "${launcher[@]}" -n "$p" "$lmdbio" bench "${common[@]}" --ranks-per-node "$k" \
    --method raw --method lmdbio --json "$out/nostage-p$p-k$k.json" "$db" | tee -a "$out/stage-bench.txt"
done

#!/usr/bin/env bash
# The node stage benchmark of issue 33: per point (P ranks, K per node), cold,
# EPOCHS epochs, every invocation with a stage (`--stage`; `lmdbio-nostage`
# and the raw methods ignore it):
#
#   full     raw, raw-stage, lmdb-skip, lmdbio-global (staged, replicated)
#            and lmdbio-nostage, in one invocation;
#   part     with N = P/K > 1 nodes, a budget of 1/N of the file per node
#            (partitioned): raw and lmdbio-global;
#   epoch1   EPOCH1_REPEAT (3) alternating runs of one epoch, lmdbio with
#            the stage against lmdbio-nostage: the writer's cost alone.
#
# Then scripts/plot-stage.py writes OUTDIR/summary.md and OUTDIR/epochs.svg.
#
#   scripts/stage-bench.sh DB OUTDIR                       (local disk)
#   SWEEP=scripts/stage-bench.sh scripts/gluster-bench.sh DB OUTDIR
#
# Environment: POINTS (P:K pairs, default "2:1 2:2 4:1 4:2 8:1 8:2"; P = 8 on
# two cores is oversubscribed), EPOCHS (3), PARTS (runs: "full part epoch1"),
# STAGE_DIR (/var/tmp/lmdbio-stage-bench: a local disk), MPIEXEC, LMDBIO as
# for scripts/bench-sweep.sh. Root: --drop-all-caches.
# shellcheck source=scripts/bench-common.sh
. "$(dirname "$0")/bench-common.sh"
bench_usage 2 "DB OUTDIR" "$@"
db=$1
out=$2
stage=${STAGE_DIR:-/var/tmp/lmdbio-stage-bench}
parts=${PARTS:-full part epoch1}
common=(--batch 64 --cold --drop-all-caches --stage "$stage")
bench_need_db "$db"
bench_prepare "$out"
trap 'rm -rf "$stage"; exit 130' INT TERM
bench_launcher
data=$db
[ -d "$db" ] && data=$db/data.mdb
file_len=$(stat -c %s "$data")
block=$((4 << 20))
{
  echo "command: ${SWEEP:+SWEEP=$SWEEP scripts/gluster-bench.sh } $0 $*"
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo +changes)"
  echo "database: $db ($file_len bytes)"
  echo "file system: $(findmnt -n -o FSTYPE,SOURCE -T "$db" 2>/dev/null || echo unknown)"
  echo "stage: $stage on $(findmnt -n -o FSTYPE,SOURCE -T "$(dirname "$stage")" 2>/dev/null || echo unknown)"
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "$page_reporting_state"
} > "$out/stage-bench.txt"

# run NAME P K ARGS...: one invocation, its JSON in OUTDIR/NAME.json and the
# load average before and after it in OUTDIR/NAME.load.
run() {
  local name=$1 p=$2 k=$3
  shift 3
  local before
  before=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "== $name: P=$p, $k rank(s) per node, load $before" | tee -a "$out/stage-bench.txt"
  rm -rf "$stage"
  "${launcher[@]}" -n "$p" "$lmdbio" bench "${common[@]}" --ranks-per-node "$k" "$@" \
    --json "$out/$name.json" "$db" | tee -a "$out/stage-bench.txt"
  rm -rf "$stage"
  printf '%s\n%s\n' "$before" "$(cut -d' ' -f1-3 /proc/loadavg)" > "$out/$name.load"
}

for point in ${POINTS:-2:1 2:2 4:1 4:2 8:1 8:2}; do
  p=${point%:*}
  k=${point#*:}
  nodes=$((p / k))
  for part in $parts; do
    case $part in
      full)
        run "full-p$p-k$k" "$p" "$k" --repeat 1 --epochs "${EPOCHS:-3}" \
          --method raw --method raw-stage --method lmdb-skip \
          --method lmdbio-global --method lmdbio-nostage
        ;;
      part)
        # Partitioned placement needs more than one node. The budget: a
        # node's share of the stage's 4 MiB blocks, so every block is held.
        [ "$nodes" -gt 1 ] || continue
        share=$((((file_len + block - 1) / block + nodes - 1) / nodes))
        run "part-p$p-k$k" "$p" "$k" --repeat 1 --epochs "${EPOCHS:-3}" \
          --stage-budget $((share * block)) \
          --method raw --method lmdbio-global
        ;;
      epoch1)
        run "epoch1-p$p-k$k" "$p" "$k" --repeat "${EPOCH1_REPEAT:-3}" --epochs 1 \
          --method lmdbio --method lmdbio-nostage
        ;;
      *)
        echo "$0: unknown part $part" >&2
        exit 2
        ;;
    esac
  done
done
python3 scripts/plot-stage.py "$out"
echo "== wrote $out/summary.md and $out/epochs.svg"

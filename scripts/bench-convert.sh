#!/usr/bin/env bash
# lmdbio convert against Caffe's convert_imageset on the same image folder
# and the same list, in one run (issue 7). Each tool runs REPS times,
# interleaved; the best wall time counts. Both write a real LMDB on the
# same disk with liblmdb's default durable commits, starting after `sync`.
#
# usage: scripts/bench-convert.sh [IMAGES] [SIDE] [jpg|png] [REPS] [WORKDIR]
# OUT_DIR=/dev/shm puts the databases on tmpfs (no disk writes: the
# conversion work alone); by default they go to WORKDIR (a real disk).
# shellcheck source=scripts/bench-common.sh
. "$(dirname "$0")/bench-common.sh"

images=${1:-5000}
side=${2:-256}
format=${3:-jpg}
reps=${4:-2}
work=${5:-$(mktemp -d /tmp/lmdbio-bench-convert.XXXXXX)}
out="${OUT_DIR:-$work}/lmdbio-bench-convert-out"
classes=10
per_class=$(( (images + classes - 1) / classes ))

cargo build --release --locked -q -p lmdbio-tools -p lmdbio-testkit --bins
bin=target/release
params="$classes $per_class $side $format"
if [ "$(cat "$work/images/.params" 2>/dev/null)" != "$params" ]; then
    rm -rf "$work/images"
    "$bin/lmdbio-sample-images" "$work/images" "$classes" "$per_class" "$side" "$format"
    echo "$params" > "$work/images/.params"
fi
list="$work/images/list.txt"
count=$(wc -l < "$list")
# Read every source once so no tool pays for a cold page cache alone.
cat "$work"/images/*/* > /dev/null

# run NAME COMMAND...: prints "NAME wall_s cpu_s"
run() {
    local name=$1; shift
    rm -rf "$out"
    sync
    local TIMEFORMAT='%R %U %S'
    { time "$@" > /dev/null 2> "$work/err"; } 2> "$work/cpu" ||
        { cat "$work/err" >&2; exit 1; }
    awk -v name="$name" '{ print name, $1, $2 + $3 }' "$work/cpu"
}

results="$work/results"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
: > "$results"
for _ in $(seq "$reps"); do
    run convert_imageset env GLOG_minloglevel=1 convert_imageset \
        "$work/images/" "$list" "$out" >> "$results"
    for threads in 1 2; do
        run "lmdbio-t$threads" "$bin/lmdbio" convert -q --threads "$threads" \
            "$work/images" "$list" "$out" >> "$results"
    done
done
rm -rf "$out"

echo
echo "$count ${side}x${side} $format images, $(nproc) cores, best of $reps (wall), $(date -u +%FT%TZ)"
echo "output on $(df --output=fstype "${OUT_DIR:-$work}" | tail -n 1); load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v n="$count" '
    { if (!($1 in best) || $2 < best[$1]) { best[$1] = $2; cpu[$1] = $3 } }
    END {
        base = best["convert_imageset"]
        printf "%-18s %8s %8s %10s %9s\n", "tool", "wall s", "cpu s", "images/s", "speed-up"
        split("convert_imageset lmdbio-t1 lmdbio-t2", order, " ")
        for (i = 1; i <= 3; i++) {
            t = order[i]
            printf "%-18s %8.2f %8.2f %10.0f %8.2fx\n", t, best[t], cpu[t], n / best[t], base / best[t]
        }
    }' "$results"
echo "raw runs: $results"

#!/usr/bin/env bash
# Opening from a saved index against scanning, paired in one invocation:
# `lmdbio bench --method lmdbio --method lmdbio-scan`, cold, alternating,
# after one run that saves the index; prints each pair's open and first
# batch times and their ratio (docs/design/saved-index.md).
#
#   scripts/saved-index-bench.sh DB P K [REPEAT]
# shellcheck source=scripts/bench-common.sh
. "$(dirname "$0")/bench-common.sh"
if [ $# -lt 3 ]; then
  echo "usage: $0 DB P K [REPEAT]" >&2
  exit 2
fi
db=$1 p=$2 k=$3 repeat=${4:-7}
bench_need_db "$db"
bench_prepare ""
bench_launcher
echo "$page_reporting_state"
json=$(mktemp)
trap 'rm -f "$json"' EXIT
"${launcher[@]}" -n "$p" "$lmdbio" bench --ranks-per-node "$k" --method lmdbio "$db" >/dev/null
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"${launcher[@]}" -n "$p" "$lmdbio" bench --ranks-per-node "$k" --cold --repeat "$repeat" \
  --method lmdbio --method lmdbio-scan --json "$json" "$db" >/dev/null
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$json" <<'PY'
import json, statistics, sys
runs = json.load(open(sys.argv[1]))["all_runs"]
saved = [r for r in runs if r["method"] == "lmdbio"]
scan = [r for r in runs if r["method"] == "lmdbio-scan"]
assert all(r["index_loaded_nodes"] == r["nodes"] for r in saved), "a node scanned"
ratios = [a["open_s"] / b["open_s"] for a, b in zip(saved, scan)]
ms = lambda rs, k: [1e3 * r[k] for r in rs]
for name, rs in (("saved", saved), ("scan", scan)):
    o, f = ms(rs, "open_s"), ms(rs, "time_to_first_batch_s")
    print(f"{name:5}: open median {statistics.median(o):.1f} ms ({min(o):.1f}-{max(o):.1f}),"
          f" first batch {statistics.median(f):.1f} ms, MB/s {statistics.median(r['mb_per_s'] for r in rs):.0f}")
print("open saved/scan per pair: " + " ".join(f"{r:.3f}" for r in ratios)
      + f"; median {statistics.median(ratios):.3f}")
PY

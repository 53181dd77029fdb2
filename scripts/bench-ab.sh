#!/usr/bin/env bash
# Two lmdbio builds side by side: alternating invocations (old, then new,
# at each point in turn), each one full cycle of the balanced order (raw,
# raw-node, lmdbio x 6), cold, default settings; then OUTDIR/summary.md with
# lmdbio / limit per invocation. On this shared machine the storage limit
# moves by up to twofold between invocations, so only pairs run minutes
# apart say anything.
#
#   scripts/bench-ab.sh OUTDIR OLD_LMDBIO NEW_LMDBIO
#
# Environment (all optional):
#   POINTS   "P:K" pairs: ranks and ranks per virtual node (default "8:1 4:1 2:2 8:2 2:1")
#   PAIRS    invocation pairs per point, as labels           (default "1 2")
#   DB       the database   (default target/bench-data/image-7700)
#   MPIEXEC  launcher       (default mpiexec.mpich)
#   SUMMARY_ONLY=1  only (re)write the summary from OUTDIR's JSON
# shellcheck source=scripts/bench-common.sh
. "$(dirname "$0")/bench-common.sh"
bench_usage 3 "OUTDIR OLD_LMDBIO NEW_LMDBIO" "$@"
out=$1
declare -A bin=([old]=$2 [new]=$3)
db=${DB:-target/bench-data/image-7700}
bench_launcher
mkdir -p "$out"

if [ -z "${SUMMARY_ONLY:-}" ]; then
  for i in ${PAIRS:-1 2}; do
    for point in ${POINTS:-8:1 4:1 2:2 8:2 2:1}; do
      p=${point%:*} k=${point#*:}
      for build in old new; do
        "${launcher[@]}" -n "$p" "${bin[$build]}" bench --ranks-per-node "$k" \
          --method raw --method raw-node --method lmdbio --repeat 6 --cold \
          --json "$out/$build-p$p-k$k-$i.json" "$db" >/dev/null
      done
    done
  done
fi

python3 - "$out" <<'PY'
import glob, json, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(f"{out}/*-p*-k*-*.json")):
    build, p, k, i = path.split("/")[-1][:-5].split("-")
    doc = json.load(open(path))
    run = {r["method"]: r for r in doc["runs"]}
    l = run["lmdbio"]
    # Runs before the bench reported its limit: the better raw median.
    limit = doc.get("storage_limit_mb_per_s") or max(run["raw"]["mb_per_s"], run["raw-node"]["mb_per_s"])
    rows.setdefault((int(p[1:]), int(k[1:]), build), []).append(
        (l["mb_per_s"] / limit, l["mb_per_s"], limit,
         l["bytes_read_per_node"] / 2**20, l["rounds"]))
cols = [(0, "{:.2f}"), (1, "{:.0f}"), (2, "{:.0f}"), (3, "{:.1f}"), (4, "{}")]
with open(f"{out}/summary.md", "w") as f:
    f.write("| P | ranks/node | build | lmdbio / limit, each invocation | lmdbio MB/s | limit MB/s | read per node (MiB) | rounds |\n")
    f.write("|---|---|---|---|---|---|---|---|\n")
    for (p, k, b), v in sorted(rows.items(), key=lambda x: (x[0][0], x[0][1], x[0][2] != "old")):
        cells = [", ".join(fmt.format(r[j]) for r in v) for j, fmt in cols]
        f.write(f"| {p} | {k} | {b} | " + " | ".join(cells) + " |\n")
print(open(f"{out}/summary.md").read())
PY

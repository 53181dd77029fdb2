#!/bin/bash
# The default 256 MiB window (rounds of up to half of it, 128 MiB) against a
# 128 MiB one (rounds of up to 64 MiB), in alternating invocations, each one
# full cycle of raw, raw-node and lmdbio (6 repetitions), cold. Run from the
# repository root.
set -eu
out=docs/bench/window-size
db=target/bench-data/image-7700
for pk in "2 2" "4 1" "8 2"; do set -- $pk
  for i in 1 2; do
    for w in 268435456 134217728; do
      mpiexec.mpich -n $1 target/release/lmdbio bench --cold --ranks-per-node $2 \
        --method raw --method raw-node --method lmdbio --repeat 6 --window $w \
        --json $out/p$1-k$2-window$((w >> 20))-$i.json $db >/dev/null
    done
  done
done
python3 - $out <<'PY'
import glob, json, os, sys
out = sys.argv[1]
lines = ["| P | ranks/node | invocation | window (MiB) | raw | raw-node | lmdbio | lmdbio / limit | rounds | peak RSS/rank (MiB) |",
         "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
for path in sorted(glob.glob(f"{out}/p*.json")):
    p, k, w, i = os.path.basename(path)[:-5].split("-")
    runs = {r["method"]: r for r in json.load(open(path))["runs"]}
    l = runs["lmdbio"]
    lines.append(f"| {p[1:]} | {k[1:]} | {i} | {w[6:]} | {runs['raw']['mb_per_s']:.0f} | {runs['raw-node']['mb_per_s']:.0f} | "
                 f"{l['mb_per_s']:.0f} | {l['ratio_to_raw']:.2f} | {l['rounds']} | {l['peak_rss_mib_per_rank']:.0f} |")
open(f"{out}/pairs.md", "w").write("\n".join(lines) + "\n")
PY

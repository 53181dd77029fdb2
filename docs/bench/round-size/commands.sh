#!/bin/bash
# Rounds of up to 16 steps (the default) against rounds of up to 2, in
# alternating invocations, each one full cycle of raw, raw-node, lmdbio and
# lmdbio-shuffled (4 repetitions), cold. Run from the repository root.
set -eu
out=docs/bench/round-size
db=target/bench-data/image-7700
for pk in "2 2" "4 1" "8 2"; do set -- $pk
  for i in 1 2; do
    for pf in 16 2; do
      mpiexec.mpich -n $1 target/release/lmdbio bench --cold --ranks-per-node $2 \
        --method raw --method raw-node --method lmdbio --method lmdbio-shuffled \
        --repeat 4 --prefetch $pf --json $out/p$1-k$2-prefetch$pf-$i.json $db >/dev/null
    done
  done
done
python3 - $out <<'PY'
import glob, json, os, sys
out = sys.argv[1]
lines = ["| P | ranks/node | invocation | prefetch | raw | raw-node | lmdbio | lmdbio / limit | rounds | lmdbio-shuffled | shuffled / limit |",
         "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
for path in sorted(glob.glob(f"{out}/p*.json")):
    p, k, pf, i = os.path.basename(path)[:-5].split("-")
    runs = {r["method"]: r for r in json.load(open(path))["runs"]}
    l, sh = runs["lmdbio"], runs["lmdbio-shuffled"]
    lines.append(f"| {p[1:]} | {k[1:]} | {i} | {pf[8:]} | {runs['raw']['mb_per_s']:.0f} | {runs['raw-node']['mb_per_s']:.0f} | "
                 f"{l['mb_per_s']:.0f} | {l['ratio_to_raw']:.2f} | {l['rounds']} | {sh['mb_per_s']:.0f} | {sh['ratio_to_raw']:.2f} |")
open(f"{out}/pairs.md", "w").write("\n".join(lines) + "\n")
PY

#!/bin/bash
# One read stream per reader against two (the default so far) where
# several readers share one machine (virtual nodes of one rank each):
# alternating invocations, one full cycle of the balanced order each (raw,
# raw-node, lmdbio x 6), cold, MPICH, window with huge-page advice (the
# working tree after f6a8c06). Run from the repository root.
set -eu
out=docs/bench/streams-per-node
db=target/bench-data/image-7700
methods="--method raw --method raw-node --method lmdbio --repeat 6 --cold"
for i in 1 2; do
  for P in 2 4 8; do
    for s in 1 2; do
      mpiexec.mpich -n $P target/release/lmdbio bench --ranks-per-node 1 --read-streams $s \
        $methods --json $out/streams$s-p$P-k1-$i.json $db >/dev/null
    done
  done
done
python3 - $out <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(f"{out}/streams*-p*-k*-*.json")):
    s, p, k, i = path.split("/")[-1][:-5].split("-")
    doc = json.load(open(path))
    run = {r["method"]: r for r in doc["runs"]}
    l = run["lmdbio"]
    rows.setdefault((int(p[1:]), s), []).append(
        (l["ratio_to_raw"], l["mb_per_s"], max(run["raw"]["mb_per_s"], run["raw-node"]["mb_per_s"])))
with open(f"{out}/summary.md", "w") as f:
    f.write("| P | ranks/node | read streams per reader | lmdbio / limit, each invocation | lmdbio MB/s | limit MB/s |\n")
    f.write("|---|---|---|---|---|---|\n")
    for (p, s), v in sorted(rows.items()):
        f.write(f"| {p} | 1 | {s[7:]} | " + ", ".join(f"{r[0]:.2f}" for r in v) + " | "
                + ", ".join(f"{r[1]:.0f}" for r in v) + " | "
                + ", ".join(f"{r[2]:.0f}" for r in v) + " |\n")
print(open(f"{out}/summary.md").read())
PY

#!/bin/bash
# Direct reads (--direct-io auto: around the page cache when it holds less
# than half of a round, which with --cold is every round) against reads
# through the cache (never, the default), with the window kept mapped
# (fifth round, commit 92aac9f): alternating invocations at every local
# point, one full cycle of the balanced order each (raw, raw-node, lmdbio
# x 6), cold, MPICH. Run from the repository root; summary.md at the end.
set -eu
out=docs/bench/direct-io-5
db=target/bench-data/image-7700
methods="--method raw --method raw-node --method lmdbio --repeat 6 --cold"
for i in 1 2; do
  for point in "1 1" "2 1" "2 2" "4 1" "4 2" "8 1" "8 2"; do
    set -- $point
    for d in never auto; do
      mpiexec.mpich -n $1 target/release/lmdbio bench --ranks-per-node $2 --direct-io $d \
        $methods --json $out/$d-p$1-k$2-$i.json $db >/dev/null
    done
  done
done
python3 - $out <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(f"{out}/*-p*-k*-*.json")):
    d, p, k, i = path.split("/")[-1][:-5].split("-")
    doc = json.load(open(path))
    run = {r["method"]: r for r in doc["runs"]}
    l = run["lmdbio"]
    rows.setdefault((int(p[1:]), int(k[1:]), d), []).append(
        (l["ratio_to_raw"], l["mb_per_s"], max(run["raw"]["mb_per_s"], run["raw-node"]["mb_per_s"]),
         l["direct_read_requests_per_node"]))
with open(f"{out}/summary.md", "w") as f:
    f.write("| P | ranks/node | --direct-io | lmdbio / limit, each invocation | lmdbio MB/s | limit MB/s | direct requests/node |\n")
    f.write("|---|---|---|---|---|---|---|\n")
    for (p, k, d), v in sorted(rows.items(), key=lambda x: (x[0][0], x[0][1], x[0][2] != "never")):
        f.write(f"| {p} | {k} | {d} | " + ", ".join(f"{r[0]:.2f}" for r in v) + " | "
                + ", ".join(f"{r[1]:.0f}" for r in v) + " | "
                + ", ".join(f"{r[2]:.0f}" for r in v) + " | "
                + ", ".join(f"{r[3]:.0f}" for r in v) + " |\n")
print(open(f"{out}/summary.md").read())
PY

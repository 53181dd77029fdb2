#!/bin/bash
# The window's memory kept mapped between engines and mapped ahead by
# prepare (new) against the round before, where every open faulted the
# window in and every close gave it back (old: main at 2a81af1, built with
# `cargo build --release -p lmdbio-tools --target-dir target/old` from a
# worktree of that commit). Alternating invocations, one full cycle of the
# balanced order each (raw, raw-node, lmdbio x 6), cold, default settings,
# MPICH. Run from the repository root; summary.md is written at the end.
set -eu
out=docs/bench/kept-window
db=target/bench-data/image-7700
methods="--method raw --method raw-node --method lmdbio --repeat 6 --cold"
for i in 1 2 3; do
  for point in "2 2" "4 1" "8 2"; do
    set -- $point
    for build in old new; do
      bin=target/release/lmdbio
      [ $build = old ] && bin=target/old/release/lmdbio
      mpiexec.mpich -n $1 $bin bench --ranks-per-node $2 $methods \
        --json $out/$build-p$1-k$2-$i.json $db >/dev/null
    done
  done
done
python3 - $out <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(f"{out}/*-p*-k*-*.json")):
    name = path.split("/")[-1][:-5]
    build, p, k, i = name.split("-")
    doc = json.load(open(path))
    run = {r["method"]: r for r in doc["runs"]}
    l = run["lmdbio"]
    rows.setdefault((p, k, build), []).append(
        (l["ratio_to_raw"], l["mb_per_s"], max(run["raw"]["mb_per_s"], run["raw-node"]["mb_per_s"]),
         l["minor_faults_per_rank"]))
with open(f"{out}/summary.md", "w") as f:
    f.write("| P | ranks/node | build | lmdbio / limit, each invocation | median | lmdbio MB/s (median runs) | limit MB/s | minor faults per rank |\n")
    f.write("|---|---|---|---|---:|---|---|---|\n")
    for (p, k, build), v in sorted(rows.items(), key=lambda x: (int(x[0][0][1:]), x[0][1], x[0][2] != "old")):
        ratios = ", ".join(f"{r[0]:.2f}" for r in v)
        med = statistics.median(r[0] for r in v)
        f.write(f"| {p[1:]} | {k[1:]} | {build} | {ratios} | {med:.2f} | "
                + ", ".join(f"{r[1]:.0f}" for r in v) + " | "
                + ", ".join(f"{r[2]:.0f}" for r in v) + " | "
                + ", ".join(f"{r[3]:.0f}" for r in v) + " |\n")
print(open(f"{out}/summary.md").read())
PY

#!/bin/bash
# Transparent huge pages asked for on the window (new) against the same
# code without the advice (old: f6a8c06, built with `cargo build --release
# -p lmdbio-tools --target-dir target/old` from a worktree of that commit),
# one rank per node, where MPICH's one-rank window is private memory and
# THP (`madvise` here) applies; shared windows on this machine cannot have
# them (shmem_enabled = never). Alternating invocations, one full cycle of
# the balanced order each (raw, raw-node, lmdbio x 6), cold, default
# settings, MPICH. Run from the repository root.
set -eu
out=docs/bench/huge-pages
db=target/bench-data/image-7700
methods="--method raw --method raw-node --method lmdbio --repeat 6 --cold"
for i in 1 2; do
  for P in 1 4 8; do
    for build in old new; do
      bin=target/release/lmdbio
      [ $build = old ] && bin=target/old/release/lmdbio
      mpiexec.mpich -n $P $bin bench --ranks-per-node 1 $methods \
        --json $out/$build-p$P-k1-$i.json $db >/dev/null
    done
  done
done
python3 - $out <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(f"{out}/*-p*-k*-*.json")):
    build, p, k, i = path.split("/")[-1][:-5].split("-")
    doc = json.load(open(path))
    run = {r["method"]: r for r in doc["runs"]}
    l = run["lmdbio"]
    prep = [r["prepare_s"] for r in doc["all_runs"] if r["method"] == "lmdbio" and r["prepare_s"]]
    rows.setdefault((int(p[1:]), k, build), []).append(
        (l["ratio_to_raw"], l["mb_per_s"], max(run["raw"]["mb_per_s"], run["raw-node"]["mb_per_s"]),
         statistics.median(prep)))
with open(f"{out}/summary.md", "w") as f:
    f.write("| P | ranks/node | build | lmdbio / limit, each invocation | lmdbio MB/s | limit MB/s | prepare s (median) |\n")
    f.write("|---|---|---|---|---|---|---|\n")
    for (p, k, build), v in sorted(rows.items(), key=lambda x: (x[0][0], x[0][2] != "old")):
        f.write(f"| {p} | {k[1:]} | {build} | " + ", ".join(f"{r[0]:.2f}" for r in v) + " | "
                + ", ".join(f"{r[1]:.0f}" for r in v) + " | "
                + ", ".join(f"{r[2]:.0f}" for r in v) + " | "
                + ", ".join(f"{r[3]:.2f}" for r in v) + " |\n")
print(open(f"{out}/summary.md").read())
PY

# Then (in a second script run, same pairs) with --no-prepare: the window's memory is mapped inside
# every lmdbio run (the runs of raw and raw-node before it give it back),
# so the cost of making huge pages is in the timed runs.
for i in 1 2; do
  for P in 4 8; do
    for build in old new; do
      bin=target/release/lmdbio
      [ $build = old ] && bin=target/old/release/lmdbio
      mpiexec.mpich -n $P $bin bench --ranks-per-node 1 --no-prepare $methods \
        --json $out/noprep-$build-p$P-k1-$i.json $db >/dev/null
    done
  done
done

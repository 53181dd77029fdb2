#!/bin/bash
# The points that came out under 0.9 of the limit in earlier sweeps, each in
# three invocations of one full cycle of the balanced order (raw, raw-node,
# lmdbio x 6 repetitions), cold, default settings: MPICH with two ranks per
# node at P = 2 and 8, Open MPI with one rank per node at P = 4 and 8
# (target/openmpi: MPICC=mpicc.openmpi cargo build --release
# --target-dir target/openmpi -p lmdbio-tools). Run from the repository
# root; summary.md is written at the end.
set -eu
out=docs/bench/repeated-points
db=target/bench-data/image-7700
methods="--method raw --method raw-node --method lmdbio --repeat 6 --cold"
for i in 1 2 3; do
  for P in 4 8; do
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      mpiexec.openmpi --oversubscribe -n $P target/openmpi/release/lmdbio bench \
      --ranks-per-node 1 $methods --json $out/openmpi-p$P-k1-$i.json $db >/dev/null
  done
done
for i in 1 2 3; do
  for P in 2 8; do
    mpiexec.mpich -n $P target/release/lmdbio bench --ranks-per-node 2 $methods \
      --json $out/mpich-p$P-k2-$i.json $db >/dev/null
  done
done
python3 - $out <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
rows, ratios = [], {}
for path in sorted(glob.glob(f"{out}/*.json")):
    mpi, p, k, i = os.path.basename(path)[:-5].split("-")
    runs = {r["method"]: r for r in json.load(open(path))["runs"]}
    l = runs["lmdbio"]
    ratios.setdefault((mpi, p, k), []).append(l["ratio_to_raw"])
    rows.append(f"| {mpi} | {p[1:]} | {k[1:]} | {i} | {runs['raw']['mb_per_s']:.0f} | {runs['raw-node']['mb_per_s']:.0f} | "
                f"{l['mb_per_s']:.0f} | {l['mb_per_s_min']:.0f}–{l['mb_per_s_max']:.0f} | {l['ratio_to_raw']:.2f} | {l['time_to_first_batch_s']:.3f} |")
head = ["| MPI | P | ranks/node | invocation | raw | raw-node | lmdbio | lmdbio range | lmdbio / limit | first batch (s) |",
        "|---|---|---|---|---:|---:|---:|---|---:|---:|"]
tail = ["", "| MPI | P | ranks/node | lmdbio / limit, each invocation | median |", "|---|---|---|---|---:|"]
for (mpi, p, k), r in sorted(ratios.items()):
    tail.append(f"| {mpi} | {p[1:]} | {k[1:]} | {', '.join(f'{x:.2f}' for x in r)} | {statistics.median(r):.2f} |")
open(f"{out}/summary.md", "w").write("\n".join(head + rows + tail) + "\n")
PY

#!/bin/bash
# Rounds that shrink again toward a known end (new: 1b4a011) against the
# same commit with that one line undone, `.min(left)` for
# `.min(left.div_ceil(2))` in `steps_that_fit` (old, built with `cargo
# build --release -p lmdbio-tools --target-dir target/old` from a worktree).
# Both have the epoch limit.
# Alternating invocations, one full cycle of the balanced order each (raw,
# raw-node, lmdbio x 6), cold, default settings, MPICH. Run from the
# repository root.
set -eu
out=docs/bench/ramp-down
db=target/bench-data/image-7700
methods="--method raw --method raw-node --method lmdbio --repeat 6 --cold"
for i in ${PAIRS:-1 2}; do
  for point in "1 1" "2 1" "4 1" "8 1" "2 2"; do
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
    build, p, k, i = path.split("/")[-1][:-5].split("-")
    doc = json.load(open(path))
    run = {r["method"]: r for r in doc["runs"]}
    l = run["lmdbio"]
    rows.setdefault((int(p[1:]), int(k[1:]), build), []).append(
        (l["ratio_to_raw"], l["mb_per_s"], max(run["raw"]["mb_per_s"], run["raw-node"]["mb_per_s"]),
         l["bytes_read_per_node"] / 2**20, l["rounds"]))
with open(f"{out}/summary.md", "w") as f:
    f.write("| P | ranks/node | build | lmdbio / limit, each invocation | lmdbio MB/s | limit MB/s | read per node (MiB) | rounds |\n")
    f.write("|---|---|---|---|---|---|---|---|\n")
    for (p, k, b), v in sorted(rows.items(), key=lambda x: (x[0][0], x[0][1], x[0][2] != "old")):
        f.write(f"| {p} | {k} | {b} | " + " | ".join(", ".join(fmt.format(r[j]) for r in v)
                for j, fmt in [(0, "{:.2f}"), (1, "{:.0f}"), (2, "{:.0f}"), (3, "{:.1f}"), (4, "{}")]) + " |\n")
print(open(f"{out}/summary.md").read())
PY

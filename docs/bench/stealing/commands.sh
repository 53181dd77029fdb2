#!/bin/bash
# Tried and not kept: read streams that take runs from each other's far
# ends (after: commit 45d18d0, built into target/release) against streams
# that each read a fixed share of the round (before: commit fb14817, built
# into target/before), alternating, three invocations per
# point, each one full cycle of raw, raw-node and lmdbio (6 repetitions),
# cold. Run from the repository root.
set -eu
out=docs/bench/stealing
db=target/bench-data/image-7700
# git worktree add /tmp/before fb14817
# (cd /tmp/before && MPICC=mpicc.mpich CARGO_TARGET_DIR="$OLDPWD/target/before" \
#    cargo build --release -p lmdbio-tools)
for pk in "2 2" "8 2" "4 1"; do set -- $pk
  for i in 1 2 3; do
    for b in before after; do
      bin=target/release/lmdbio
      [ $b = before ] && bin=target/before/release/lmdbio
      mpiexec.mpich -n $1 $bin bench --cold --ranks-per-node $2 --method raw \
        --method raw-node --method lmdbio --repeat 6 \
        --json $out/p$1-k$2-$b-$i.json $db >/dev/null
    done
  done
done
python3 - $out <<'PY'
import glob, json, os, sys
out = sys.argv[1]
lines = ["| P | ranks/node | invocation | streams | raw | raw-node | lmdbio | lmdbio / limit |", "|---|---|---|---|---:|---:|---:|---:|"]
for path in sorted(glob.glob(f"{out}/p*.json")):
    p, k, b, i = os.path.basename(path)[:-5].split("-")
    runs = {r["method"]: r for r in json.load(open(path))["runs"]}
    l = runs["lmdbio"]
    lines.append(f"| {p[1:]} | {k[1:]} | {i} | {'fixed shares' if b == 'before' else 'stealing'} | {runs['raw']['mb_per_s']:.0f} | "
                 f"{runs['raw-node']['mb_per_s']:.0f} | {l['mb_per_s']:.0f} | {l['ratio_to_raw']:.2f} |")
open(f"{out}/pairs.md", "w").write("\n".join(lines) + "\n")
PY

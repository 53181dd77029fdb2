#!/bin/bash
# Alternating invocations, --direct-io auto vs never, same methods; prints lmdbio ratio_to_raw.
cd /work/main
DB=target/bench-data/image-7700
for point in "2 2" "8 2" "4 1" "8 1"; do
  set -- $point; P=$1; K=$2
  for pair in 1 2 3; do
    for d in auto never; do
      out=/tmp/dio/p$P-k$K-$d-$pair.json
      mpiexec.mpich -n $P target/release/lmdbio bench --cold --ranks-per-node $K --method raw --method raw-node --method lmdbio --repeat 3 --direct-io $d --json $out $DB >/dev/null 2>&1
      python3 - "$out" $P $K $d <<'PY'
import json,sys
runs=json.load(open(sys.argv[1]))['runs']
med=[r for r in runs if r.get('repeats',1)>1 or True]
# last rows are medians? pick rows by method with max repeats
best={}
for r in runs:
    m=r['method']
    if m not in best or r.get('repeats',1)>=best[m].get('repeats',1): best[m]=r
l=best['lmdbio']; print(f"P={sys.argv[2]} k={sys.argv[3]} {sys.argv[4]:5} lmdbio {l['mb_per_s']:7.0f} raw {best['raw']['mb_per_s']:7.0f} raw-node {best['raw-node']['mb_per_s']:7.0f} ratio {l['ratio_to_raw']:.2f} direct {l['direct_read_requests_per_node']:.0f}")
PY
    done
  done
done

#!/bin/bash
cd /work/main
DB=target/bench-data/image-7700
for point in "4 1" "2 2"; do
  set -- $point; P=$1; K=$2
  for round in 1 2; do
    for cfg in "never 2 4194304" "always 8 1048576" "always 8 2097152"; do
      set -- $cfg; D=$1; S=$2; C=$3
      out=/tmp/dio/c2-p$P-k$K-$D-$S-$C-$round.json
      mpiexec.mpich -n $P target/release/lmdbio bench --cold --ranks-per-node $K --method raw --method raw-node --method lmdbio --repeat 6 --direct-io $D --read-streams $S --coalesce $C --json $out $DB >/dev/null 2>&1
      python3 - "$out" $P $K $D $S $C <<'PY'
import json,sys
runs={r['method']:r for r in json.load(open(sys.argv[1]))['runs']}
l=runs['lmdbio']; print(f"P={sys.argv[2]} k={sys.argv[3]} {sys.argv[4]:6} s={sys.argv[5]} c={int(sys.argv[6])>>20}M lmdbio {l['mb_per_s']:6.0f} raw {runs['raw']['mb_per_s']:6.0f} raw-node {runs['raw-node']['mb_per_s']:6.0f} ratio {l['ratio_to_raw']:.2f} direct {l['direct_read_requests_per_node']:.0f} first {l['time_to_first_batch_s']:.3f}", flush=True)
PY
    done
  done
done

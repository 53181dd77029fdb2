#!/usr/bin/env bash
# usage: run.sh OUTDIR P K ROUNDS name1 "ENV=.. flags1" ...  (words with = before flags are env)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
out=$1 p=$2 k=$3 rounds=$4; shift 4
mkdir -p "$out"
for i in $(seq 1 "$rounds"); do
  args=("$@")
  for ((j=0; j<${#args[@]}; j+=2)); do
    name=${args[j]} flags=${args[j+1]}
    envs=(); fl=()
    for w in $flags; do if [[ $w == *=* && $w != --* ]]; then envs+=("$w"); else fl+=("$w"); fi; done
    env "${envs[@]}" mpiexec.mpich -n "$p" target/release/lmdbio bench --ranks-per-node "$k" --batch 64 \
      --method raw --method raw-node --method lmdbio --repeat ${REPEAT:-4} --cold "${fl[@]}" \
      --json "$out/$name-p$p-k$k-$i.json" target/bench-data/image-7700 >/dev/null 2>&1
    python3 - "$out/$name-p$p-k$k-$i.json" "$name" <<'PY'
import json,sys
d=json.load(open(sys.argv[1])); r={x['method']:x for x in d['runs']}
l=r['lmdbio']
print(f"{sys.argv[2]:12} lmdbio {l['mb_per_s']:6.0f} limit {d['storage_limit_mb_per_s']:6.0f} ratio {l['ratio_to_raw']:.2f} raw {r['raw']['mb_per_s']:.0f} node {r['raw-node']['mb_per_s']:.0f} cpu {l['cpu_s_per_node']:.2f}/{r['raw']['cpu_s_per_node']:.2f}", flush=True)
PY
  done
done

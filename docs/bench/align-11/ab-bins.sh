#!/usr/bin/env bash
# Alternates builds of lmdbio, one invocation each, on the bench database.
# usage: ab-bins.sh OUTDIR P K ROUNDS name1 "BINARY1 [flags]" name2 "BINARY2 [flags]" ...
# Each invocation runs raw, raw-node and lmdbio, REPEAT (default 4) cold
# cycles; extra bench flags come from FLAGS. Prints one line per invocation.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
out=$1 p=$2 k=$3 rounds=$4; shift 4
mkdir -p "$out"
for i in $(seq 1 "$rounds"); do
  args=("$@")
  for ((j=0; j<${#args[@]}; j+=2)); do
    name=${args[j]}
    read -r -a bin <<<"${args[j+1]}"
    json="$out/$name-p$p-k$k-$i.json"
    # shellcheck disable=SC2086
    mpiexec.mpich -n "$p" "${bin[@]:0:1}" bench --ranks-per-node "$k" --batch 64 \
      --method raw --method raw-node --method lmdbio --repeat "${REPEAT:-4}" --cold ${FLAGS:-} "${bin[@]:1}" \
      --json "$json" "${DB:-target/bench-data/image-7700}" >/dev/null 2>&1
    python3 - "$json" "$name" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); r = {x['method']: x for x in d['runs']}
l = r['lmdbio']
print(f"{sys.argv[2]:8} lmdbio {l['mb_per_s']:6.0f} limit {d['storage_limit_mb_per_s']:6.0f} "
      f"ratio {l['ratio_to_raw']:.2f} raw {r['raw']['mb_per_s']:.0f} node {r['raw-node']['mb_per_s']:.0f} "
      f"cpu {l['cpu_s_per_node']:.2f}/{r['raw']['cpu_s_per_node']:.2f}", flush=True)
PY
  done
done

#!/bin/bash
# Direct reads (around the page cache) against reads through it, this
# directory. Run from the repository root after a release build. Every
# invocation runs raw, raw-node and lmdbio in one full cycle of the balanced
# order (6 repetitions), cold; the engine's settings alternate between
# invocations: through the cache (the default), direct with the default
# two streams of 4 MiB runs, and direct with eight streams of 1 MiB runs
# (more requests in flight, which a direct reader has no readahead for).
set -eu
out=docs/bench/direct-io
db=target/bench-data/image-7700
for pk in "4 1" "2 2" "8 2"; do set -- $pk
  for i in 1 2; do
    for cfg in "never 2 4194304" "always 2 4194304" "always 8 1048576"; do set -- $pk $cfg
      mpiexec.mpich -n $1 target/release/lmdbio bench --cold --ranks-per-node $2 \
        --method raw --method raw-node --method lmdbio --repeat 6 \
        --direct-io $3 --read-streams $4 --coalesce $5 \
        --json $out/p$1-k$2-$3-s$4-c$5-$i.json $db >/dev/null
    done
  done
done
# CPU: lmdbio alone, three runs per invocation, the whole job's user and
# system time as /usr/bin/time sees mpiexec's children.
for pk in "2 2" "8 2"; do set -- $pk
  for i in 1 2; do
    for d in never always; do
      /usr/bin/time -f "P=$1 k=$2 $d: %U s user %S s system %e s wall" -a -o $out/cpu.txt \
        mpiexec.mpich -n $1 target/release/lmdbio bench --cold --ranks-per-node $2 \
        --method lmdbio --repeat 3 --direct-io $d $db >/dev/null
    done
  done
done
python3 - $out <<'PY'
import glob, json, os, sys
out = sys.argv[1]
lines = ["| P | per node | reads | run | lmdbio MB/s | raw MB/s | raw-node MB/s | lmdbio / limit | direct requests per node |",
         "|---|---|---|---|---:|---:|---:|---:|---:|"]
for path in sorted(glob.glob(f"{out}/p*.json")):
    name = os.path.basename(path)[:-5]
    p, k, d, s, c, i = name.split("-")
    runs = {r["method"]: r for r in json.load(open(path))["runs"]}
    l = runs["lmdbio"]
    reads = "cache" if d == "never" else f"direct, {s[1:]} streams x {int(c[1:]) >> 20} MiB"
    lines.append(f"| {p[1:]} | {k[1:]} | {reads} | {i} | {l['mb_per_s']:.0f} | {runs['raw']['mb_per_s']:.0f} | "
                 f"{runs['raw-node']['mb_per_s']:.0f} | {l['ratio_to_raw']:.2f} | {l['direct_read_requests_per_node']:.0f} |")
open(f"{out}/pairs.md", "w").write("\n".join(lines) + "\n")
PY

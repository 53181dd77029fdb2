#!/usr/bin/env bash
# Shuffled against unshuffled reading, cold cache, in the same `lmdbio bench`
# invocation: K alternations of `--method lmdbio --method lmdbio-shuffled`
# per rank count, then the median MB/s of each and their ratio.
#
# usage: benches/shuffle_throughput.sh [DB] [K] [P...] [-- extra bench args]
#   DB defaults to target/bench-data/image-n7700-s256 (7,700 x 196,628-byte
#   Caffe Datums, 1.44 GiB; made with lmdbio-sample-db if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

db=${1:-target/bench-data/image-n7700-s256}
k=${2:-5}
shift $(($# > 2 ? 2 : $#))
ranks=()
while (($#)) && [[ $1 != -- ]]; do ranks+=("$1"); shift; done
(($#)) && shift
((${#ranks[@]})) || ranks=(1 2 4)
mpiexec=${LMDBIO_MPIEXEC:-mpiexec.mpich}

cargo build -q --release -p lmdbio-tools -p lmdbio-testkit --bin lmdbio --bin lmdbio-sample-db
if [[ ! -e $db/data.mdb ]]; then
  mkdir -p "$(dirname "$db")"
  target/release/lmdbio-sample-db "$db" 7700 256 3
fi

methods=()
for _ in $(seq "$k"); do methods+=(--method lmdbio --method lmdbio-shuffled); done
json=$(mktemp)
trap 'rm -f "$json"' EXIT
echo "P  unshuffled MB/s (median, range)  shuffled MB/s (median, range)  ratio of medians"
for p in "${ranks[@]}"; do
  $mpiexec -n "$p" target/release/lmdbio bench --batch 64 --ranks-per-node 1 --cold \
    "${methods[@]}" "$@" --json "$json" "$db" >/dev/null
  python3 - "$json" "$p" <<'EOF'
import json, statistics, sys
runs = json.load(open(sys.argv[1]))["runs"]
by = {m: sorted(r["mb_per_s"] for r in runs if r["method"] == m) for m in ("lmdbio", "lmdbio-shuffled")}
u, s = (statistics.median(by[m]) for m in ("lmdbio", "lmdbio-shuffled"))
fmt = lambda m, v: f"{v:7.0f} ({by[m][0]:.0f}-{by[m][-1]:.0f})"
print(f"{sys.argv[2]:<2} {fmt('lmdbio', u):>31}  {fmt('lmdbio-shuffled', s):>29}  {s / u:16.2f}")
EOF
done

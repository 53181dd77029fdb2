#!/usr/bin/env bash
# The main job end to end on built-in sample data, from a fresh Debian 12
# machine: install what is needed, build, make a sample Caffe-style training
# LMDB, read it with lmdbio and check it against liblmdb, run the mpiexec
# benchmark (lmdbio against liblmdb's cursor and the storage limit) and the
# index benchmark, and print their tables.
#
# Environment: LMDBIO_DEMO_RECORDS (default 5000), LMDBIO_DEMO_DIR (default
# target/demo).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
export MPICC=mpicc.mpich MPIEXEC=mpiexec.mpich

records="${LMDBIO_DEMO_RECORDS:-5000}"
dir="${LMDBIO_DEMO_DIR:-target/demo}"
db="$dir/sample_lmdb"

echo "== build (release)"
cargo build --release -q -p lmdbio-tools -p lmdbio-testkit --bins

echo "== sample data: $records raw 3x64x64 Datums, Caffe keys, a commit per 1000"
rm -rf "$db"
mkdir -p "$dir"
target/release/lmdbio-sample-db "$db" "$records" 64 3

echo "== lmdbio inspect"
target/release/lmdbio inspect "$db"

echo "== lmdbio dump vs mdb_dump (liblmdb)"
if cmp -s <(target/release/lmdbio dump "$db") <(mdb_dump "$db"); then
  echo "identical: $(mdb_stat "$db" | awk '/Entries/ {print $2}') records"
else
  echo "lmdbio dump differs from mdb_dump" >&2
  exit 1
fi

echo "== mpiexec benchmark: 4 ranks in 2 virtual nodes, cold cache before each method"
trace="$dir/trace"
rm -rf "$trace"
mpiexec.mpich -n 4 target/release/lmdbio bench --ranks-per-node 2 --batch 32 --cold \
  --method raw --method raw-node --method lmdb-skip --method lmdb-walk --method lmdbio \
  --trace "$trace" --json "$dir/bench.json" "$db"
for m in lmdb-skip lmdb-walk lmdbio; do
  got=$(cat "$trace/$m"/rank-*.tsv | sort | uniq | wc -l)
  total=$(cat "$trace/$m"/rank-*.tsv | wc -l)
  echo "$m: received $total records, $got distinct, of $(mdb_stat "$db" | awk '/Entries/ {print $2}')"
done
echo "(figures from one small run on a shared machine; see docs/PERFORMANCE.md for measured comparisons)"

echo "== benchmark: index build, lmdbio vs liblmdb cursor walk"
LMDBIO_BENCH_RECORDS="${LMDBIO_DEMO_BENCH_RECORDS:-1000}" LMDBIO_BENCH_REPS=5 cargo bench -q -p lmdbio-benches --bench index_build

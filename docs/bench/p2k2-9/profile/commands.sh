#!/usr/bin/env bash
# Run from the repository root. A system-wide CPU profile of one
# invocation each (three cold runs at P = 2, two ranks per node).
perf record -a -F 1999 -o /tmp/perf-lmdbio.data -- mpiexec.mpich -n 2 target/release/lmdbio bench \
  --ranks-per-node 2 --batch 64 --cold --repeat 3 --method lmdbio target/bench-data/image-7700
perf record -a -F 1999 -o /tmp/perf-raw.data -- mpiexec.mpich -n 2 target/release/lmdbio bench \
  --ranks-per-node 2 --batch 64 --cold --repeat 3 --method raw target/bench-data/image-7700
for f in lmdbio raw; do
  perf report -i /tmp/perf-$f.data --no-children --sort comm,sym --stdio | grep -v '^$' | head -60 > docs/bench/p2k2-9/profile/$f.txt
done
# medians printed: lmdbio 1,611 MB/s, raw 2,121 MB/s
# who calls folio_mark_accessed (call graphs)
perf record -a -g -F 1999 -o /tmp/perf-g.data -- mpiexec.mpich -n 2 target/release/lmdbio bench \
  --ranks-per-node 2 --batch 64 --cold --repeat 3 --method lmdbio target/bench-data/image-7700
perf report -i /tmp/perf-g.data --no-children -S folio_mark_accessed -G --stdio | grep -v '^$' \
  > docs/bench/p2k2-9/profile/lmdbio-folio-mark-accessed-callers.txt
# page cache activations per invocation (repeat 1 and 3; raw: about 1,200)
for r in 1 3; do
  a=$(awk '/^pgactivate /{print $2}' /proc/vmstat)
  mpiexec.mpich -n 2 target/release/lmdbio bench --ranks-per-node 2 --batch 64 --cold --repeat $r \
    --method lmdbio target/bench-data/image-7700 >/dev/null
  b=$(awk '/^pgactivate /{print $2}' /proc/vmstat); echo "repeat $r: pgactivate $((b-a))"
done   # here: 96,719 and 157,691

#!/bin/bash
# usage: blktrace.sh OUT method [bin]
T=/sys/kernel/tracing
out=$1 method=$2 bin=${3:-target/release/lmdbio}
echo 0 > $T/tracing_on; echo > $T/trace
echo 65536 > $T/buffer_size_kb
echo 1 > $T/events/block/block_rq_issue/enable
echo 1 > $T/events/block/block_rq_complete/enable
sync; echo 3 > /proc/sys/vm/drop_caches
echo 1 > $T/tracing_on
mpiexec.mpich -n 8 $bin bench --ranks-per-node 1 --batch 64 --method $method --repeat 1 --cold target/bench-data/image-7700 2>&1 | grep "^$method "
echo 0 > $T/tracing_on
cat $T/trace > $out
echo 0 > $T/events/block/block_rq_issue/enable
echo 0 > $T/events/block/block_rq_complete/enable

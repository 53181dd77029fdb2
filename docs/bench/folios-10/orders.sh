#!/bin/bash
# usage: orders.sh P K method [bench flags...]: one cold run; prints MB/s and folio orders of the data file
# (--no-prepare: lmdbio's set-up is inside the timed run, so MB/s compares only runs of this script)
p=$1 k=$2 m=$3; shift 3
cd "$(git rev-parse --show-toplevel)"
ino=$(printf "%x" $(stat -c %i target/bench-data/image-7700/data.mdb))
perf record -q -e filemap:mm_filemap_add_to_page_cache -a -o /tmp/tp.data -- mpiexec.mpich -n $p target/release/lmdbio bench --ranks-per-node $k --batch 64 --cold --repeat 1 --no-prepare --method $m "$@" target/bench-data/image-7700 2>&1 | grep -E "^$m " | awk '{printf "%s %s MB/s | ", $1, $4}'
perf script -i /tmp/tp.data 2>/dev/null | grep "ino $ino " | grep -o "order=[0-9]*" | sort -t= -k2 -n | uniq -c | awk '{split($2,a,"="); tot+=$1*2^a[2]*4096; if(a[2]>=8) big+=$1*2^a[2]*4096; if(a[2]==0) z+=$1*4096} END{printf "order0 %.0f MB, order>=8 %.0f MB of %.0f MB\n", z/1e6, big/1e6, tot/1e6}'

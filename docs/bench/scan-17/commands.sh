# Seventeenth round: the tree scanned around every cache on FUSE and
# network file systems (docs/PERFORMANCE.md, "The tree scanned around every
# cache"). Not a script to run as is: each block was run by hand, as root,
# with a loopback GlusterFS volume made as scripts/gluster-bench.sh makes it
# (one brick on the local ext4 disk, FUSE mount at 127.0.0.1) holding
# target/bench-data/image-7700, at $VOL.
VOL=/var/tmp/lmdbio-gab/mnt/image-7700

# 1. Each reader's preads, one lmdbio run at P = 8, one rank per node
#    (commit 3ee18ec, before the change): strace on every rank, seccomp
#    filtered so only pread64 stops the process.
cat > /tmp/wrap.sh <<'W'
#!/bin/bash
exec strace --seccomp-bpf -f -ttt -T -e trace=pread64 -o /tmp/rec/st.$PMI_RANK "$@"
W
chmod +x /tmp/wrap.sh; mkdir -p /tmp/rec
mpiexec.mpich -n 8 /tmp/wrap.sh target/release/lmdbio bench --ranks-per-node 1 \
  --batch 64 --method raw --method lmdbio --repeat 3 --cold $VOL
#    per-read durations by method: every lmdbio read took longer than raw's
#    of the same size (median 61-65 ms against 49-56 ms for ~4.2 MB)

# 2. Which pages the runs put in a page cache, and in what folio sizes: the
#    FUSE client's (device 0:39 here) and the brick's, on the local disk
#    (254:0), one method per invocation
for m in raw lmdbio; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  perf record -a -e filemap:mm_filemap_add_to_page_cache -o /tmp/fm.$m.data -q -- \
    mpiexec.mpich -n 8 target/release/lmdbio bench --ranks-per-node 1 --batch 64 \
    --method $m --repeat 1 --cold $VOL
  perf script -i /tmp/fm.$m.data -F comm,trace |
    awk '{c[$3" "$NF]++} END{for(k in c) print c[k], k}' | sort -rn | head
done

# 3. The same reads without the engine: replay.c (modes in its header),
#    ops.py turns the logs of step 1 (an lmdbio-only run) into its input
gcc -O2 -Wall -o /tmp/replay docs/bench/scan-17/replay.c -lpthread
python3 docs/bench/scan-17/ops.py /tmp/rec
for c in 1 2 3 4 5 6; do for m in 0 1 2 4; do
  sync; echo 3 > /proc/sys/vm/drop_caches; /tmp/replay $VOL/data.mdb $m 8
done; done
#    and the brick's folios for modes 0-3 as in step 2 (perf record
#    around /tmp/replay); later, every read direct from one descriptor:
for c in 1 2 3 4; do for m in 2 5 0; do
  sync; echo 3 > /proc/sys/vm/drop_caches; /tmp/replay $VOL/data.mdb $m 8
done; done

# 4. Paired, after the change (commit e2e57d3): the default against
#    --direct-io never (what the default did before on this file system),
#    alternating invocations of raw, raw-node and lmdbio, three cold cycles
. scripts/page-reporting.sh; suspend_page_reporting
for pk in "8 1" "4 1" "8 2" "4 2" "2 1" "2 2" "1 1"; do set -- $pk
  DB=$VOL REPEAT=3 bash docs/bench/align-11/ab-bins.sh docs/bench/scan-17/gluster-ab "$1" "$2" 2 \
    def target/release/lmdbio never "target/release/lmdbio --direct-io never"
done
restore_page_reporting
python3 docs/bench/open-14/summary.py docs/bench/scan-17/gluster-ab

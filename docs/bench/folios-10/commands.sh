#!/usr/bin/env bash
# Tenth round (run from the repository root, after the release build and
# target/bench-data/image-7700). Records of experiments, not tools.
set -euo pipefail
ab=docs/bench/folios-10/ab-run.sh          # alternating invocations, variants as "ENV=.. flags"
# main as it is, P = 2 two per node (ab/main-first/a and b; a also tried direct reads)
docs/bench/p2k2-9/run.sh /tmp/b0 2 2 2 default "" direct16x2M "--direct-io always --read-streams 16 --coalesce 2097152"
docs/bench/p2k2-9/run.sh /tmp/b1 2 2 4 default ""
# folio orders of one cold run (data file only): orders.sh P K METHOD [flags]
docs/bench/folios-10/orders.sh 2 2 raw
docs/bench/folios-10/orders.sh 2 2 lmdbio
docs/bench/folios-10/orders.sh 1 1 lmdbio --no-overlap --read-streams 1
# the variants: git apply docs/bench/folios-10/experiments.patch, rebuild; then
#   LMDBIO_KEEP_TREE=1     keep the tree's pages in the cache (as main does)
#   LMDBIO_SERIAL_READS=1  each round's read waits for the previous one's
#   LMDBIO_SEQ=1           POSIX_FADV_SEQUENTIAL on the reader's descriptor
# (the runs in ab/p1k1, ab/p2k2, ab/p2k2b were made before LMDBIO_KEEP_TREE
# existed: their "default" drops the tree's pages)
$ab /tmp/ab/p2k2 2 2 2 default "" serial1 "LMDBIO_SERIAL_READS=1 --read-streams 1" serial2 "LMDBIO_SERIAL_READS=1"
$ab /tmp/ab/p1k1 1 1 2 default "" serial1 "LMDBIO_SERIAL_READS=1 --read-streams 1" serial2 "LMDBIO_SERIAL_READS=1"
REPEAT=5 $ab /tmp/ab/p2k2b 2 2 3 default "" serial2 "LMDBIO_SERIAL_READS=1"
REPEAT=5 $ab /tmp/ab/tree-p1k1 1 1 2 keep "LMDBIO_KEEP_TREE=1" drop ""
REPEAT=5 $ab /tmp/ab/tree-p2k2 2 2 2 keep "LMDBIO_KEEP_TREE=1" drop ""
REPEAT=4 $ab /tmp/ab/p8k1 8 1 2 main "LMDBIO_KEEP_TREE=1" treedrop "" serial "LMDBIO_SERIAL_READS=1"
# the C programs (gcc -O2 -o X X.c -lpthread; F=target/bench-data/image-7700/data.mdb)
#   rd F shared|procs T RUN_KB [normal|random|seq] [ahead_runs]
#   pat F procs|steps|steps1|lanes|... [ahead_MiB]     (the reader's step order over two halves)
#   ch F T CHUNK_MiB                                   (T=0: two processes; after two 4 KiB reads)
#   dr F T RUN_KB                                      (direct reads)
# e.g. for i in 1 2 3 4; do rd F shared 1 4096 normal; rd F shared 1 4096 seq; rd F procs 2 4096; rd F shared 2 4096 seq; done
#      for i in 1..5: pat F procs; pat F steps; ...
#      for i in 1..4: dr F 8 4096; dr F 16 4096; dr F 8 8192; ch F 0 4; ch F 1 4

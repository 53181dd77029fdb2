#!/usr/bin/env bash
# Sixteenth round: direct reads into a window in small pages through
# staging buffers in huge pages. See docs/PERFORMANCE.md, "Two-rank nodes
# read directly through staging buffers (sixteenth round)".
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
MPICC=mpicc.mpich cargo build --release -q -p lmdbio-tools -p lmdbio-testkit --bins
. scripts/page-reporting.sh
suspend_page_reporting
trap restore_page_reporting EXIT

# stage.c: threads reading their parts of the file in 4 MiB preads into a
# shared 4 KiB-page mapping: through the cache (mode 0), directly (1), or
# directly into a private 2 MiB-page buffer and copied (2)
gcc -O2 -pthread -o /tmp/stage docs/bench/stage-16/stage.c
F=target/bench-data/image-15400/data.mdb
for rep in 1 2 3; do for t in 1 2 4; do for m in 0 2; do /tmp/stage $F $m $t 4194304; done; done; done

# paired, one binary: the default (staged at two ranks per node) against
# --direct-io never (what the default did there before this round)
B=target/release/lmdbio
for pk in "4 2" "8 2"; do set -- $pk
  REPEAT=3 bash docs/bench/align-11/ab-bins.sh docs/bench/stage-16/ab "$1" "$2" 2 staged "$B" cache "$B --direct-io never"
done
for pk in "2 2" "4 2" "8 2"; do set -- $pk
  REPEAT=3 bash docs/bench/align-11/ab-bins.sh docs/bench/stage-16/ab2 "$1" "$2" 3 staged "$B" cache "$B --direct-io never"
done
# more read streams per reader with staging
for pk in "4 2" "2 2"; do set -- $pk
  REPEAT=3 bash docs/bench/align-11/ab-bins.sh docs/bench/stage-16/streams "$1" "$2" 2 staged "$B" \
    s2 "$B --read-streams 2" s4 "$B --read-streams 4"
done

# direct reads on the GlusterFS FUSE mount (volume made by hand as in
# scripts/gluster-bench.sh; dio.c from docs/bench/disk-15), caches dropped
# before each: 4 and 8 threads, through the cache (0) and direct (1)
# gcc -O2 -pthread -o /tmp/dioh docs/bench/disk-15/dio.c
# for m in 0 1; do sync; echo 3 > /proc/sys/vm/drop_caches; /tmp/dioh MNT/image-7700/data.mdb $m 4 0 4194304; done

# GlusterFS volume by hand (VOL=.../image-7700 on the FUSE mount), then:
# first.c, caches dropped before each, modes 0-4 (see README.md)
# gcc -O2 -pthread -o /tmp/first docs/bench/stage-16/first.c
# for rep in 1 2; do for m in 0 1 2 3 4; do sync; echo 3 > /proc/sys/vm/drop_caches; /tmp/first $VOL/data.mdb $m 8; done; done
# staging for reads through the cache (throwaway: git apply docs/bench/stage-16/stage-cache.patch,
# build into /tmp/wt-target, and a wrapper that sets LMDBIO_X_STAGECACHE=1)
# for pk in "4 1" "8 1"; do set -- $pk
#   DB=$VOL REPEAT=3 bash docs/bench/align-11/ab-bins.sh docs/bench/stage-16/gluster-stagecache "$1" "$2" 2 \
#     def /tmp/wt-target/release/lmdbio stagec /tmp/stagecache.sh
# done
# for pk in "1 1" "2 2"; do set -- $pk
#   DB=$VOL REPEAT=3 bash docs/bench/align-11/ab-bins.sh docs/bench/stage-16/gluster-streams "$1" "$2" 2 \
#     def target/release/lmdbio s1 "target/release/lmdbio --read-streams 1"
# done

# the staging copy with streaming stores (fc0ef8a, target/release/lmdbio)
# against the plain copy (9e6a685, built the same way and kept as
# /tmp/lmdbio-memcpy); stage.c mode 2 (memcpy) against mode 3 (streaming)
for rep in 1 2 3; do for t in 1 2; do for m in 2 3; do /tmp/stage $F $m $t 4194304; done; done; done
for pk in "4 2" "8 2" "2 2"; do set -- $pk
  DB=target/bench-data/image-15400 REPEAT=3 bash docs/bench/align-11/ab-bins.sh docs/bench/stage-16/stream-copy "$1" "$2" 2 \
    stream target/release/lmdbio memcpy /tmp/lmdbio-memcpy
done
DB=target/bench-data/image-15400 REPEAT=3 bash docs/bench/align-11/ab-bins.sh docs/bench/stage-16/stream-copy-p2 2 2 3 \
  stream target/release/lmdbio memcpy /tmp/lmdbio-memcpy
# the same throwaway on top of the streaming copy (ba25def), and two settings
# for pk in "4 1" "8 1"; do set -- $pk
#   DB=$VOL REPEAT=3 bash docs/bench/align-11/ab-bins.sh docs/bench/stage-16/gluster-stagecache2 "$1" "$2" 3 \
#     def /tmp/wt-target/release/lmdbio stagec /tmp/stagecache.sh
#   DB=$VOL REPEAT=3 bash docs/bench/align-11/ab-bins.sh docs/bench/stage-16/gluster-variants "$1" "$2" 2 \
#     def target/release/lmdbio c16 "target/release/lmdbio --coalesce 16777216" s2 "target/release/lmdbio --read-streams 2"
# done

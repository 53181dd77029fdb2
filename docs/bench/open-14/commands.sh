#!/usr/bin/env bash
# Fourteenth round: opening in three agreements over the world instead of ten.
# Every comparison ran with free page reporting suspended
# (. scripts/page-reporting.sh; suspend_page_reporting) and was restored after.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
DB=target/bench-data/image-7700

# ab/p8k1-first/: the build before (2050d3c, "base") against the change
# without its unit test ("open2", the same engine as 1f77ee2), alternating
# invocations, each raw + raw-node + lmdbio x 4 cold cycles
REPEAT=4 bash docs/bench/align-11/ab-bins.sh docs/bench/open-14/ab/p8k1-first 8 1 3 \
  base /tmp/ab/lmdbio-base open2 /tmp/ab/lmdbio-open2

# ab/pairs/: the same before against 1f77ee2 ("new")
for pk in "8 1" "4 1" "4 2" "8 2"; do
  REPEAT=4 bash docs/bench/align-11/ab-bins.sh docs/bench/open-14/ab/pairs $pk 2 \
    base /tmp/ab/lmdbio-base new /tmp/ab/lmdbio-new
done

# gluster-ab/: the same pair on a loopback GlusterFS volume made as
# scripts/gluster-bench.sh makes it, the database copied to its mount
for pk in "4 1" "8 1"; do
  DB=/var/tmp/lmdbio-gab/mnt/image-7700 REPEAT=4 \
    bash docs/bench/align-11/ab-bins.sh docs/bench/open-14/gluster-ab $pk 2 \
    base /tmp/ab/lmdbio-base new /tmp/ab/lmdbio-new
done

# opening time, first batch and ratio per invocation
python3 docs/bench/open-14/summary.py docs/bench/open-14/ab/pairs

# trace/: a build with trace.patch applied (git apply; cargo build --release
# --target-dir target/trwt -p lmdbio-tools), one invocation per trace:
#   LMDBIO_TR=1 mpiexec.mpich -n 8 target/trwt/release/lmdbio bench --ranks-per-node 1 \
#     --batch 64 --method lmdbio --repeat 1 [--cold] DB 2> X.trace
# before-*: the patch on 2050d3c; after-*: on 1f77ee2 (the patch there);
# warm runs read the file cached (cat DB/data.mdb > /dev/null first)
python3 docs/bench/open-14/trace/timeline.py docs/bench/open-14/trace/after-warm-p8k1.trace
python3 docs/bench/open-14/trace/reads.py docs/bench/open-14/trace/after-cold-gluster-p8k1.trace

# raw-buffer-gluster/: on the GlusterFS volume, raw-node into its 4 MiB
# buffer and into a window-sized 256 MiB one, lmdbio beside it (P = 4, one
# per node, two invocations each, alternating)
for i in 1 2; do
  for buf in 4194304 268435456; do
    mpiexec.mpich -n 4 target/release/lmdbio bench --ranks-per-node 1 --batch 64 \
      --method raw-node --method lmdbio --repeat 4 --cold --raw-buffer $buf \
      --json docs/bench/open-14/raw-buffer-gluster/b$buf-$i.json /var/tmp/lmdbio-gab/mnt/image-7700
  done
done

# futex/: waiting ranks without the 2 ms timer. gluster-fx50/: 2ed94ab
# ("head") against the same with the wait's timeout raised to 50 ms
# ("fx50", a throwaway build); gluster/ and local/: 2ed94ab against the
# change (the tag's low byte in the half slept on, "fx")
for pk in "4 1" "8 1"; do
  DB=/var/tmp/lmdbio-gab/mnt/image-7700 REPEAT=4 \
    bash docs/bench/align-11/ab-bins.sh docs/bench/open-14/futex/gluster-fx50 $pk 2 \
    head /tmp/ab/lmdbio-head fx50 /tmp/ab/lmdbio-fx50
  DB=/var/tmp/lmdbio-gab/mnt/image-7700 REPEAT=4 \
    bash docs/bench/align-11/ab-bins.sh docs/bench/open-14/futex/gluster $pk 2 \
    head /tmp/ab/lmdbio-head fx /tmp/ab/lmdbio-fx
done
for pk in "8 1" "4 1"; do
  REPEAT=4 bash docs/bench/align-11/ab-bins.sh docs/bench/open-14/futex/local $pk 2 \
    head /tmp/ab/lmdbio-head fx /tmp/ab/lmdbio-fx
done

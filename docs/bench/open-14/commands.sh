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

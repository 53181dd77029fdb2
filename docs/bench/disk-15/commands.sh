#!/usr/bin/env bash
# Fifteenth round (docs/PERFORMANCE.md, "Direct reads into huge pages").
# Run from the repository root after scripts/setup.sh; every comparison
# suspends free page reporting first:
#   . scripts/page-reporting.sh; suspend_page_reporting; ...; restore_page_reporting
set -euo pipefail
MPICC=mpicc.mpich cargo build --release -p lmdbio-tools -p lmdbio-testkit --bins
target/release/lmdbio-sample-db target/bench-data/image-15400 15400 256 3

# same-day sweeps, 2.89 GiB then 1.44 GiB (commit f9128b9)
REPEAT=4 METHODS="raw raw-node lmdbio" scripts/bench-sweep.sh target/bench-data/image-15400 docs/bench/local-mpich-15-2.9g
REPEAT=4 METHODS="raw raw-node lmdbio" scripts/bench-sweep.sh target/bench-data/image-7700 docs/bench/local-mpich-15-1.4g

# paired settings, one invocation each per round (raw, raw-node, lmdbio x 3 cold cycles)
B=target/release/lmdbio; AB=docs/bench/align-11/ab-bins.sh; export DB=target/bench-data/image-15400 REPEAT=3
bash $AB docs/bench/disk-15/streams 4 1 2 def "$B" s2 "$B --read-streams 2" buf256 "$B --raw-buffer 268435456"
bash $AB docs/bench/disk-15/direct 4 1 2 def "$B" dio "$B --direct-io always" \
  dio2 "$B --direct-io always --read-streams 2" dio4 "$B --direct-io always --read-streams 4 --coalesce 1048576"
for pk in "4 1" "8 1"; do set -- $pk
  bash $AB docs/bench/disk-15/window $1 $2 2 def "$B" w64 "$B --window 67108864"
  bash $AB docs/bench/disk-15/window-big $1 $2 2 def "$B" w512 "$B --window 536870912 --prefetch 32"
done
# (auto, auto-b, p1, p2k2, recheck: the same script with --direct-io auto|always at other points)

# throwaway builds: node-meet.patch and no-touch.patch applied in a worktree, built with
#   MPICC=mpicc.mpich cargo build --release -p lmdbio-tools --target-dir target/nodemeet
# and run through wrappers that set LMDBIO_NODE_MEET=1 or LMDBIO_NOTOUCH=1:
#   bash $AB docs/bench/disk-15/nodemeet P 1 2 def target/nodemeet/release/lmdbio nodemeet /tmp/nm.sh
#   bash $AB docs/bench/disk-15/notouch  P 1 2 def target/nodemeet/release/lmdbio notouch  /tmp/nt.sh
#   (and on the GlusterFS volume with DB=<mount>/image-7700: gluster-notouch)
# huge/: the advice of commit fa02946 behind LMDBIO_HUGE=1 (wrapper /tmp/hg.sh), paired with
#   def, dio (--direct-io always), hugedio (LMDBIO_HUGE=1 --direct-io always), huge (LMDBIO_HUGE=1)

# the small program: 4 or 16 threads, each its part of the file in 4 MiB preads
gcc -O2 -pthread -o /tmp/dioh docs/bench/disk-15/dio.c
F=target/bench-data/image-15400/data.mdb
/tmp/dioh $F 0 4 12288 4194304             # through the page cache
/tmp/dioh $F 1 4 12288 4194304             # direct, 4 KiB pages
HUGE=1 /tmp/dioh $F 1 4 12288 4194304      # direct, 2 MiB pages

# block-layer trace of one run (blk/): block_rq_issue and block_rq_complete
# events from /sys/kernel/tracing around
#   mpiexec.mpich -n 4 target/release/lmdbio bench --ranks-per-node 1 --cold --repeat 1 --method M DB
# then: python3 docs/bench/disk-15/blk/blkstat.py docs/bench/disk-15/blk/*.txt
# strace (strace/rounds.txt):
#   mpiexec.mpich -n 4 strace -f --seccomp-bpf -e trace=pread64 -ttt -T -ff -o /tmp/st/tr \
#     target/release/lmdbio bench --cold --ranks-per-node 1 --repeat 2 --method raw --method lmdbio DB
# perf (perf-timeline.txt): perf record -a -g -- mpiexec.mpich -n 4 ... --repeat 3 --method M DB

# after the default change: every point, both databases
REPEAT=4 METHODS="raw raw-node lmdb-skip lmdb-walk lmdbio" scripts/bench-sweep.sh target/bench-data/image-7700 docs/bench/local-mpich-15

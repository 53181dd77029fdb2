#!/usr/bin/env bash
# Thirteenth round: ranks meet where rounds start, not at every step.
# Every comparison ran with free page reporting suspended
# (. scripts/page-reporting.sh; suspend_page_reporting) and was restored after.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
DB=target/bench-data/image-7700

# ab/: the build before (3b0b917, "base") against the change (24bf706, "new"),
# alternating invocations, two per point, each raw + raw-node + lmdbio x 4 cold cycles
for pk in "8 1" "4 1" "8 2" "4 2" "2 1" "2 2" "1 1"; do
  REPEAT=4 bash docs/bench/align-11/ab-bins.sh docs/bench/meet-13/ab $pk 2 \
    base /tmp/lmdbio-base new /tmp/lmdbio-new
done

# first-round/: the change ("meet") against the same with the job's first
# round queuing the next round's reads at once ("nofirst"; not kept)
for pk in "8 1" "4 1" "4 2" "8 2"; do
  REPEAT=4 bash docs/bench/align-11/ab-bins.sh docs/bench/meet-13/first-round $pk 2 \
    meet /tmp/lmdbio-meet nofirst /tmp/lmdbio-nofirst
done

# bench-clock/: the bench before (99b4813, "old") against the bench whose
# lmdbio clock stops before its own past-the-limit check (3b0b917, "new")
for pk in "8 1" "4 1"; do
  REPEAT=4 bash docs/bench/align-11/ab-bins.sh docs/bench/meet-13/bench-clock $pk 2 \
    old /tmp/lmdbio-old new target/release/lmdbio
done

# exploratory/: one throwaway build of 99b4813 with environment switches
# (not committed): LMDBIO_NO_STEP_AGREE skipped the per-step agreement
# (unsafe: no failure reached other ranks), LMDBIO_PAUSE_{FIRST,SHORT,MAX}_US
# and LMDBIO_PAUSE_DIV changed the polite wait's pauses. Invocations
# alternated "def" (no switch) with the variant, P = 8 one rank per node
# unless the file name says otherwise:
#   no-step-agreement: LMDBIO_NO_STEP_AGREE=1 (P = 8 and 4, one and two per node)
#   pauses: slow = SHORT 500 MAX 5000 DIV 5; fast = SHORT 50 MAX 300 DIV 50
#   pauses-div4: DIV 4

# c/: the same reads without the engine (cold, 8 processes, each 1/8 of the file)
gcc -O2 -pthread -o /tmp/split docs/bench/meet-13/c/split.c
gcc -O2 -pthread -o /tmp/steps docs/bench/meet-13/c/steps.c
for i in 1 2 3 4; do
  # mode 0: pread into 4 MiB, checksum in the same thread; 3: the same into a
  # 256 MiB ring; 1: a reader thread and a consumer handing off by polling
  # (50 us sleeps); 4: the same handing off with a condition variable.
  # The last argument starts a thread per process sleeping that many us in a loop.
  for args in "0 4" "3 256" "1 8" "1 256" "4 8" "4 256" "4 256 1000" "4 256 300" "4 256 100"; do
    sync; echo 3 > /proc/sys/vm/drop_caches; sleep 0.3
    /tmp/split $DB/data.mdb 8 $args
  done
  # a barrier among the 8 consumers after every 12.5 MB step: none, polling
  # with the engine's pause schedule, futex
  for b in 0 1 2; do
    sync; echo 3 > /proc/sys/vm/drop_caches; sleep 0.3
    /tmp/steps $DB/data.mdb 8 $b
  done
done

# block-trace/: block_rq_issue/complete at P = 8 one per node, raw and lmdbio
# (99b4813) in turn, three each; summary.txt from btan2.py and btwave.py
# (requests in the data file's extents: filefrag -v DB/data.mdb, the physical
# ranges in 512-byte sectors, one "START END" per line, in /tmp/extents.txt)
for i in 1 2 3; do
  bash docs/bench/meet-13/block-trace/blktrace.sh /tmp/bt-raw-$i.txt raw
  bash docs/bench/meet-13/block-trace/blktrace.sh /tmp/bt-lmdbio-$i.txt lmdbio
done

# syscalls at P = 8 one per node, 3 cold runs of one method per invocation
for m in raw lmdbio; do
  perf stat -a -e 'syscalls:sys_enter_clock_nanosleep,syscalls:sys_enter_futex,context-switches' \
    mpiexec.mpich -n 8 target/release/lmdbio bench --ranks-per-node 1 --batch 64 \
    --method $m --repeat 3 --cold $DB
done

# gluster-streams/: on a loopback GlusterFS volume made as scripts/gluster-bench.sh
# makes it (kept up for the comparison), the default (one read stream per
# reader when several readers share the machine) against two per reader
for pk in "4 2" "4 1" "8 2"; do
  DB=/var/tmp/lmdbio-gab/mnt/image-7700 REPEAT=3 bash docs/bench/align-11/ab-bins.sh \
    docs/bench/meet-13/gluster-streams $pk 2 def target/release/lmdbio \
    s2 "target/release/lmdbio --read-streams 2"
done

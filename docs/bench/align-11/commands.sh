#!/usr/bin/env bash
# Eleventh round: what was run, in order (see docs/PERFORMANCE.md, "Runs
# that land on a page of the window"). Not meant to be rerun as a whole.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
db=target/bench-data/image-7700

# The copy's speed by buffer offset, from a warm file.
gcc -O2 -o /tmp/copy-alignment docs/bench/align-11/copy-alignment.c
cat "$db/data.mdb" >/dev/null
for a in "0 0" "0 17" "17 0" "17 17" "100 0" "0 4096" "4000 96" "0 1" "0 4" "0 8" "0 16" "0 32" "0 48" "0 64"; do
  /tmp/copy-alignment "$db/data.mdb" $a | tail -1
done

# Builds: /tmp/lmdbio-main at c789ca7, /tmp/lmdbio-align at 001c4db
# (MPICC=mpicc.mpich cargo build --release -p lmdbio-tools, then cp).
b=docs/bench/align-11/ab-bins.sh
$b docs/bench/align-11/ab 2 2 4 main /tmp/lmdbio-main align /tmp/lmdbio-align
for pk in "1 1" "4 1" "8 1" "4 2" "8 2" "2 1"; do
  $b docs/bench/align-11/ab $pk 2 main /tmp/lmdbio-main align /tmp/lmdbio-align
done
for pk in "2 2" "4 2"; do
  $b docs/bench/align-11/streams $pk 3 s-default /tmp/lmdbio-align \
    s2 "/tmp/lmdbio-align --read-streams 2" s3 "/tmp/lmdbio-align --read-streams 3"
done
$b docs/bench/align-11/coalesce 2 2 3 c4 /tmp/lmdbio-align c8 "/tmp/lmdbio-align --coalesce 8388608" \
  c16 "/tmp/lmdbio-align --coalesce 16777216" c8s4 "/tmp/lmdbio-align --coalesce 8388608 --read-streams 4"
# (streams-b ran target/release/lmdbio built from 001c4db with an unused,
# environment-gated experiment compiled in: the same code path)
$b docs/bench/align-11/streams-b 4 2 5 s-default target/release/lmdbio s2 "target/release/lmdbio --read-streams 2"
$b docs/bench/align-11/streams-b 8 2 3 s-default target/release/lmdbio s2 "target/release/lmdbio --read-streams 2"

# One round at a time and the tree's pages dropped: /tmp/lmdbio-exp11 is
# c789ca7 with exp11.patch (environment switches); serial-reads/v-keep and
# v-serdrop set them. serial-reads.patch is the same change written as the
# default, not kept.
s=docs/bench/align-11/serial-reads
$b $s/ab-tree 2 2 4 keep $s/v-keep drop $s/v-drop serdrop $s/v-serdrop
for pk in "2 2" "8 1" "4 2" "1 1"; do $b $s/ab-tree2 $pk 4 keep $s/v-keep serdrop $s/v-serdrop; done
for pk in "4 2" "8 1"; do $b $s/ab-tree3 $pk 4 keep $s/v-keep serdrop-s2 "$s/v-serdrop --read-streams 2"; done
for pk in "1 1" "2 1" "4 1" "8 2"; do $b $s/ab-tree4 $pk 3 keep $s/v-keep serdrop-s2 "$s/v-serdrop --read-streams 2"; done
for pk in "2 1" "4 1"; do $b $s/ab-tree5 $pk 3 keep $s/v-keep serdrop-s1 "$s/v-serdrop --read-streams 1"; done

# How long one small allreduce over 8 ranks takes after the last arrival,
# with and without a thread per rank copying from the page cache
# (args: file, hog threads 0/1, wait: 0 blocking, 1 the engine's polite
# wait, 2 fixed 50 us sleeps; HOGNICE=n sets the copying threads' nice).
mpicc.mpich -O2 -o /tmp/allreduce-under-load docs/bench/align-11/allreduce-under-load.c -lpthread
for h in 0 1; do for m in 0 1 2; do
  mpiexec.mpich -n 8 /tmp/allreduce-under-load "$db/data.mdb" $h $m
done; done

#!/usr/bin/env bash
# Twelfth round: rounds read one after another and the tree's pages dropped
# after the index is built, against the build before (22aea93), with the
# kernel's free page reporting suspended (scripts/page-reporting.sh).
# Builds: /work/base-target/release/lmdbio from 22aea93, target/release/lmdbio
# from this round's commit.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
. scripts/page-reporting.sh
suspend_page_reporting
echo "$page_reporting_state"
for pk in "1 1" "2 1" "2 2" "4 1" "4 2" "8 1" "8 2"; do
  set -- $pk
  echo "== P=$1 K=$2"
  REPEAT=4 bash docs/bench/align-11/ab-bins.sh docs/bench/serial-12/ab "$1" "$2" 2 \
    before /work/base-target/release/lmdbio after target/release/lmdbio
done

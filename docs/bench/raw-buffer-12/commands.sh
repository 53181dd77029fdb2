#!/usr/bin/env bash
# Twelfth round: the storage limit read into a buffer as large as lmdbio's
# window (--raw-buffer 256 MiB) against the default (one 4 MiB request),
# alternating invocations of raw, raw-node and lmdbio, free page reporting
# suspended.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
. scripts/page-reporting.sh
suspend_page_reporting
echo "$page_reporting_state"
for pk in "1 1" "4 1" "8 1"; do
  set -- $pk
  echo "== P=$1 K=$2"
  REPEAT=4 bash docs/bench/align-11/ab-bins.sh docs/bench/raw-buffer-12 "$1" "$2" 2 \
    raw4m target/release/lmdbio raw256m "target/release/lmdbio --raw-buffer 268435456"
done

#!/usr/bin/env bash
# Twelfth round: what made cold runs on this machine bimodal. One process
# reads the bench database with `raw` in cold runs, with the kernel's free
# page reporting on, and with it suspended (page_reporting_order above the
# largest page order). Prints each run's MB/s and how much memory the guest
# reported to the hypervisor meanwhile. Needs root.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
db=target/bench-data/image-7700
param=/sys/module/page_reporting/parameters
saved=$(cat $param/page_reporting_order)
trap 'echo "$saved" > $param/page_reporting_order' EXIT
run() { # name order
  echo "$2" > $param/page_reporting_order
  local before after
  before=$(cat $param/reported_kib)
  mpiexec.mpich -n 1 target/release/lmdbio bench --method raw --repeat 12 --cold \
    --json "docs/bench/page-reporting-12/$1.json" "$db" > /dev/null
  after=$(cat $param/reported_kib)
  echo "$1: reported $(( (after - before) / 1024 )) MiB;" \
    "$(python3 -c "import json,sys; print([round(r['mb_per_s']) for r in json.load(open(sys.argv[1]))['all_runs']])" \
       "docs/bench/page-reporting-12/$1.json")"
}
run raw-p1-reporting-on "$saved"
run raw-p1-reporting-suspended 11
# the same file read in 4 MiB preads after drop_caches, MB/s per 128 MiB
python3 docs/bench/page-reporting-12/per-128mib.py "$db/data.mdb" 10

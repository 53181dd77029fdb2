#!/usr/bin/env bash
# PyTorch input loops against the lmdbio engine, cold, at P = 1, 2, 4, then
# a Markdown table. Each P alternates REPEAT times between `lmdbio bench
# --method lmdbio` and lmdbio.Reader (on its thread, then on the caller's:
# benches/python_input.py), so each Reader run has an engine run next to
# it; the table gives medians and the median of the paired ratios. Then
# the other Python methods, once. Every method reads after the file is
# dropped from the page cache.
#
#   benches/python-input.sh [DB [OUTDIR]]
#
# Environment: RANKS (default "1 2 4"), REPEAT (3), BATCH (64), WORKERS
# (DataLoader workers of the py-lmdb Dataset, default 2), METHODS (the
# others: default torch,pylmdb, plus dali when installed; "" for none),
# RECORDS (records of the ImageNet-like database made when DB does not
# exist: default 7700, about 1.5 GB of 256x256x3 raw Datums), OUT (default
# target/python-bench), DROP_ALL_CACHES (1: empty the whole page cache
# before each method, for GlusterFS; root). Needs the virtual environment of
# scripts/test-python.sh (target/python-venv); installs a release build of
# ./python into it.
set -euo pipefail
cd "$(dirname "$0")/.."
export MPICC="${MPICC:-mpicc.mpich}"
ranks=${RANKS:-1 2 4}
repeat=${REPEAT:-3}
batch=${BATCH:-64}
workers=${WORKERS:-2}
records=${RECORDS:-7700}
out=${OUT:-target/python-bench}
db=${1:-target/bench-data/image-$records}
out=${2:-$out}
# The per-file drop does not reach a GlusterFS brick's cache: there the
# whole machine's page cache is emptied (root; DROP_ALL_CACHES=1).
drop_all=""
if [ "${DROP_ALL_CACHES:-0}" = 1 ]; then drop_all=--drop-all-caches; fi
mkdir -p "$out"

cargo build --release -q -p lmdbio-tools -p lmdbio-testkit --bins
if [ ! -e "$db" ]; then
  mkdir -p "$(dirname "$db")"
  target/release/lmdbio-sample-db "$db" "$records" 256 3
fi
# shellcheck disable=SC1091
. target/python-venv/bin/activate
# A release build of the package (scripts/test-python.sh installs a dev one).
python -m pip install -q --disable-pip-version-check --no-deps --force-reinstall ./python

if [ -z "${METHODS+x}" ]; then
  METHODS=torch,pylmdb
  if python -c 'import nvidia.dali' 2>/dev/null; then METHODS=$METHODS,dali; fi
fi
engine_run() {
  mpiexec.mpich -n "$1" target/release/lmdbio bench --method lmdbio --cold $drop_all \
    --batch "$batch" --tail short --json "$out/engine-$1.json" "$db" > /dev/null
  python - "$out/engine-$1.json" "$1" "$2" <<'PY' | tee -a "$results"
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
print(json.dumps(dict(method="engine", ranks=int(sys.argv[2]), records=run["records"],
                      seconds=run["seconds"], records_per_s=run["records_per_s"],
                      label=sys.argv[3])))
PY
}
python_run() {
  mpiexec.mpich -n "$1" python benches/python_input.py "$db" --batch "$batch" $drop_all \
    --workers "$workers" --methods "$2" --label "$3" | tee -a "$results"
}
results="$out/results.jsonl"
: > "$results"
for p in $ranks; do
  echo "== P=$p"
  for i in $(seq "$repeat"); do
    # Odd rounds run the engine first, even ones last and the two Readers
    # the other way round, so no method always follows the same one.
    if [ $((i % 2)) = 1 ]; then
      engine_run "$p" "$i"
      python_run "$p" reader,reader-inline "$i"
    else
      python_run "$p" reader-inline,reader "$i"
      engine_run "$p" "$i"
    fi
  done
  if [ -n "$METHODS" ]; then python_run "$p" "$METHODS" ""; fi
done

python - "$results" "$workers" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs[r["ranks"]][r["method"]].append(r)

def med(rs, key="records_per_s"):
    return statistics.median(r[key] for r in rs)

def paired(m, method):
    engine = {r["label"]: r["records_per_s"] for r in m["engine"]}
    return statistics.median(r["records_per_s"] / engine[r["label"]] for r in m[method])

print()
print("| P | engine (`lmdbio bench`) | `Reader` | Reader / engine | binding ms/epoch "
      "| `Reader` on the caller's thread | / engine | binding ms/epoch |")
print("|---|---|---|---|---|---|---|---|")
for p in sorted(runs):
    m = runs[p]
    print(f"| {p} | {med(m['engine']):,.0f} | {med(m['reader']):,.0f} | {paired(m, 'reader'):.2f} "
          f"| {1e3 * med(m['reader'], 'binding_seconds'):.1f} "
          f"| {med(m['reader-inline']):,.0f} | {paired(m, 'reader-inline'):.2f} "
          f"| {1e3 * med(m['reader-inline'], 'binding_seconds'):.1f} |")
others = [x for x in ("torch", "pylmdb", "dali") if any(x in m for m in runs.values())]
if others:
    names = {"torch": "`lmdbio.torch` (decoded)",
             "pylmdb": f"py-lmdb Dataset, {sys.argv[2]} workers",
             "dali": "DALI `fn.readers.caffe` (CPU)"}
    print()
    print("| P | engine | " + " | ".join(names[x] for x in others)
          + (" | lmdbio.torch / py-lmdb" if "pylmdb" in others else "")
          + (" | lmdbio.torch / DALI" if "dali" in others else "") + " |")
    print("|---|---|" + "---|" * (len(others) + ("pylmdb" in others) + ("dali" in others)))
    for p in sorted(runs):
        m = runs[p]
        cells = [f"{med(m[x]):,.0f}" for x in others]
        if "pylmdb" in others:
            cells.append(f"{med(m['torch']) / med(m['pylmdb']):.1f}")
        if "dali" in others:
            cells.append(f"{med(m['torch']) / med(m['dali']):.1f}")
        print(f"| {p} | {med(m['engine']):,.0f} | " + " | ".join(cells) + " |")
PY

#!/usr/bin/env bash
# PyTorch input loops against the lmdbio engine, cold, at P = 1, 2, 4 (each
# point one invocation: `lmdbio bench --method lmdbio` right before the
# Python methods of benches/python_input.py, every method after dropping the
# file from the page cache), then a Markdown table.
#
#   benches/python-input.sh [DB]
#
# Environment: RANKS (default "1 2 4"), BATCH (64), WORKERS (DataLoader
# workers of the py-lmdb Dataset, default 2), RECORDS (records of the
# ImageNet-like database made when DB does not exist: default 7700, about
# 1.5 GB of 256x256x3 raw Datums), OUT (default target/python-bench).
# Needs the virtual environment of scripts/test-python.sh (target/python-venv);
# installs a release build of ./python into it.
set -euo pipefail
cd "$(dirname "$0")/.."
export MPICC="${MPICC:-mpicc.mpich}"
ranks=${RANKS:-1 2 4}
batch=${BATCH:-64}
workers=${WORKERS:-2}
records=${RECORDS:-7700}
out=${OUT:-target/python-bench}
db=${1:-target/bench-data/image-$records}
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

methods=reader,torch,pylmdb
if python -c 'import nvidia.dali' 2>/dev/null; then methods=$methods,dali; fi
results="$out/results.jsonl"
: > "$results"
for p in $ranks; do
  echo "== P=$p"
  mpiexec.mpich -n "$p" target/release/lmdbio bench --method lmdbio --cold --batch "$batch" \
    --tail short --json "$out/engine-$p.json" "$db" > /dev/null
  python - "$out/engine-$p.json" "$p" >> "$results" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
print(json.dumps(dict(method="engine", ranks=int(sys.argv[2]), records=run["records"],
                      seconds=run["seconds"], records_per_s=run["records_per_s"])))
PY
  mpiexec.mpich -n "$p" python benches/python_input.py "$db" --batch "$batch" \
    --workers "$workers" --methods "$methods" | tee -a "$results"
done

python - "$results" "$batch" "$workers" <<'PY'
import collections, json, sys
rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows[r["ranks"]][r["method"]] = r["records_per_s"]
print()
dali = any("dali" in m for m in rows.values())
print(f"| P | `lmdbio bench` engine | `Reader` | Reader / engine | `lmdbio.torch` (decoded) "
      f"| py-lmdb Dataset, {sys.argv[3]} workers | lmdbio.torch / py-lmdb |"
      + (" DALI `fn.readers.caffe` (CPU) | lmdbio.torch / DALI |" if dali else ""))
print("|---|---|---|---|---|---|---|" + ("---|---|" if dali else ""))
for p in sorted(rows):
    m = rows[p]
    line = (f"| {p} | {m['engine']:.0f} | {m['reader']:.0f} | {m['reader'] / m['engine']:.2f} "
            f"| {m['torch']:.0f} | {m['pylmdb']:.0f} | {m['torch'] / m['pylmdb']:.2f} |")
    if dali:
        line += f" {m['dali']:.0f} | {m['torch'] / m['dali']:.2f} |"
    print(line)
PY

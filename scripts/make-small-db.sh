#!/usr/bin/env bash
# Writes a database of N records of LEN-byte values with liblmdb's own
# mdb_load (keys %08d, put in key order as Caffe's tools write them,
# values pseudo-random), for the small-record benchmarks.
#
#   scripts/make-small-db.sh DIR N LEN [SEED]
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 DIR N LEN [SEED]" >&2
  exit 2
fi
dir=$1 n=$2 len=$3 seed=${4:-1}
rm -rf "$dir"
mkdir -p "$dir"
python3 - "$n" "$len" "$seed" <<'PY' | mdb_load "$dir"
import random, sys
n, length, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
out = sys.stdout
out.write("VERSION=3\nformat=bytevalue\ntype=btree\n")
out.write("mapsize=%d\nHEADER=END\n" % (max(1 << 30, n * (length + 64) * 3)))
pool = rng.randbytes(length * 64 + 4096)
for i in range(n):
    start = rng.randrange(0, len(pool) - length)
    out.write(" " + ("%08d" % i).encode().hex() + "\n")
    out.write(" " + pool[start:start + length].hex() + "\n")
out.write("DATA=END\n")
PY
ls -l "$dir"

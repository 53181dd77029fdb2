"""Turns strace logs of one lmdbio run (strace --seccomp-bpf -f -ttt -T -e
trace=pread64 -o DIR/st.RANK, one per rank) into ops/ops.RANK: one
"OFFSET LENGTH" line per pread of the data file, in the order they began,
for replay.c. usage: python3 ops.py DIR"""
import glob
import os
import re
import sys

done = re.compile(r'(\d+)\s+([\d.]+) pread64\(\d+, .*?, (\d+), (\d+)\) = \d+ <([\d.]+)>')
began = re.compile(r'(\d+)\s+([\d.]+) pread64\(')
resumed = re.compile(r'(\d+)\s+([\d.]+) <\.\.\. pread64 resumed>.*?, (\d+), (\d+)\) = \d+ <([\d.]+)>')
os.makedirs('ops', exist_ok=True)
for path in sorted(glob.glob(os.path.join(sys.argv[1], 'st.*'))):
    rank = path.rsplit('.', 1)[1]
    reads, pending = [], {}
    for line in open(path):
        if m := done.match(line):
            reads.append((float(m[2]), int(m[4]), int(m[3])))
        elif m := resumed.match(line):
            reads.append((pending.pop(m[1], float(m[2]) - float(m[5])), int(m[4]), int(m[3])))
        elif m := began.match(line):
            pending[m[1]] = float(m[2])
    reads.sort()
    with open(f'ops/ops.{rank}', 'w') as out:
        for _, offset, length in reads:
            out.write(f'{offset} {length}\n')
    print(path, len(reads), 'reads', sum(r[2] for r in reads), 'bytes')

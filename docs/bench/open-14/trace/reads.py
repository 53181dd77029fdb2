"""Each reader's value reads in a trace: rate from its first read to its
last, and the gaps over 1 ms between one read's end and the next's start
(ms from the first rank's `open_start` of the last run traced)."""
import sys

from events import last_run

last, t0 = last_run(sys.argv[1])
for pid, es in sorted(last.items()):
    starts = [(u - t0) / 1000 for u, w in es if w.startswith('pread_start')]
    ends = [(u - t0) / 1000 for u, w in es if w.startswith('pread_end')]
    sizes = [int(w.split('len=')[1]) for u, w in es if w.startswith('pread_end')]
    if not starts:
        continue
    gaps = [(round(e, 1), round(s - e, 1)) for e, s in zip(ends, starts[1:]) if s - e > 1.0]
    index_pages = sum(1 for u, w in es if w.startswith('fpread') and w.endswith('len=4096'))
    mb = sum(sizes) / 1e6
    print(pid, f"reads {starts[0]:.1f}..{ends[-1]:.1f} ms, {mb:.0f} MB, "
          f"{mb * 1e3 / (ends[-1] - starts[0]):.0f} MB/s; index pages {index_pages}; gaps (at, ms) {gaps}")

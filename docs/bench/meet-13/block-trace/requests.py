"""Read requests in the bench database's data file, from a tracefs dump of
block_rq_issue and block_rq_complete: (issued, completed, bytes, sector).
The file's extents (512-byte sectors, "START END" per line) are in
/tmp/extents.txt (see ../commands.sh)."""
import re

EXTENTS = [tuple(map(int, l.split())) for l in open('/tmp/extents.txt')]
EVENT = re.compile(r'(\d+\.\d+): block_rq_(issue|complete): \S+ (\w+) (?:\d+ )?\(\) (\d+) \+ (\d+)')


def in_file(sector):
    return any(a <= sector < b for a, b in EXTENTS)


def load(path):
    issued, reqs = {}, []
    for line in open(path):
        m = EVENT.search(line)
        if not m:
            continue
        t, kind, rw, sec, n = float(m.group(1)), m.group(2), m.group(3), int(m.group(4)), int(m.group(5))
        if 'R' not in rw or n == 0 or not in_file(sec):
            continue
        if kind == 'issue':
            issued[sec] = (t, n)
        elif sec in issued:
            t0, n0 = issued.pop(sec)
            reqs.append((t0, t, n0 * 512, sec))
    return reqs

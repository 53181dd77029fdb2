"""Reading a trace (lines `TR usecs pid event`): each rank's events from
its last `open_start` on (the bench opens once per run), and the first
rank's `open_start` as time zero."""
import collections


def last_run(path):
    events = collections.defaultdict(list)
    for line in open(path):
        if line.startswith('TR '):
            _, usecs, pid, what = line.split(None, 3)
            events[pid].append((int(usecs), what.strip()))
    last = {}
    for pid, es in events.items():
        start = max(i for i, (_, what) in enumerate(es) if what == 'open_start')
        last[pid] = es[start:]
    return last, min(es[0][0] for es in last.values())

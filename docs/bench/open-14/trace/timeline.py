"""Each rank's opening and first steps in a trace (lines `TR usecs pid
event`), in ms from the first rank's `open_start` of the last run traced."""
import sys

from events import last_run

last, t0 = last_run(sys.argv[1])
for pid, es in sorted(last.items(), key=lambda kv: kv[1][0][0]):
    shown = []
    for usecs, what in es:
        if what.startswith(('fpread', 'pread_')):
            continue
        if what.startswith(('advance_start', 'served')) and not what.endswith((' t=0', ' t=1')):
            continue
        shown.append(f"{what}@{(usecs - t0) / 1000:.1f}")
    first_read = next((u for u, w in es if w.startswith('pread_start')), None)
    print(pid, f"first_value_read@{(first_read - t0) / 1000:.1f}" if first_read else '', ' '.join(shown))

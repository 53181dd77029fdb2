#!/usr/bin/env python3
"""Summarise a directory written by scripts/stage-bench.sh: a Markdown table
of MB/s by epoch per method and point (summary.md) and an SVG of throughput
by epoch per method, one panel per point (epochs.svg).

    scripts/plot-stage.py OUTDIR [--svg FILE] [--title TEXT]

Standard library only, so it runs wherever the benchmark runs.
"""

import argparse
import json
import math
import pathlib
import re
import statistics

# What each line of the plot and column of the table is, in this order.
SERIES = [
    ("lmdbio-global", "full", "lmdbio, stage, global shuffle", "#1f77b4", ""),
    ("lmdbio-global", "part", "the same, 1/N per node", "#17becf", "6,3"),
    ("lmdbio-nostage", "full", "lmdbio, no stage", "#9467bd", ""),
    ("lmdb-skip", "full", "lmdb-skip", "#d62728", ""),
    ("raw-stage", "full", "raw-stage (stage limit)", "#2ca02c", "2,3"),
    ("raw", "full", "raw (shared FS limit)", "#7f7f7f", "2,3"),
]
POINT = re.compile(r"^(full|part|epoch1)-p(\d+)-k(\d+)$")


def load(directory):
    """{(kind, P, K): (doc, load averages)} for every JSON in `directory`."""
    found = {}
    for path in sorted(directory.glob("*.json")):
        m = POINT.match(path.stem)
        if not m:
            continue
        with open(path) as f:
            doc = json.load(f)
        load_path = path.with_suffix(".load")
        loads = load_path.read_text().split("\n")[:2] if load_path.exists() else []
        found[(m[1], int(m[2]), int(m[3]))] = (doc, [x.split()[0] for x in loads if x])
    return found


def run_of(doc, method):
    return next((r for r in doc["runs"] if r["method"] == method), None)


def epochs_of(run):
    """MB/s by epoch; a run without per-epoch rows counts as every epoch."""
    per = sorted(run.get("per_epoch") or [], key=lambda e: e["epoch"])
    if per:
        return [e["mb_per_s"] for e in per]
    return [run["mb_per_s"]] * max(1, run.get("epochs", 1))


def mib(x):
    return f"{x / 1048576:.0f}"


def epoch1_pairs(doc):
    """Staged / unstaged epoch 1, repetition by repetition."""
    staged = [r["mb_per_s"] for r in doc["all_runs"] if r["method"] == "lmdbio"]
    plain = [r["mb_per_s"] for r in doc["all_runs"] if r["method"] == "lmdbio-nostage"]
    return [s / u for s, u in zip(staged, plain) if u > 0]


def summary(found):
    """One row per point: MB/s by epoch per method, MiB per node read from
    the database file by epoch, and the ratios issue 33 asks for."""

    def ep(kind, p, k, method):
        entry = found.get((kind, p, k))
        run = entry and run_of(entry[0], method)
        return (epochs_of(run), run) if run else ([], None)

    def by_epoch(values):
        return " / ".join(f"{v:.0f}" for v in values[:3]) or "–"

    lines = [
        "| P, K | load | raw, raw-stage | skip, ep. 1 | no stage | stage, global [MiB/node from the file] "
        "| 1/N per node [file; other nodes] | ep. 1 staged / unstaged: global; pairs | 2+ / raw-stage; / raw; 1/N: / raw |",
        "|---|---|---|---:|---|---|---|---|---|",
    ]
    for p, k in sorted({(p, k) for (_, p, k) in found}):
        full = found.get(("full", p, k))
        raw = ep("full", p, k, "raw")[0]
        rs = ep("full", p, k, "raw-stage")[0]
        skip = ep("full", p, k, "lmdb-skip")[0]
        plain = ep("full", p, k, "lmdbio-nostage")[0]
        staged, srun = ep("full", p, k, "lmdbio-global")
        part, prun = ep("part", p, k, "lmdbio-global")
        praw = ep("part", p, k, "raw")[0]

        def per_node(run, key):
            return " / ".join(mib(e[key]) for e in sorted(run.get("per_epoch") or [], key=lambda e: e["epoch"]))

        cells = [
            f"{p}, {k}",
            "–".join(next((e[1] for e in (full, found.get(("epoch1", p, k))) if e), [])),
            f"{raw[0]:.0f}, {rs[0]:.0f}" if raw and rs else "",
            f"{skip[0]:.0f}" if skip else "",
            by_epoch(plain),
            f"{by_epoch(staged)} [{per_node(srun, 'db_bytes_read_per_node')}]" if srun else "",
            f"{by_epoch(part)} [{per_node(prun, 'db_bytes_read_per_node')}; "
            f"{per_node(prun, 'remote_bytes_received_per_node')}]"
            if prun
            else "",
        ]
        e1 = found.get(("epoch1", p, k))
        pairs = epoch1_pairs(e1[0]) if e1 else []
        first = f"{staged[0] / plain[0]:.2f}" if staged and plain else ""
        if pairs:
            first += f"; {statistics.median(pairs):.2f} ({min(pairs):.2f}–{max(pairs):.2f})"
        cells.append(first)
        later = []
        if staged[1:] and rs:
            later.append(f"{min(staged[1:]) / rs[0]:.2f}")
        if staged[1:] and raw:
            later.append(f"{min(staged[1:]) / raw[0]:.2f}")
        if part[1:] and praw:
            later.append(f"1/N {min(part[1:]) / praw[0]:.2f}")
        cells.append("; ".join(later))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "MB/s by epoch. Pairs: epoch 1 of lmdbio with the stage over lmdbio-nostage, run by",
        "run (median, range). Epochs 2+ ratios take the slower epoch. Load: before, after.",
    ]
    return "\n".join(lines) + "\n"


def svg(found, title):
    points = sorted({(p, k) for (kind, p, k) in found if kind == "full"})
    cols = min(3, max(1, len(points)))
    rows = (len(points) + cols - 1) // cols
    pw, ph, left, top, legend = 210, 150, 46, 34, 74
    width = cols * (pw + left) + 10
    height = top + rows * (ph + 46) + legend
    # Log scale: epochs served from memory run at ten times the shared
    # file system's rate, and both must stay readable.
    lo, hi = 1e9, 1.0
    for (kind, p, k), (doc, _) in found.items():
        if kind in ("full", "part"):
            for r in doc["runs"]:
                lo, hi = min(lo, *epochs_of(r)), max(hi, *epochs_of(r))
    ticks = [t * m for m in (10, 100, 1000, 10000, 100000) for t in (1, 2, 5)]
    lo = max(t for t in ticks if t <= max(lo, 10))
    hi = min(t for t in ticks if t >= hi)
    ticks = [t for t in ticks if lo <= t <= hi]

    def ypos(y0, v):
        return y0 + ph - (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="10">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="12">{title}</text>',
    ]
    for i, (p, k) in enumerate(points):
        x0 = left + (i % cols) * (pw + left)
        y0 = top + (i // cols) * (ph + 46)
        out.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
        # Two cores: eight ranks (and their readers) are oversubscribed.
        over = ", 4 ranks per core" if p >= 8 else ""
        out.append(f'<text x="{x0 + pw / 2}" y="{y0 - 4}" text-anchor="middle">P = {p}, {k} per node{over}</text>')
        for v in ticks:
            y = ypos(y0, v)
            out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + pw}" y2="{y:.1f}" stroke="#eee"/>')
            out.append(f'<text x="{x0 - 4}" y="{y + 3:.1f}" text-anchor="end">{v:,}</text>')
        epochs = 3
        xs = [x0 + pw * (e + 0.5) / epochs for e in range(epochs)]
        for e, x in enumerate(xs):
            out.append(f'<text x="{x:.1f}" y="{y0 + ph + 12}" text-anchor="middle">{e + 1}</text>')
        for method, kind, _, colour, dash in SERIES:
            entry = found.get((kind, p, k))
            run = entry and run_of(entry[0], method)
            if not run:
                continue
            # The limits read one pass: a level line across the epochs.
            ys = [run["mb_per_s"]] * epochs if method.startswith("raw") else epochs_of(run)[:epochs]
            pts = " ".join(f"{xs[e]:.1f},{ypos(y0, v):.1f}" for e, v in enumerate(ys))
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.6"{dash_attr}/>')
            for e, v in enumerate(ys):
                out.append(f'<circle cx="{xs[e]:.1f}" cy="{ypos(y0, v):.1f}" r="2" fill="{colour}"/>')
    ly = top + rows * (ph + 46) + 4
    out.append(f'<text x="{left}" y="{ly}">MB/s (log scale) by epoch; the limits are one pass each</text>')
    for j, (_, _, label, colour, dash) in enumerate(SERIES):
        x = left + (j % 2) * 260
        y = ly + 16 + (j // 2) * 16
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{x}" y1="{y - 3}" x2="{x + 24}" y2="{y - 3}" stroke="{colour}" stroke-width="2"{dash_attr}/>')
        out.append(f'<text x="{x + 30}" y="{y}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=pathlib.Path)
    ap.add_argument("--svg", type=pathlib.Path, help="default OUTDIR/epochs.svg")
    ap.add_argument("--title", default="lmdbio node stage: MB/s by epoch, cold")
    args = ap.parse_args()
    found = load(args.outdir)
    if not found:
        raise SystemExit(f"no stage-bench JSON in {args.outdir}")
    (args.outdir / "summary.md").write_text(summary(found))
    (args.svg or args.outdir / "epochs.svg").write_text(svg(found, args.title))


if __name__ == "__main__":
    main()

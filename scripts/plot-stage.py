#!/usr/bin/env python3
"""Summarise a directory written by scripts/stage-bench.sh: a Markdown table
of MB/s by epoch per method and point (summary.md) and an SVG of throughput
by epoch per method, one panel per point (epochs.svg).

    scripts/plot-stage.py OUTDIR [--svg FILE] [--title TEXT]

Standard library only, so it runs wherever the benchmark runs.
"""

import argparse
import json
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
    points = sorted({(p, k) for (_, p, k) in found})
    lines = [
        "MB/s by epoch; [MiB per node from the database file / the stage / other nodes]",
        "",
        "| P, K | load | method | epoch 1 | 2 | 3 | read per node, by epoch |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for p, k in points:
        for method, kind, label, _, _ in SERIES:
            entry = found.get((kind, p, k))
            run = entry and run_of(entry[0], method)
            if not run:
                continue
            mbs = epochs_of(run)
            cells = [f"{v:.0f}" for v in mbs[:3]] + [""] * (3 - min(3, len(mbs)))
            reads = " ".join(
                f"[{mib(e['db_bytes_read_per_node'])}/{mib(e['stage_bytes_read_per_node'])}"
                f"/{mib(e['remote_bytes_received_per_node'])}]"
                for e in sorted(run.get("per_epoch") or [], key=lambda e: e["epoch"])
            )
            load = "–".join(entry[1])
            lines.append(f"| {p}, {k} | {load} | {label} | " + " | ".join(cells) + f" | {reads} |")
    lines += ["", "| P, K | staged / unstaged epoch 1 (global, full) | epochs 2+ / raw-stage | / raw | partitioned 2+ / raw | epoch 1 writer pairs (lmdbio) |", "|---|---:|---:|---:|---:|---|"]
    for p, k in points:
        full = found.get(("full", p, k))
        cells = ["", "", "", ""]
        if full:
            g, n = run_of(full[0], "lmdbio-global"), run_of(full[0], "lmdbio-nostage")
            rs, raw = run_of(full[0], "raw-stage"), run_of(full[0], "raw")
            if g and n:
                cells[0] = f"{epochs_of(g)[0] / epochs_of(n)[0]:.2f}"
            later = g and epochs_of(g)[1:]
            if later and rs:
                cells[1] = f"{min(later) / rs['mb_per_s']:.2f}"
            if later and raw:
                cells[2] = f"{min(later) / raw['mb_per_s']:.2f}"
        part = found.get(("part", p, k))
        if part:
            g, raw = run_of(part[0], "lmdbio-global"), run_of(part[0], "raw")
            later = g and epochs_of(g)[1:]
            if later and raw:
                cells[3] = f"{min(later) / raw['mb_per_s']:.2f}"
        e1 = found.get(("epoch1", p, k))
        pairs = epoch1_pairs(e1[0]) if e1 else []
        pair_text = (
            f"median {statistics.median(pairs):.2f} of " + ", ".join(f"{x:.2f}" for x in pairs)
            if pairs
            else ""
        )
        lines.append(f"| {p}, {k} | " + " | ".join(cells) + f" | {pair_text} |")
    lines += ["", "Ratios of epochs 2+ take the slower of them."]
    return "\n".join(lines) + "\n"


def svg(found, title):
    points = sorted({(p, k) for (kind, p, k) in found if kind == "full"})
    cols = min(3, max(1, len(points)))
    rows = (len(points) + cols - 1) // cols
    pw, ph, left, top, legend = 210, 150, 46, 34, 118
    width = cols * (pw + left) + 10
    height = top + rows * (ph + 46) + legend
    ymax = 1.0
    for (kind, p, k), (doc, _) in found.items():
        if kind in ("full", "part"):
            for r in doc["runs"]:
                ymax = max(ymax, *epochs_of(r))
    step = 10 ** len(str(int(ymax))) / 10
    while ymax / step > 6:
        step *= 2
    ymax = step * (int(ymax / step) + 1)
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
        over = " (oversubscribed)" if p > 2 * 2 and k >= 1 and p > 4 else ""
        out.append(f'<text x="{x0 + pw / 2}" y="{y0 - 4}" text-anchor="middle">P = {p}, {k} per node{over}</text>')
        v = 0
        while v <= ymax:
            y = y0 + ph - v / ymax * ph
            out.append(f'<line x1="{x0 - 3}" y1="{y:.1f}" x2="{x0}" y2="{y:.1f}" stroke="#999"/>')
            out.append(f'<text x="{x0 - 5}" y="{y + 3:.1f}" text-anchor="end">{v:.0f}</text>')
            v += step
        epochs = 3
        xs = [x0 + pw * (e + 0.5) / epochs for e in range(epochs)]
        for e, x in enumerate(xs):
            out.append(f'<text x="{x:.1f}" y="{y0 + ph + 12}" text-anchor="middle">{e + 1}</text>')
        for method, kind, _, colour, dash in SERIES:
            entry = found.get((kind, p, k))
            run = entry and run_of(entry[0], method)
            if not run:
                continue
            ys = epochs_of(run)[:epochs]
            pts = " ".join(f"{xs[e]:.1f},{y0 + ph - v / ymax * ph:.1f}" for e, v in enumerate(ys))
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.6"{dash_attr}/>')
            for e, v in enumerate(ys):
                out.append(f'<circle cx="{xs[e]:.1f}" cy="{y0 + ph - v / ymax * ph:.1f}" r="2" fill="{colour}"/>')
    ly = top + rows * (ph + 46) + 4
    out.append(f'<text x="{left}" y="{ly}">MB/s by epoch (x: epoch). Legend:</text>')
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

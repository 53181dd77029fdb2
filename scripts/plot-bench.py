#!/usr/bin/env python3
"""Summarise a directory of `lmdbio bench --json` files (one per rank count
and ranks-per-node, as scripts/bench-sweep.sh writes them): a Markdown table
(summary.md) and an SVG plot of throughput against ranks (throughput.svg).

Standard library only, so it runs wherever the benchmark runs.
"""

import argparse
import json
import math
import pathlib
import sys

COLOURS = {
    "raw": "#7f7f7f",
    "raw-node": "#bcbd22",
    "lmdb-skip": "#d62728",
    "lmdb-walk": "#ff7f0e",
    "lmdbio": "#1f77b4",
    "lmdbio-shuffled": "#9467bd",
    "lmdbio-scan": "#17becf",
}
DASHES = {1: "", 2: "6,4", 4: "2,3"}


def load(directory):
    runs = []
    for path in sorted(directory.glob("runs-*.json")):
        with open(path) as f:
            doc = json.load(f)
        for run in doc.get("runs", []):
            run["source"] = path.name
            runs.append(run)
    return runs


def fmt_ratio(v):
    return "-" if v is None else f"{v:.2f}"


def steady(run):
    """Throughput once the first batch is in: what a long job sees, with
    opening (communicators, index, windows) and the first read left out."""
    rest = run["seconds"] - run["time_to_first_batch_s"]
    return run["bytes_delivered"] / 1e6 / rest if rest > 0 else float("nan")


def time_ratio(run, runs, methods):
    """The best of `methods`' epoch time at the run's point over the run's:
    the same records in both, where MB/s would not compare (the raw methods
    count every byte of the file, the others only the values)."""
    point = (run["ranks"], run["ranks_per_node"])
    times = [
        r["seconds"]
        for r in runs
        if r["method"] in methods and (r["ranks"], r["ranks_per_node"]) == point
    ]
    return min(times) / run["seconds"] if times and run["seconds"] > 0 else None


def table(runs):
    mib = 1 << 20
    lines = [
        "| P | ranks/node | method | MB/s | MB/s after first batch | records/s | first batch (s) "
        "| read/node (MiB) | requests/node | opens/node | major faults/rank "
        "| peak RSS/rank (MiB) | / raw | / lmdb-skip | epoch time: limit's / this "
        "| lmdb-skip's / this |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    key = lambda r: (r["ranks"], r["ranks_per_node"])
    for r in sorted(runs, key=key):
        lines.append(
            f"| {r['ranks']} | {r['ranks_per_node']} | {r['method']} | {r['mb_per_s']:.0f} "
            f"| {steady(r):.0f} | {r['records_per_s']:.0f} | {r['time_to_first_batch_s']:.3f} "
            f"| {r['bytes_read_per_node'] / mib:.0f} | {r['read_requests_per_node']:.0f} "
            f"| {r['file_opens_per_node']:.0f} | {r['major_faults_per_rank']:.0f} "
            f"| {r['peak_rss_mib_per_rank']:.0f} | {fmt_ratio(r.get('ratio_to_raw'))} "
            f"| {fmt_ratio(r.get('ratio_to_lmdb_skip'))} "
            f"| {fmt_ratio(time_ratio(r, runs, ('raw', 'raw-node')))} "
            f"| {fmt_ratio(time_ratio(r, runs, ('lmdb-skip',)))} |"
        )
    return "\n".join(lines) + "\n"


def svg(runs, title):
    width, height = 760, 460
    left, right, top, bottom = 70, 190, 40, 50
    plot_w, plot_h = width - left - right, height - top - bottom
    ranks = sorted({r["ranks"] for r in runs})
    ymax = max((r["mb_per_s"] for r in runs), default=1.0) * 1.1 or 1.0
    lo, hi = math.log2(min(ranks)), math.log2(max(ranks))
    span = (hi - lo) or 1.0

    def x(p):
        return left + (math.log2(p) - lo) / span * plot_w

    def y(v):
        return top + plot_h - v / ymax * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="22" font-size="14">{escape(title)}</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="black"/>',
        f'<text x="{left + plot_w / 2}" y="{height - 10}" text-anchor="middle">MPI ranks (log scale)</text>',
        f'<text x="16" y="{top + plot_h / 2}" transform="rotate(-90 16 {top + plot_h / 2})" '
        f'text-anchor="middle">MB/s delivered (whole job)</text>',
    ]
    for p in ranks:
        out.append(f'<text x="{x(p):.1f}" y="{top + plot_h + 18}" text-anchor="middle">{p}</text>')
    for i in range(6):
        v = ymax * i / 5
        out.append(
            f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + plot_w}" y2="{y(v):.1f}" stroke="#eee"/>'
        )
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
    series = {}
    for r in runs:
        series.setdefault((r["method"], r["ranks_per_node"]), []).append((r["ranks"], r["mb_per_s"]))
    legend_y = top
    for (method, k), points in sorted(series.items()):
        points.sort()
        colour = COLOURS.get(method, "#000000")
        dash = DASHES.get(k, "1,2")
        path = " ".join(f"{x(p):.1f},{y(v):.1f}" for p, v in points)
        out.append(
            f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2" '
            f'stroke-dasharray="{dash}"/>'
        )
        for p, v in points:
            out.append(f'<circle cx="{x(p):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"/>')
        lx = left + plot_w + 15
        out.append(
            f'<line x1="{lx}" y1="{legend_y}" x2="{lx + 30}" y2="{legend_y}" stroke="{colour}" '
            f'stroke-width="2" stroke-dasharray="{dash}"/>'
        )
        out.append(f'<text x="{lx + 36}" y="{legend_y + 4}">{escape(method)}, {k}/node</text>')
        legend_y += 18
    out.append("</svg>")
    return "\n".join(out) + "\n"


def escape(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("directory", type=pathlib.Path)
    ap.add_argument("--title", default="lmdbio bench")
    args = ap.parse_args()
    runs = load(args.directory)
    if not runs:
        sys.exit(f"{args.directory}: no runs-*.json files with runs in them")
    (args.directory / "summary.md").write_text(table(runs))
    (args.directory / "throughput.svg").write_text(svg(runs, args.title))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Regenerates docs/scaling.png from `collx-topo simulate --json`.

Usage:
  python3 docs/plot_scaling.py [--collx-topo build/tools/collx-topo] [--json FILE] [--out docs/scaling.png]
                               [-- extra collx-topo simulate options, e.g. --net-gbps 200]

Runs collx-topo simulate --json (or reads --json FILE) and draws two panels: which algorithm the
model predicts fastest for each (GPU count, message size), and predicted bus bandwidth against GPU
count for each algorithm at two sizes. Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import math
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402


def size_name(b):
    for unit in ["B", "KiB", "MiB", "GiB", "TiB"]:
        if b < 1024:
            return f"{b:g} {unit}"
        b /= 1024
    return f"{b:g} PiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collx-topo", default="build/tools/collx-topo")
    ap.add_argument("--json", help="read this collx-topo simulate --json output instead of running it")
    ap.add_argument("--out", default="docs/scaling.png")
    ap.add_argument("extra", nargs="*", help="options passed to collx-topo simulate")
    a = ap.parse_args()
    if a.json:
        with open(a.json) as f:
            data = json.load(f)
    else:
        out = subprocess.run([a.collx_topo, "simulate", "--json", *a.extra], check=True, capture_output=True, text=True).stdout
        data = json.loads(out)
    res = data["results"]
    algos = ["ring", "tree", "hierarchical"]
    gpus = sorted({r["gpus"] for r in res})
    sizes = sorted({r["bytes"] for r in res})
    winner = {}
    bw = {}
    for r in res:
        bw[(r["algorithm"], r["gpus"], r["bytes"])] = r["busbw_GBps"]
        if r["winner"]:
            winner[(r["gpus"], r["bytes"])] = algos.index(r["algorithm"])

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2))
    colors = ["#4878d0", "#ee854a", "#6acc64"]
    grid = [[winner.get((g, s), math.nan) for g in gpus] for s in sizes]
    left.imshow(grid, origin="lower", aspect="auto", cmap=ListedColormap(colors), vmin=-0.5, vmax=2.5)
    for i, s in enumerate(sizes):
        for j, g in enumerate(gpus):
            w = winner.get((g, s))
            if w is not None:
                left.text(j, i, f"{bw[(algos[w], g, s)]:.0f}", ha="center", va="center", fontsize=7)
    left.set_xticks(range(len(gpus)), [str(g) for g in gpus])
    left.set_yticks(range(len(sizes)), [size_name(s) for s in sizes])
    left.set_xlabel("GPUs (8 per node)")
    left.set_ylabel("all-reduce size")
    left.set_title("fastest algorithm (cell: its busbw, GB/s)")
    for k, name in enumerate(algos):
        left.plot([], [], "s", color=colors[k], label=name, markersize=10)
    left.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)

    pick = [s for s in sizes if s in (32 << 20, 512 << 20, 8 << 30)] or sizes[-3:]
    styles = [":", "--", "-"]
    for k, name in enumerate(algos):
        for si, s in enumerate(pick):
            xs = [g for g in gpus if (name, g, s) in bw]
            if xs:
                right.plot(xs, [bw[(name, g, s)] for g in xs], styles[si % 3], color=colors[k], marker="o", markersize=3,
                           label=f"{name}, {size_name(s)}")
    right.set_xscale("log", base=2)
    right.set_xticks(gpus, [str(g) for g in gpus])
    right.set_xlabel("GPUs (8 per node)")
    right.set_ylabel("predicted busbw (GB/s)")
    right.set_title("predicted all-reduce bus bandwidth")
    right.grid(alpha=0.3)
    right.legend(fontsize=7, ncol=3, loc="lower left")
    net = "the node's own NICs" if data["net_gbps"] is None else f"{data['net_gbps']:g} Gb/s per NIC"  # null: --node FILE
    fig.suptitle(f"collx-topo simulate: {data['node']}, {net}", fontsize=11)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""PNG plots of bench/compare.py (matplotlib, Agg backend).

* ``ratio_vs_decode.png``: lossless compression ratio against single-thread decode
  GB/s, one panel per data set class, one colour per method; filled circles
  are row granularity, hollow squares 64 KiB blocks, triangles zstd's C batch.
  Points aggregate the class: total raw / total stored bytes, and total raw
  bytes / total decode time.
* ``savings_vs_threshold.png``: paper Fig. 12 shape, one panel per data set,
  one line per chunk size.
* ``sampling.png``: paper Table 5 as lines (ratio relative to 100 % sampled).
  ``clusters.png``: Fig. 14.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from studies import CHUNKS, CLUSTERS, SAMPLES, THRESHOLDS  # noqa: E402

PALETTE = plt.get_cmap("tab20").colors
#: Fixed colours, so a method keeps its colour from one run to the next.
FIXED = ("IBP (bmi2)", "IBP (portable)", "exp codec (sigma)", "exp codec (histogram)",
         "FP8 E4M3 (lossy)", "zstd -1", "zstd -3", "lz4", "blosc2 bitshuffle+lz4",
         "blosc2 bitshuffle+zstd", "bitshuffle+lz4 (bitshuffle pkg)", "ZipNN")
COLORS = {}


def _color(name: str):
    if name not in COLORS:
        i = FIXED.index(name) if name in FIXED else len(FIXED) + len(COLORS)
        COLORS[name] = PALETTE[i % len(PALETTE)]
    return COLORS[name]


def _grid(n: int, ncols: int = 3, w: float = 5.0, h: float = 3.8):
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False)
    flat = [a for row in axes for a in row]
    for a in flat[n:]:
        a.axis("off")
    return fig, flat[:n]


def ratio_vs_decode(results, path: Path) -> dict | None:
    """One panel per class: ratio against decode GB/s of every method."""
    agg = defaultdict(lambda: [0, 0, 0.0])  # (cls, method, gran, timing) -> raw, comp, dec_s
    for r in results:
        if not r.comp_bytes or r.dec_s is None or r.verified is not True:
            continue  # failed, not run, or lossy (FP8 is in the tables only)
        a = agg[(r.cls, r.method, r.granularity, r.timing)]
        a[0] += r.raw_bytes
        a[1] += r.comp_bytes
        a[2] += r.dec_s
    if not agg:
        return None
    classes = sorted({k[0] for k in agg})
    fig, axes = _grid(len(classes), ncols=2, w=6.5, h=4.8)
    for ax, cls in zip(axes, classes):
        for (c, method, gran, timing), (raw, comp, dec_s) in sorted(agg.items()):
            if c != cls:
                continue
            x, y = raw / dec_s / 1e9, raw / comp
            row = gran == "row"
            marker = "^" if timing == "C batch" else ("o" if row else "s")
            col = _color(method)
            ax.scatter([x], [y], marker=marker, s=55, color=col if row else "none",
                       edgecolors=col, linewidths=1.5, zorder=3)
        ax.set_xscale("log")
        ys = [raw / comp for (c, *_), (raw, comp, _d) in agg.items() if c == cls]
        if max(ys) / max(min(ys), 1e-9) > 10:
            ax.set_yscale("log")
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_title(cls)
        ax.set_xlabel("decode GB/s (1 thread, log)")
        ax.set_ylabel("compression ratio")
        ax.grid(True, which="both", alpha=0.3)
    used = sorted(COLORS, key=lambda m: FIXED.index(m) if m in FIXED else len(FIXED))
    handles = [plt.Line2D([], [], marker="o", ls="", color=COLORS[m], label=m) for m in used]
    handles += [plt.Line2D([], [], marker="o", ls="", color="k", label="row, per-row call"),
                plt.Line2D([], [], marker="^", ls="", color="k", label="row, C batch (zstd)"),
                plt.Line2D([], [], marker="s", ls="", color="k", markerfacecolor="none",
                           label="64 KiB blocks")]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("Lossless ratio against single-thread decode speed (Python-looped methods "
                 "include per-call overhead; FP8 is lossy and left out)", fontsize=10)
    fig.tight_layout(rect=(0, 0.05 + 0.02 * math.ceil(len(handles) / 4), 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return dict(path=path, title="Ratio against decode speed per data set class")


def savings_vs_threshold(fig12, sets, path: Path) -> dict | None:
    """Paper Fig. 12 shape: savings against T, a line per chunk size."""
    names = [n for n, res in fig12.items() if any("savings" in r for r in res.values())]
    if not names:
        return None
    fig, axes = _grid(len(names), ncols=3, w=4.6, h=3.4)
    for ax, name in zip(axes, names):
        res = fig12[name]
        for c in CHUNKS:
            xs = [t for t in THRESHOLDS if "savings" in res.get((c, t), {})]
            ys = [res[(c, t)]["savings"] for t in xs]
            ax.plot(xs, ys, marker="o", ms=3, label=f"{c} B")
        ax.axhline(0, color="grey", lw=0.8, ls=":")
        s = sets[name]
        ax.set_title(f"{name}\n{s['rows']} x {s['row_bytes']} B", fontsize=9)
        ax.set_xlabel("threshold T/N")
        ax.set_ylabel("savings %")
        ax.grid(alpha=0.3)
        ax.legend(title="chunk", fontsize=7, title_fontsize=7)
    fig.suptitle("IBP savings against threshold per chunk size (paper Fig. 12 shape)")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return dict(path=path, title="Savings against threshold per chunk size (Fig. 12 shape)")


def sampling(table5, path: Path) -> dict | None:
    names = [n for n, res in table5.items() if any("ratio" in r for r in res.values())]
    if not names:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for n in names:
        xs = [f for f in SAMPLES if "ratio" in table5[n].get(f, {})]
        full = table5[n].get(1.0, {}).get("ratio")
        if not full:
            continue
        ax.plot([100 * f for f in xs], [table5[n][f]["ratio"] / full for f in xs], marker="o",
                label=f"{n} (100%: {full:.3g}x)")
    ax.set_xscale("log")
    ax.set_xlabel("rows sampled for training (%)")
    ax.set_ylabel("ratio / ratio with 100% sampled")
    ax.set_title("Sampling fraction (paper Table 5 shape); chunk 4 B, T 0.80")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return dict(path=path, title="Ratio against sampling fraction (Table 5 shape)")


def clusters(fig14, path: Path) -> dict | None:
    names = [n for n, res in fig14.items() if any("savings" in r for r in res.values())]
    if not names:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for n in names:
        xs = [k for k in CLUSTERS if "savings" in fig14[n].get(k, {})]
        ax.plot(xs, [fig14[n][k]["savings"] for k in xs], marker="o", label=n,
                ls="--" if n.startswith("synthetic") else "-")
    ax.set_xscale("log", base=2)
    ax.axhline(0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("clusters k")
    ax.set_ylabel("net savings % (metadata counted)")
    ax.set_title("Clustered compression (paper Fig. 14 shape); chunk 4 B, T 0.80")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return dict(path=path, title="Net savings against number of clusters (Fig. 14 shape)")


def make_all(results, study, out_dir: Path, prefix: str = "") -> list[dict]:
    """Write every plot that has data (names start with ``prefix``); returns [{path, title}]."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    made = [ratio_vs_decode(results, out_dir / f"{prefix}ratio_vs_decode.png")]
    if study:
        made.append(savings_vs_threshold(study["fig12"], study["sets"],
                                         out_dir / f"{prefix}savings_vs_threshold.png"))
        made.append(sampling(study["table5"], out_dir / f"{prefix}sampling.png"))
        made.append(clusters(study["fig14"], out_dir / f"{prefix}clusters.png"))
    return [m for m in made if m]

"""``--plot``: a PNG timeline (one row per unit, one bar per block) drawn with matplotlib."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_timeline(result: Any, path: str | Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows: dict[str, list[tuple[float, float]]] = {}
    kinds: dict[str, list[str]] = {}
    names = {}
    for r in result.records:
        if not r.blocks:
            continue
        u = r.inst.executor
        key = f"DMA{u[1]}" if u[0].name == "DMA" else f"TPB{u[1]}.{u[0].name}"
        names[key] = u
        for s, e in r.blocks:
            rows.setdefault(key, []).append((s, max(e - s, 1e-9)))
            kinds.setdefault(key, []).append(r.inst.MNEMONIC)
    order = sorted(rows, key=lambda k: (names[k][0].name == "DMA", names[k][1], int(names[k][0])))
    colors = {"tcu.matmul": "tab:red", "tcu.conv2d": "tab:orange", "cvu.pipeline": "tab:green",
              "dtdu.copy": "tab:blue", "dtdu.fill": "tab:cyan", "dtdu.broadcast": "tab:purple",
              "csu.call": "tab:brown", "ccb.dma": "tab:gray"}
    fig, ax = plt.subplots(figsize=(12, 0.4 * len(order) + 1.5))
    for y, key in enumerate(order):
        ax.broken_barh(rows[key], (y - 0.4, 0.8),
                       facecolors=[colors.get(k, "k") for k in kinds[key]], edgecolor="white",
                       linewidth=0.3)
    ax.set_yticks(range(len(order)), order)
    ax.invert_yaxis()
    ax.set_xlabel("cycles")
    ax.set_title(f"m100-sim timeline ({result.stats.get('total_cycles', 0):.0f} cycles)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, list(colors), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

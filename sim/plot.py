"""``--plot``: a PNG timeline (one row per unit, one bar per block) drawn with matplotlib.

:func:`draw_timeline` draws onto a given matplotlib Axes (the research API and the notebooks use
it for side-by-side figures); :func:`plot_timeline` writes the PNG of ``m100-sim --plot``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLORS = {"tcu.matmul": "tab:red", "tcu.conv2d": "tab:orange", "cvu.pipeline": "tab:green",
          "dtdu.copy": "tab:blue", "dtdu.fill": "tab:cyan", "dtdu.broadcast": "tab:purple",
          "csu.call": "tab:brown", "ccb.dma": "tab:gray"}


def draw_timeline(result: Any, ax: Any, title: str | None = None, legend: bool = True) -> None:
    """One row per unit (TPB units, then the CCB DMA engines), one bar per executed block."""
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
    for y, key in enumerate(order):
        ax.broken_barh(rows[key], (y - 0.4, 0.8),
                       facecolors=[COLORS.get(k, "k") for k in kinds[key]], edgecolor="white",
                       linewidth=0.3)
    ax.set_yticks(range(len(order)), order)
    ax.invert_yaxis()
    ax.set_xlabel("cycles")
    ax.set_title(title if title is not None
                 else f"m100-sim timeline ({result.stats.get('total_cycles', 0):.0f} cycles)")
    if legend:
        handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
        ax.legend(handles, list(COLORS), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)


def plot_timeline(result: Any, path: str | Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len({r.inst.executor for r in result.records if r.blocks})
    fig, ax = plt.subplots(figsize=(12, 0.4 * n + 1.5))
    draw_timeline(result, ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

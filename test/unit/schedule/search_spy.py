"""The segments a placement costs: ``Search.cost`` watched during ``placement.schedule`` (the
floors' tests check a bound against the full build of every one of them)."""

from __future__ import annotations

import math

from m100.passes.schedule import placement
from m100.passes.schedule.examples import GraphBuilder
from m100.passes.schedule.search import Search


def costed_segments(monkeypatch, g, machine, tpbs: int) -> list:
    """Every distinct segment configuration ``placement.schedule(g, machine, tpbs=tpbs)`` asks
    ``Search.cost`` for, in first-asked order."""
    seen = []
    orig = Search.cost

    def spy(self, seg, bound=math.inf):
        seen.append(seg)
        return orig(self, seg, bound)

    monkeypatch.setattr(Search, "cost", spy)
    placement.schedule(g, machine, tpbs=tpbs)
    monkeypatch.undo()
    return list(dict.fromkeys(seen))


def gemm(m: int, k: int, n: int, runtime_b: bool = False):
    """The op graph of one ``[m, k] @ [k, n]`` (``b`` an initializer, or a graph input)."""
    b = GraphBuilder()
    a = b.input((m, k), "a")
    if runtime_b:
        return b.output(b.matmul(a, n, b.input((k, n), "b")))
    return b.output(b.matmul(a, n))

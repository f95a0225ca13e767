"""The segments a placement costs: ``Search.cost`` watched during ``placement.schedule`` (the
floors' tests check a bound against the full build of every one of them)."""

from __future__ import annotations

import math

from m100.passes.schedule import placement
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


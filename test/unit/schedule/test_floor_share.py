"""Search floors shared between segments of the same structure (issue 15, compile speed).

``Search.cost`` asks :func:`.search_floor.busy_floor` and :func:`.search_dma_floor.dma_floor` of
a bounded candidate before building it; :meth:`.search.Search._floors` keeps their values per
one-stage segment structure (the op's ``op_key`` + where its tensors live), so a repeated block's
candidates reuse them. Oracles: a fresh floor of every candidate that was answered from the memo,
and the whole placement with the sharing off (``_unshared``: each segment's floors computed for
it, what the switch ``SHARE_FLOORS = False`` did until session 30).
"""

from m100.passes.schedule import placement, search
from m100.passes.schedule.search_dma_floor import dma_floor
from m100.passes.schedule.search_floor import busy_floor
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def _unshared(self, seg):
    """``Search._floors`` without the sharing: a fresh entry for every segment."""
    return [None, None]


def test_shared_floors_are_fresh_floors(resnet_graph, monkeypatch):
    g = resnet_graph
    floors = search.Search._floors
    seen: dict[int, tuple] = {}  # id of a memo entry -> (it, the first segment it was made for)
    reused = []

    def spy(self, seg):
        fl = floors(self, seg)
        first = seen.setdefault(id(fl), (fl, seg))  # (the entry kept alive: ids stay unique)
        if first[1] != seg:
            reused.append((self, seg, fl))
        return fl

    monkeypatch.setattr(search.Search, "_floors", spy)
    pl = placement.schedule(g, M100, tpbs=8)
    checked = 0
    for s, seg, fl in reused:
        if fl[0] is not None:
            assert fl[0] == busy_floor(s.sched, seg), seg
            checked += 1
        if fl[1] is not None:
            assert fl[1] == dma_floor(s.sched, seg), seg
            checked += 1
    assert checked >= 20  # the repeated blocks' candidates took their floors from the memo
    monkeypatch.setattr(search.Search, "_floors", _unshared)
    plain = placement.schedule(g, M100, tpbs=8)
    assert pl.segments == plain.segments
    assert pl.timeline.to_json() == plain.timeline.to_json()

"""Shortcuts of the plan builder that must not change any plan (issue 15, compile speed).

* ``ListScheduler.engine_bound``: a DMA transfer is put on the CCB DMA engine where its data
  ends first; an engine whose lower bound (it can not start before the transfer's dependencies
  allow, nor stream before that start + its setup and latency) does not beat the best engine so
  far is not asked. Oracle: the same placement with every engine asked -- the whole plan
  (search, refinements, kept activations) equal task by task (``Plan.to_json``).
* ``keep.kept_bytes`` is memoized per scheduler: the memo's answer equals a fresh computation.
"""

from m100.passes.schedule import placement
from m100.passes.schedule.keep import _kept_bytes, kept_bytes
from m100.passes.schedule.list_schedule import ListScheduler
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def test_engine_bound_gives_the_same_plan(resnet_graph, monkeypatch):
    g = resnet_graph
    fast = placement.schedule(g, M100, tpbs=8)
    monkeypatch.setattr(ListScheduler, "engine_bound", False)
    plain = placement.schedule(g, M100, tpbs=8)
    assert any(t.unit == "dma" for t in fast.timeline.tasks)
    assert fast.segments == plain.segments
    assert fast.timeline.to_json() == plain.timeline.to_json()


def test_kept_bytes_memo_is_a_fresh_computation(resnet_graph):
    g = resnet_graph
    pl = placement.schedule(g, M100, tpbs=8)
    s = placement.Search(g, M100, placement.available_tpbs(M100, 8)).sched
    n = 0
    for seg in pl.segments:
        if seg.kind == "dma":
            continue
        for st in seg.stages:
            op = s.ops[st.op]
            tplan = s.stage_plan(seg, st)
            want = _kept_bytes(s, seg, st, op, tplan)
            assert kept_bytes(s, seg, st, op, tplan) == want  # computed
            assert kept_bytes(s, seg, st, op, tplan) == want  # memoized
            n += 1
    assert n >= 10 and s.kept_memo

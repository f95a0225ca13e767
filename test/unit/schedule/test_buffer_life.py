"""The HBSM buffer lifetimes a whole-plan build records (``PlanBuilder.segment``).

Every TPB of a compute segment's stage holds each buffer of its stage's tile plan from the first
start to the last end of the segment's tasks that run on it or write into it (``tpb`` or
``dst_tpbs``); a TPB with no such task holds them for the segment's span. Oracle: those minima and
maxima taken again from the plan's tasks, per segment and TPB.
"""

from m100.passes.schedule import placement
from m100.targets.m100.machine import get_machine

from .test_shared_costs import _graph

M100 = get_machine("m100")


def test_buffer_lifetimes_are_the_tasks_span_per_tpb():
    from m100.frontend import models
    g = _graph(models.resnet18(hw=32, num_classes=10))
    pl = placement.schedule(g, M100, tpbs=8)
    tl = pl.timeline
    by_seg: dict[int, list] = {}
    for t in tl.tasks:
        by_seg.setdefault(t.segment, []).append(t)
    want = []
    for si, seg in enumerate(tl.segments):
        if seg.kind == "dma":
            continue
        tasks = by_seg.get(si, [])
        span = tl.seg_spans[si]
        for st in seg.stages:
            for tp in st.tpbs:
                on = [t for t in tasks if t.tpb == tp or tp in t.dst_tpbs]
                a = min(t.start for t in on) if on else span[0]
                e = max(t.end for t in on) if on else span[1]
                for buf in tl.plans[st.op].buffers:
                    want.append((tp, f"{st.op}.{buf.role}", st.op, buf.role, buf.slot_bytes,
                                 buf.slots, buf.unit, a, e))
    got = [(b.tpb, b.name, b.op, b.role, b.slot_bytes, b.slots, b.unit, b.start, b.end)
           for b in tl.buffers]
    assert len(want) > 100
    assert sorted(got) == sorted(want)

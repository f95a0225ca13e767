"""The HBSM buffer lifetimes a whole-plan build records (``PlanBuilder.segment``).

Every TPB of a compute segment's stage holds each buffer of its stage's tile plan from the first
start to the last end of the segment's tasks that run on it or write into it (``tpb`` or
``dst_tpbs``); a TPB with no such task holds them for the segment's span. Oracle: those minima and
maxima taken again from the plan's tasks, per segment and TPB.
"""

import pytest

from m100.passes.schedule import build_segments, placement, resume
from m100.passes.schedule.plan import BufferUse
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


def _eager(bld, start, seg, span):
    """The builder's buffer records as ``PlanBuilder.segment`` made them up to session 31, right
    after a compute segment's build (written out: the reference of :attr:`Plan.buffers`, which
    makes them from ``Plan.buf_segs`` when asked)."""
    first, last = {}, {}
    for t in bld.tl.tasks[start:]:
        a, e = t.start, t.end
        for tp in ([t.tpb] if t.tpb >= 0 else []) + list(t.dst_tpbs):
            if tp not in first:
                first[tp], last[tp] = a, e
            else:
                first[tp], last[tp] = min(first[tp], a), max(last[tp], e)
    out = []
    for st in seg.stages:
        for tp in st.tpbs:
            a, e = (first[tp], last[tp]) if tp in first else span
            for buf in bld.tl.plans[st.op].buffers:
                out.append(BufferUse(tp, f"{st.op}.{buf.role}", st.op, buf.role,
                                     buf.slot_bytes, buf.slots, buf.unit, a, e))
    return out


def _count(tl):
    return sum(len(st.tpbs) * len(p.buffers) for _, _, seg, plans, _ in tl.buf_segs
               for st, p in zip(seg.stages, plans))


@pytest.mark.parametrize("which", ["resnet18-32", "prefill-heads"])
def test_buffers_made_when_asked_are_the_builder_records(which, monkeypatch):
    """Every segment of every whole-plan build of a placement (the trials, the resumed builds
    with their copied prefixes, the stopped ones) adds to ``Plan.buffers`` exactly the records
    the builder made of it before session 32, in order; the 4-head W8A8 prefill layer has late
    stores (a segment's build holds the stores of the one before it)."""
    if which == "resnet18-32":
        from m100.frontend import models
        g, n = _graph(models.resnet18(hw=32, num_classes=10)), 8
    else:
        from .test_side_by_side import _prefill_graph
        g, n = _prefill_graph(), 8
    orig = build_segments.PlanBuilder.segment
    seen = {"segs": 0, "resumed": 0, "late": 0}
    # plan id -> (the plan, the records the builder made of its segments so far, a resumed plan's
    # prefix taken from the checkpoint's): the plans stay alive, so their ids are not reused
    ref: dict[int, tuple] = {}

    def records(tl):
        return ref.setdefault(id(tl), (tl, []))[1]

    def spy(self, si, seg, isolated):
        start = len(self.tl.tasks)
        if self.late[0]:
            seen["late"] += 1
        orig(self, si, seg, isolated)
        if isolated or self.search_only:
            return
        if seg.kind != "dma":
            records(self.tl).extend(_eager(self, start, seg, self.tl.seg_spans[si]))
            seen["segs"] += 1
        assert self.tl.buffers == records(self.tl), (si, seg)

    monkeypatch.setattr(build_segments.PlanBuilder, "segment", spy)
    take, restore = resume.Checkpoint.take, resume.Checkpoint.restore

    def tspy(bld, index, segs, max_end=None):
        cp = take(bld, index, segs, max_end)
        ref[id(cp.plan)] = (cp.plan, list(records(bld.tl)))
        return cp

    def rspy(self, bld, segs):
        restore(self, bld, segs)
        ref[id(bld.tl)] = (bld.tl, list(records(self.plan)))
        seen["resumed"] += 1

    monkeypatch.setattr(resume.Checkpoint, "take", staticmethod(tspy))
    monkeypatch.setattr(resume.Checkpoint, "restore", rspy)
    pl = placement.schedule(g, M100, tpbs=n)
    assert seen["segs"] > 50 and seen["resumed"] > 0
    if which == "prefill-heads":
        assert seen["late"] > 0
    assert pl.timeline.buffers == pl.timeline.buffers and len(pl.timeline.buffers) > 100

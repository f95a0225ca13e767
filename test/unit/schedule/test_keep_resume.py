"""``keep._choose`` resumes from an earlier greedy run whose first segments are this call's
(session 33): every call of whole placements -- the keep modes, the trials of unchunk /
weights_once / pipe_starts / side_by_side in their keep mode, the ``all-mm`` second pass --
gives the kept set and the ``use`` dict (items in order) of the pass as it was, written out below
as the oracle; and the resumes happen (decisions taken from an earlier run's trace). Mutants
caught: a decision replayed while its reads reach the first changed segment (``>`` for ``>=``),
the readers' segments not counted in ``R``, a reader in no segment counted as the producer's own
segment (``R = si`` instead of past the end), the segments' footprints halved in the fit check."""

from __future__ import annotations

from dataclasses import replace

import pytest

from m100.passes.schedule import keep, placement
from m100.passes.schedule.keep import (KEEP_UNITS, _post_in_place, _reads_kept, _view_readers,
                                       kept_bytes, piece_elems, post_reader, row_roots)
from m100.passes.schedule.segment import reads_whole, streamable
from m100.targets.m100.machine import get_machine


def _choose_reference(s, segs, cap, one_stage, matmul, kept, use):
    """``keep._choose`` before session 33 (every call runs the whole greedy)."""
    g = s.g
    seg_of = {}
    plans = {}
    foot = {}
    for si, seg in enumerate(segs):
        if seg.kind == "dma":
            continue
        for st in seg.stages:
            seg_of[st.op] = si
            plans[st.op] = p = s.stage_plan(seg, st)
            for x in st.tpbs:
                foot[(x, si)] = foot.get((x, si), 0) + p.footprint
    stage = {st.op: (si, seg, st) for si, seg in enumerate(segs) if seg.kind != "dma"
             for st in seg.stages}
    cons = g.consumers()
    kept, use = set(kept), dict(use)
    for si, seg in enumerate(segs):
        if seg.kind == "dma":
            continue
        ops = set(seg.ops)
        for st in seg.stages:
            op = s.ops[st.op]
            t = op.outputs[0]
            if op.name in kept or len(op.outputs) != 1 or op.unit not in KEEP_UNITS or \
                    op.attrs.get("layout") == "nchw" or g.tensors[t].kind != "act" or \
                    st.act_resident:
                continue
            users = cons.get(t, [])
            vread = _view_readers(g, cons, t, ops) if t in row_roots(g) else []
            if vread is None:
                continue
            users = [u for u in users if u.name not in g.view_ops] if vread else users
            later = [(u, t) for u in users if u.name not in ops] + vread
            if not later or any(reads_whole(u, t) and not post_reader(u, t) for u in users) or \
                    any(reads_whole(u, v) for u, v in vread):
                continue
            ok = True
            last = si
            flat = piece_elems(g, op, s.geo(op)) == 1 and len(g.tensors[t].shape) == 2
            free = {}
            for u, v in later:
                post = post_reader(u, v) and flat
                if u.name not in stage or seg_of[u.name] <= si or \
                        not (post or streamable(g, u, v)):
                    ok = False
                    break
                usi, useg, ust = stage[u.name]
                if (not post and not _reads_kept(s, useg, ust, plans, flat, matmul)) or \
                        (one_stage and len(useg.stages) > 1) or (v != t and ust.gc != 1):
                    ok = False
                    break
                if post:
                    pin = _post_in_place(s, seg, st, op, useg, ust, plans)
                    for x in (ust.tpbs if pin else ()):
                        free[(x, usi)] = free.get((x, usi), 0) + pin
                last = max(last, usi)
            if not ok:
                continue
            held = kept_bytes(s, seg, st, op, plans[st.op])
            own = sum(b.nbytes for b in plans[st.op].buffers if b.role == "out")

            def more(x, nb, q):
                return max(0, nb - own) if q == si else max(0, nb - free.get((x, q), 0))
            if any(foot.get((x, q), 0) + use.get((x, q), 0) + more(x, nb, q) > cap
                   for x, nb in held.items() for q in range(si, last + 1)):
                continue
            kept.add(op.name)
            for x, nb in held.items():
                for q in range(si, last + 1):
                    use[(x, q)] = use.get((x, q), 0) + (nb if q == si else more(x, nb, q))
    return kept, use


def _spy(monkeypatch):
    """Wrap ``keep._choose``: each call checked against the reference; returns the counters
    (calls, calls that took decisions from an earlier run, decisions taken)."""
    real = keep._choose
    n = {"calls": 0, "resumed": 0, "taken": 0, "kept": 0}
    seen: set[int] = set()

    def spy(s, segs, cap, one_stage, matmul, kept, use):
        want = _choose_reference(s, segs, cap, one_stage, matmul, kept, use)
        got = real(s, segs, cap, one_stage, matmul, kept, use)
        assert got[0] == want[0]
        assert list(got[1].items()) == list(want[1].items())
        trace = s._keep_runs[(cap, one_stage, matmul)][-1][2]
        taken = sum(1 for e in trace if id(e) in seen)
        seen.update(id(e) for e in trace)
        n["calls"] += 1
        n["resumed"] += taken > 0
        n["taken"] += taken
        n["kept"] += len(got[0]) > len(kept)
        return got
    monkeypatch.setattr(keep, "_choose", spy)
    return n


def _resnet18_64():
    from m100.frontend import models

    from .test_weights_once import _graph
    return _graph(models.resnet18(hw=64))


@pytest.mark.parametrize("case", ["resnet18-64", "prefill-w8a8"])
def test_every_call_of_a_placement_is_the_whole_greedy(case, monkeypatch):
    if case == "resnet18-64":
        graph, tpbs = _resnet18_64(), 0
    else:
        from .test_side_by_side import _prefill_graph
        graph, tpbs = _prefill_graph(), 8
    n = _spy(monkeypatch)
    placement.schedule(graph, get_machine("m100"), tpbs=tpbs)
    assert n["calls"] >= 6 and n["kept"] >= 1, n
    assert n["resumed"] >= 1 and n["taken"] >= 10, n


def test_a_segment_replaced_at_every_index(monkeypatch):
    """The final segments of ResNet-18 64 with one segment at a time replaced by an equal copy
    (a new object: the runs before it may be taken, none after it), then by its neighbour's
    configuration where that is another compute segment (other stages, other readers), in all
    three keep modes and at smaller HBSM shares: each call equals the whole greedy."""
    seen = []
    monkeypatch.setattr(placement, "keep_activations",
                        lambda sched, segs, tl: seen.append((sched, segs)) or (tl, ""))
    placement.schedule(_resnet18_64(), get_machine("m100"))
    sched, segs = seen[0]
    n = _spy(monkeypatch)
    full = int(sched.cm.machine.hbsm_bytes * sched.prefetch_share)
    # (smaller HBSM shares: the fit check refuses some tensors, and which depends on the
    # footprints and the kept bytes before)
    for cap, mode in [(full, m) for m in ("one-stage", "all", "all-mm")] + \
            [(full // 5, "all"), (full // 8, "all-mm"), (full // 5, "one-stage")]:
        keep.choose_kept(sched, segs, cap, mode == "one-stage", mode == "all-mm")
        for j in range(len(segs)):
            trial = list(segs)
            trial[j] = replace(segs[j])
            keep.choose_kept(sched, trial, cap, mode == "one-stage", mode == "all-mm")
        for j in range(len(segs) - 1):
            if segs[j].kind == "dma" or segs[j + 1].kind == "dma":
                continue
            trial = list(segs)
            trial[j], trial[j + 1] = segs[j + 1], segs[j]  # two stages moved: both change
            try:
                keep.choose_kept(sched, trial, cap, mode == "one-stage", mode == "all-mm")
            except Exception as e:  # a tiling that does not fit: both sides alike
                with pytest.raises(type(e)):
                    _choose_reference(sched, trial, cap, mode == "one-stage", False, set(), {})
        for j in range(len(segs)):
            # segment j left out (its readers are in no segment: read of the whole list), then
            # the whole list resumed from that run alone (its first j segments are the same)
            sched._keep_runs.clear()
            keep.choose_kept(sched, segs[:j] + segs[j + 1:], cap, mode == "one-stage",
                             mode == "all-mm")
            keep.choose_kept(sched, segs, cap, mode == "one-stage", mode == "all-mm")
    assert n["resumed"] >= len(segs) and n["kept"] >= 1, n

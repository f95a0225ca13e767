"""Vector pipelines tried at their greedy start in the whole plan (``pipe_starts``, session 18:
the LLaMA2-7B layer's residual + norm + quantize pipeline, co-located on 56 TPBs by the local
search, costs the layer ~0.1 M cycles; docs/llm.md).

A residual add + LayerNormalization (a pipeline of vector stages); the test spoils the search's
pipeline (every stage on one TPB, one band, as a local search costing it alone could keep) and
checks: the refinement gives it the greedy start (TPBs in proportion to the stages' work), the
plan is shorter and is what a fresh build of the returned segments gives; the greedy start
itself is no trial; the compiled program matches numpy's layer norm.
"""

from dataclasses import replace

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.passes.schedule import placement

M, H = 256, 1024


def _model(rng):
    g_ = rng.standard_normal(H).astype(np.float16)
    b_ = rng.standard_normal(H).astype(np.float16)
    nodes = [helper.make_node("Add", ["x", "r"], ["h"]),
             helper.make_node("LayerNormalization", ["h", "g", "b"], ["y"], axis=-1,
                              epsilon=1e-5)]
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "pipe", [vi("x", TensorProto.FLOAT16, [M, H]),
                                          vi("r", TensorProto.FLOAT16, [M, H])],
                          [vi("y", TensorProto.FLOAT16, [M, H])],
                          [numpy_helper.from_array(g_, "g"), numpy_helper.from_array(b_, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m, g_, b_


def _start(s, seg):
    ops = [s.ops[st.op] for st in seg.stages]
    state, _ = s._pipe_start(ops)
    return s._pipe_cfg(ops, *state)


def test_a_spoiled_vector_pipeline_gets_its_greedy_start(monkeypatch):
    from m100.tools import driver
    rng = np.random.default_rng(5)
    model, g_, b_ = _model(rng)
    seen = []
    orig = placement.pipe_starts

    def spy(s, segs, tl, keep):
        pi = [i for i, seg in enumerate(segs) if seg.kind == "pipeline"]
        assert len(pi) == 1 and len(segs[pi[0]].stages) > 1
        start = _start(s, segs[pi[0]])
        # the greedy start itself: no trial, nothing changes
        same = list(segs)
        same[pi[0]] = start
        tls = s.sched.build(same, keep=keep)
        calls = []
        monkeypatch.setattr(s.sched, "shorter", lambda *a, **k: calls.append(1))
        assert orig(s, same, tls, keep) == (same, tls, keep) and not calls
        monkeypatch.undo()
        bad = list(segs)
        seg = bad[pi[0]]
        one = seg.stages[0].tpbs[:1]
        bad[pi[0]] = replace(seg, stages=tuple(replace(st, tpbs=one, gc=1, bands=1)
                                               for st in seg.stages))
        tlb = s.sched.build(bad, keep=keep)
        out = orig(s, bad, tlb, keep)
        seen.append((s, tlb, keep, start, pi[0], out))
        return out
    monkeypatch.setattr(placement, "pipe_starts", spy)
    prog = driver.compile(model, machine="m100").program
    (s, tlb, keep, start, si, (segs, tl, mode)), = seen
    assert segs[si] == start
    assert tl.makespan < tlb.makespan
    assert s.sched.build(segs, keep=mode).makespan == tl.makespan
    x = rng.standard_normal((M, H)).astype(np.float16)
    r = rng.standard_normal((M, H)).astype(np.float16)
    res = driver.run(prog, {"x": x, "r": r})
    assert res.ok and not res.reports
    h = x.astype(np.float64) + r.astype(np.float64)
    want = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * g_ + b_
    np.testing.assert_allclose(res.outputs["y"].astype(np.float64), want, rtol=2e-2, atol=2e-2)


def test_trials_resumed_from_checkpoints_are_full_builds(monkeypatch):
    """ResNet-18 64x64 on 56 TPBs (its plan has four vector pipelines at a start other than
    the greedy one; one trial is kept): every trial of ``pipe_starts`` is resumed from a
    checkpoint of the plan it would replace where one fits (:mod:`..resume`), and gives what the
    full build of the trial gives (oracle: the same ``shorter`` without ``base``, the path
    every trial took before): the same answer, the same plan JSON. Some trials resume."""
    from m100.frontend import models
    from m100.passes.schedule import timeline
    from m100.targets.m100.machine import get_machine

    from .test_weights_once import _graph

    inside, trials, resumed = [False], [], []
    orig_ps, orig_short, orig_cp = placement.pipe_starts, timeline.Scheduler.shorter, \
        timeline.best_checkpoint

    def best_checkpoint(*a):
        cp = orig_cp(*a)
        if inside[0] and cp is not None:
            resumed.append(cp.index)
        return cp

    def shorter(self, trial, tl, keep="", **kw):
        out = orig_short(self, trial, tl, keep, **kw)
        if inside[0]:
            inside[0] = False
            full = orig_short(self, trial, tl, keep)
            inside[0] = True
            assert (out is None) == (full is None)
            if out is not None:
                assert out.to_json() == full.to_json()
            trials.append(out is not None)
        return out

    def ps(s, segs, tl, keep):
        inside[0] = True
        try:
            return orig_ps(s, segs, tl, keep)
        finally:
            inside[0] = False

    monkeypatch.setattr(timeline, "best_checkpoint", best_checkpoint)
    monkeypatch.setattr(timeline.Scheduler, "shorter", shorter)
    monkeypatch.setattr(placement, "pipe_starts", ps)
    placement.schedule(_graph(models.resnet18(hw=64)), get_machine("m100"))
    assert len(trials) >= 4 and any(trials)
    assert resumed, "no trial resumed: the test would check little"


def test_tail_bound_is_a_floor_and_stops_trials_with_the_full_answer(monkeypatch):
    """``Scheduler.build(tail=True)`` (``pipe_starts``' trials) stops before a segment once some
    TPB's TCU, free at ``f``, has counted work left (``Scheduler._tail``) ending at or after the
    bound. ResNet-18 64x64 on 56 TPBs: (1) in every complete whole-plan build of the schedule
    (all keep modes), each TPB's TCU tasks run one after the other in creation order, and the TCU
    cycles of the tasks of segments >= ``si`` on a TPB are at least what ``_tail`` counts there
    (oracle: the built tasks themselves), so the stop is only taken when the makespan would reach
    the bound; (2) each trial built with ``tail`` gives the answer of the same bounded build
    without it (BoundExceeded, or the same plan JSON); (3) with the bound at the whole plan's
    TCU floor the build stops before its first segment, where the build without it runs on
    (ResNet-50's trials stop early: 286 -> 194 segments built, docs/speed.md)."""
    from m100.frontend import models
    from m100.passes.schedule import timeline
    from m100.targets.m100.machine import get_machine

    from .test_weights_once import _graph

    orig = timeline.Scheduler.build
    complete, compared = [], []

    def build(self, segs, isolated=False, bound=float("inf"), keep="", base=None,
              checkpoints=frozenset(), tail=False, ref=None):
        if isolated:
            return orig(self, segs, isolated, bound, keep, base, checkpoints, ref=ref)
        if not tail:
            tl = orig(self, segs, isolated, bound, keep, base, checkpoints, ref=ref)
            complete.append((self, list(segs), tl))
            return tl
        got = want = None
        try:
            got = orig(self, segs, isolated, bound, keep, base, checkpoints, True, ref=ref)
        except timeline.BoundExceeded as e:
            n_tail = len(e.plan.tasks)
        try:
            want = orig(self, segs, isolated, bound, keep, base, checkpoints, ref=ref)
        except timeline.BoundExceeded as e:
            n_full = len(e.plan.tasks)
        assert (got is None) == (want is None)
        if got is not None:
            assert got.to_json() == want.to_json()
            return got
        compared.append(n_full - n_tail)
        raise timeline.BoundExceeded(bound)

    monkeypatch.setattr(timeline.Scheduler, "build", build)
    placement.schedule(_graph(models.resnet18(hw=64)), get_machine("m100"))
    assert compared, "no trial built with the tail bound: the test would check little"
    checked = 0
    for sched, segs, tl in complete:
        left = sched._tail(segs, 0)
        assert left is not None
        last: dict[int, float] = {}
        actual: dict[int, dict[int, float]] = {}  # segment -> TPB -> TCU cycles
        for t in tl.tasks:
            if t.unit != "tcu":
                continue
            assert t.start >= last.get(t.tpb, 0.0)  # in order on each TPB's TCU
            last[t.tpb] = t.end
            per = actual.setdefault(t.segment, {})
            per[t.tpb] = per.get(t.tpb, 0.0) + (t.end - t.start)
        for si in range(len(segs)):
            have: dict[int, float] = {}
            for sj in range(si, len(segs)):
                for x, c in actual.get(sj, {}).items():
                    have[x] = have.get(x, 0.0) + c
            for x, c in left[si].items():
                assert have.get(x, 0.0) >= c - 1e-6 * max(1.0, c), (si, x)
                checked += 1
    assert checked
    # a bound at the TCU floor of the whole plan: the tail stops before the first segment, the
    # bounded build without it somewhere later; both answer "not below the bound"
    sched, segs, tl = complete[-1]
    b = max(sched._tail(segs, 0)[0].values())
    assert 0 < b <= tl.makespan
    stops = []
    for tail in (True, False):
        with pytest.raises(timeline.BoundExceeded) as e:
            orig(sched, segs, bound=b, tail=tail)
        stops.append(len(e.value.plan.tasks))
    assert stops[0] == 0 < stops[1]

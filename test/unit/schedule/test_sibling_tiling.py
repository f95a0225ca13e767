"""Equal contractions tried in each other's tiling in the whole plan (``sibling_tiling``: LLaMA's
gate and up projections).

Two f16 projections of the same activation and geometry; the search gives them equal tilings, so
the test spoils one of them (the whole matmul on one TPB, as a search costing it alone with a
late input could choose) and checks: the refinement gives it its sibling's configuration back
(everything but the op), the plan is shorter and is what a fresh build of the returned segments
gives; a trial that is not shorter changes nothing; the compiled program matches numpy.
"""

from dataclasses import replace

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.passes.schedule import placement, sibling_tiling

M, K, N = 64, 256, 256


def _model(rng):
    ws = [rng.standard_normal((K, N)).astype(np.float16) * np.float16(0.1) for _ in range(2)]
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"]) for i in range(2)]
    g = helper.make_graph(
        nodes, "siblings", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [M, K])],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT16, [M, N]) for i in range(2)],
        [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(ws)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m, ws


def _mm(s, segs):
    return [si for si, seg in enumerate(segs) if seg.kind == "data-parallel" and
            len(seg.stages) == 1 and s.ops[seg.stages[0].op].unit == "tcu.matmul"]


@pytest.mark.parametrize("spoil", [0, 1])
def test_a_spoiled_sibling_gets_the_others_tiling(spoil, monkeypatch):
    rng = np.random.default_rng(3 + spoil)
    from m100.tools import driver
    model, ws = _model(rng)
    seen = []
    orig = placement.sibling_tilings

    def spy(s, segs, tl, keep):
        mm = _mm(s, segs)
        assert len(mm) == 2
        a, b = (segs[si].stages[0] for si in mm)
        assert replace(a, op=b.op) == b  # the search tiles equal projections equally
        bad = list(segs)
        si = mm[spoil]
        st = bad[si].stages[0]
        bad[si] = replace(bad[si], stages=(replace(st, tpbs=st.tpbs[:1], gc=1, bands=1),))
        tlb = s.sched.build(bad, keep=keep)
        out = orig(s, bad, tlb, keep)
        seen.append((s, tlb, keep, out))
        return out
    monkeypatch.setattr(placement, "sibling_tilings", spy)
    prog = driver.compile(model, machine="m100").program
    (s, tlb, keep, (segs, tl)), = seen
    a, b = (segs[si].stages[0] for si in _mm(s, segs))
    assert replace(a, op=b.op) == b
    assert tl.makespan < tlb.makespan
    assert s.sched.build(segs, keep=keep).makespan == tl.makespan
    x = (rng.standard_normal((M, K)) * 2).astype(np.float16)
    res = driver.run(prog, {"x": x})
    assert res.ok and not res.reports
    for i, w in enumerate(ws):
        want = (x.astype(np.float32) @ w.astype(np.float32))
        np.testing.assert_allclose(res.outputs[f"y{i}"].astype(np.float32), want,
                                   rtol=2e-3, atol=2e-2)


def test_no_trial_when_equal_and_nothing_kept_when_not_shorter(monkeypatch):
    """Equal tilings: no build. A spoiled tiling offered to the good one is not kept: with the
    refinement's trials limited to one (the spoiled one's configuration onto the good one, the
    first pair in plan order when the first is spoiled), the plan comes back unchanged."""
    from m100.tools import driver
    model, _ = _model(np.random.default_rng(5))
    seen = []
    orig = placement.sibling_tilings

    def spy(s, segs, tl, keep):
        builds = s.sched.tasks_built
        same = orig(s, segs, tl, keep)
        assert same == (segs, tl) and s.sched.tasks_built == builds  # equal: nothing built
        mm = _mm(s, segs)
        bad = list(segs)
        st = bad[mm[0]].stages[0]
        bad[mm[0]] = replace(bad[mm[0]], stages=(replace(st, tpbs=st.tpbs[:1], gc=1, bands=1),))
        tlb = s.sched.build(bad, keep=keep)
        monkeypatch.setattr(sibling_tiling, "MAX_TRIALS", 1)
        seen.append((bad, tlb, orig(s, bad, tlb, keep)))
        monkeypatch.setattr(sibling_tiling, "MAX_TRIALS", 4)
        return segs, tl
    monkeypatch.setattr(placement, "sibling_tilings", spy)
    driver.compile(model, machine="m100")
    (bad, tlb, (segs, tl)), = seen
    assert segs == bad and tl is tlb

"""Runs of K-chunked attention GEMVs with every other one's K whole (``gemv_runs``, issue 13).

Oracles: the invariants of the refinement from the configurations alone (only ``chunked`` of
run members changes, and only when the plan gets shorter), the returned plan against a fresh
build of the returned segments, and the run found on a decode-attention-shaped graph (one GEMV
per head against its own cache input, as ``frontend.llm`` builds decode attention).
"""

from onnx import TensorProto, helper

from m100.passes.schedule import gemv_runs, placement
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")
HEADS, HD, L = 8, 128, 1024


def _heads():
    """q [HEADS, HD] f16; per head h: s_h = q[h] @ kT_h [HD, L], o_h = s_h @ v_h [L, HD]."""
    nodes, inputs, outs = [], [helper.make_tensor_value_info("q", TensorProto.FLOAT16, [HEADS, HD])], []
    for h in range(HEADS):
        inputs += [helper.make_tensor_value_info(f"kT{h}", TensorProto.FLOAT16, [HD, L]),
                   helper.make_tensor_value_info(f"v{h}", TensorProto.FLOAT16, [L, HD])]
        nodes += [helper.make_node("Slice", ["q", f"r{h}", f"r{h + 1}", "ax0"], [f"q{h}"]),
                  helper.make_node("MatMul", [f"q{h}", f"kT{h}"], [f"s{h}"]),
                  helper.make_node("MatMul", [f"s{h}", f"v{h}"], [f"o{h}"])]
        outs.append(helper.make_tensor_value_info(f"o{h}", TensorProto.FLOAT16, [1, HD]))
    inits = [helper.make_tensor(f"r{h}", TensorProto.INT64, [1], [h]) for h in range(HEADS + 1)]
    inits.append(helper.make_tensor("ax0", TensorProto.INT64, [1], [0]))
    g = helper.make_graph(nodes, "heads", inputs, outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


def _graph(model):
    from m100.frontend.mlir_load import shared_context
    from m100.passes.graph.m100_graph import M100Graph
    from m100.passes.schedule.from_ir import from_module
    from m100.tools import driver
    ctx = shared_context()
    module, _ = driver.load_model(model, ctx)
    M100Graph().apply(ctx, module)
    return from_module(module, M100.cvu_max_stages).graph


def test_unchunk_runs_keeps_only_shorter_plans_of_the_same_segments(monkeypatch):
    seen = []
    orig = gemv_runs.unchunk_gemv_runs

    def spy(s, segs, tl, keep):
        s.budget = float("inf")  # (not skipped for a spent search budget)
        out = orig(s, segs, tl, keep)
        seen.append((s, segs, tl, keep, out))
        return out

    monkeypatch.setattr(placement, "unchunk_gemv_runs", spy)
    placement.schedule(_graph(_heads()), M100)
    s, segs, tl, keep, (segs2, tl2) = seen[-1]
    run = gemv_runs.gemv_run(s, segs)
    assert len(run) >= gemv_runs.MIN_RUN  # the heads' GEMVs stream their caches in K chunks
    assert all(s.ops[segs[si].stages[0].op].unit == "tcu.matmul" for si in run)
    assert len(segs2) == len(segs) and tl2.makespan <= tl.makespan
    assert s.sched.build(segs2, keep=keep).makespan == tl2.makespan
    changed = [i for i, (a, b) in enumerate(zip(segs, segs2)) if a != b]
    assert set(changed) <= set(run)
    for i in changed:
        a, b = segs[i].stages[0], segs2[i].stages[0]
        assert a.chunked and not b.chunked and b == a.__class__(**{**a.__dict__, "chunked": False})
    if changed:
        assert tl2.makespan < tl.makespan

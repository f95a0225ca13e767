"""Issue 13, session 19: a projection's result kept in its TPBs' HBSM when RoPE reads it through
a reshape view (``keep.row_root``: RoPE's ``x [T, n, hd]`` is whole rows of the projection's
``[T, n * hd]``). RoPE's pieces then copy their rows from the projection's pieces over the mesh
(DTDU), the projection stores nothing and RoPE loads nothing of ``x``; the CVU reads the copied
rows ``(rows, 1, n * hd)`` as ``(rows, n, hd)`` (``kinds/cvu.flat_access``, the rotate-half read
through the same buffer). Checked here: the layer keeps the Q / K projections so (fails with
``keep.ROW_VIEWS`` off), its values are numpy's from the LLaMA definition, its bits those of the
program that stores and reloads ``x``, no race, and fewer CCB DMAs."""
from __future__ import annotations

import numpy as np
import pytest

from test_bench_llm import _llama_prefill_numpy, _prefill_feed


def _compile_kept(model, monkeypatch, row_views: bool):
    """The program of ``model`` with every eligible activation kept (the ``all`` keep mode
    forced: the tiny layer's plan decides by a few cycles) and the plan's kept ops."""
    from m100.passes.schedule import keep, placement
    from m100.tools import driver
    monkeypatch.setattr(keep, "ROW_VIEWS", row_views)
    seen = {}

    def forced(sched, segs, tl):
        tl2 = sched.build(segs, keep="all")
        seen["kept"] = set(tl2.kept)
        return tl2, "all"
    monkeypatch.setattr(placement, "keep_activations", forced)
    prog = driver.compile(model, machine="m100").program
    return prog, seen["kept"]


def _dmas(prog) -> int:
    from m100.targets.m100.isa import Unit
    return sum(1 for _, i in prog.instructions() if i.executor[0] is Unit.DMA)


def _projections_read_by_rope(model) -> set[str]:
    """The matmuls whose result a RoPE op (a CVU op with a rotate-half read) reads through a
    reshape view, in the scheduler's graph."""
    from m100.frontend.mlir_load import shared_context
    from m100.passes.graph.m100_graph import M100Graph
    from m100.passes.schedule.from_ir import from_module
    from m100.targets.m100.machine import get_machine
    from m100.tools.driver import load_model
    ctx = shared_context()
    module, _ = load_model(model, ctx)
    M100Graph().apply(ctx, module)
    mc = get_machine("m100")
    g = from_module(module, mc.cvu_max_stages, mc.mem_align, mc.tcu_post_stages).graph
    prod = g.producers()
    out = set()
    for op in g.ops:
        if op.attrs.get("rot"):
            v = op.inputs[0]
            root = g.views[v][0]
            out.add(prod[root].name)
    return out


@pytest.mark.parametrize("heads,kv_heads,quant", [(4, 2, "f32"), (4, 4, "f32"), (4, 2, "w8a8")])
def test_projection_kept_for_rope(heads, kv_heads, quant, monkeypatch):
    from m100.frontend import llm
    from m100.tools import driver
    cfg = llm.scaled(llm.config("tiny"), heads=heads, kv_heads=kv_heads)
    T = 16
    kw = {"quant": "w8a8"} if quant == "w8a8" else {}
    model, w = llm.build(cfg, "layer", "prefill", context=T, batch=1, seed=2, **kw)
    feed = _prefill_feed(cfg, T, 1, 5)
    if quant == "f32":
        feed = {k: v.astype(np.float32) for k, v in feed.items()}
    rope_in = _projections_read_by_rope(model)
    assert len(rope_in) == 2  # q's and k's projections
    got, dmas = {}, {}
    for rv in (False, True):
        prog, kept = _compile_kept(model, monkeypatch, rv)
        assert (rope_in <= kept) == rv, (rv, kept, rope_in)
        res = driver.run(prog, feed)  # full mode: races checked
        assert res.ok and not res.reports
        got[rv], dmas[rv] = res.outputs, _dmas(prog)
    for k in ("y", "kT", "v"):
        np.testing.assert_array_equal(got[True][k], got[False][k])
    # each of q and k: no store by its projection, no load by its RoPE (per piece at least one)
    assert dmas[True] <= dmas[False] - 4, dmas
    if quant == "f32":  # numpy from the LLaMA definition (the independent oracle)
        want = dict(zip(("y", "kT", "v"), _llama_prefill_numpy(cfg, w, feed["x"], feed["cos"],
                                                               feed["sin"], 1, T)))
        for k in ("y", "kT", "v"):
            np.testing.assert_allclose(got[True][k].reshape(want[k].shape), want[k], rtol=1e-4,
                                       atol=1e-4)

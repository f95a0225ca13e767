"""Late stores read by later pipelines (``build_segments.LATE_READ_STORES``, docs/llm.md section 5,
session 23): the V projection's output stores built just before the first head that reads each
store's columns, the rest at the end of the first round of heads, instead of all at the
projection's end (where the first heads' q / kT loads queued behind them with every TCU idle).

Oracles: numpy from the LLaMA definition (f32 layer), the program built with the stores at the
projection's end (the same bits, W8A8 too), the interpreter's race / deadlock checks (full mode),
and in the plan every load of a head's V columns after every store that wrote them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from m100.passes.schedule import build_segments, list_schedule
from m100.passes.schedule.graph import dtype_bytes

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
from test_bench_llm import _llama_prefill_numpy, _prefill_feed  # noqa: E402

T = 128


def _layer(quant: str):
    from m100.frontend import llm
    cfg = llm.scaled(llm.config("tiny"), hidden=512, heads=4, kv_heads=4, ffn=512)
    kw = {"quant": "w8a8"} if quant == "w8a8" else {}
    model, w = llm.build(cfg, "layer", "prefill", context=T, batch=1, seed=3, **kw)
    return cfg, model, w


def _compile(model, on: bool, monkeypatch, placements):
    from m100.tools import driver
    # (without the heads' kT / v prefetch: with it this layer's f32 plan builds no late store;
    # test_act_prefetch checks both together on the W8A8 layer)
    monkeypatch.setattr(list_schedule, "ACT_PREFETCH", False)
    monkeypatch.setattr(build_segments, "LATE_READ_STORES", on)
    prog = driver.compile(model, machine="m100").program
    return placements[-1], prog


def same_bits_and_numpy(got: dict, quant: str, cfg, w, feed) -> None:
    """The outputs of the switch-on and switch-off programs (``got[True]`` / ``got[False]``) are
    the same bits; in f32 the switch-on ones are numpy's (the LLaMA definition)."""
    for k in ("y", "kT", "v"):
        np.testing.assert_array_equal(got[True][k], got[False][k])
    if quant == "f32":
        want = dict(zip(("y", "kT", "v"), _llama_prefill_numpy(cfg, w, feed["x"], feed["cos"],
                                                               feed["sin"], 1, T)))
        for k in ("y", "kT", "v"):
            np.testing.assert_allclose(got[True][k].reshape(want[k].shape), want[k], rtol=1e-4,
                                       atol=1e-4)


def view_loads(pl, si: int):
    """(the late-stored op, its stores, {store task: its box's columns}, [(each load of a column
    view of its result, the stores whose box overlaps the view's columns)]) of segment ``si``."""
    tl, g = pl.timeline, pl.graph
    op = tl.segments[si].stages[0].op
    root = g.ops[[o.name for o in g.ops].index(op)].outputs[0]
    stores = [t for t in tl.tasks if t.kind == "dma-out" and t.op == op]
    box = {tid: (p.c0, p.c1) for p in tl.pieces[si] for tid in p.tasks}
    assert stores and all(t.id in box for t in stores)
    eb = dtype_bytes(g.tensors[root].dtype)
    out = []
    for t in tl.tasks:
        cv = g.cviews.get(t.tensor)
        if t.kind != "dma-in" or cv is None or cv[0] != root:
            continue
        c0 = cv[1] // eb
        c1 = c0 + g.tensors[t.tensor].shape[-1]
        over = [s for s in stores if min(box[s.id][1], c1) > max(box[s.id][0], c0)]
        assert over, t
        out.append((t, over))
    return op, stores, box, out


def _plan_checks(pl) -> None:
    """The late stores are used, and every load of a column view of their tensor starts after
    the stores that wrote those columns ended -- and waits for them itself: its memory
    dependency (the first of its deps, ``Transfers._load`` / ``_broadcast`` / ``_weight``: the
    view's last-ending writer so far) ends no earlier than they do. The start alone is not
    enough: on this small layer each head's load also waits for its TPB's HBSM barrier, which
    orders it after the stores anyway, so a plan whose views kept the writers they had when
    they were built (head 0's stores: ``PlanBuilder._late_reads_end`` without its update of
    the views) passed the start check."""
    tl = pl.timeline
    assert tl.late_reads, "no late read stores: the test checks nothing"
    si = next(iter(tl.late_reads))
    op, stores, _, loads = view_loads(pl, si)
    first_head = min(t.start for t in tl.tasks if t.segment > si and t.kind == "compute")
    assert first_head < max(t.end for t in stores)  # the point of it
    for t, over in loads:
        for s in over:
            assert s.end <= t.start + 1e-6, (t, s)
        mem = tl.tasks[t.deps[0]] if t.deps else None
        assert mem is not None and mem.kind == "dma-out" and mem.op == op, (t, mem)
        assert mem.end >= max(s.end for s in over) - 1e-6, (t, mem, max(over, key=lambda s: s.end))
    assert loads


@pytest.mark.parametrize("quant", ["f32", "w8a8"])
def test_v_stores_before_their_heads_same_bits(quant, monkeypatch, placements):
    from m100.tools import driver
    cfg, model, w = _layer(quant)
    feed = _prefill_feed(cfg, T, 1, 7)
    if quant == "f32":
        feed = {k: v.astype(np.float32) for k, v in feed.items()}
    got = {}
    for on in (True, False):
        pl, prog = _compile(model, on, monkeypatch, placements)
        if on:
            _plan_checks(pl)
        else:
            assert not pl.timeline.late_reads
        res = driver.run(prog, feed)  # full mode: races and deadlocks checked
        assert res.ok and not res.reports, res.reports[:3]
        got[on] = res.outputs
    same_bits_and_numpy(got, quant, cfg, w, feed)

"""The heads' run-time B operands prefetched across segments (``list_schedule.ACT_PREFETCH``,
docs/llm.md section 5, session 25): in a causal attention chain (a stage cut by work) the loads of
``kT`` and ``v`` into a head's TPBs wait for the prefetch barrier ``Plan.prefetch`` names, as a
constant weight's do, instead of the end of the head before on the same TPBs.

Oracles: numpy from the LLaMA definition (f32 layer), the program built with the switch off (the
same bits, W8A8 too), the interpreter's race / deadlock checks (full mode: a prefetched buffer
written while the head before still reads its bytes is a race), and in the plan, some run-time B
load starting before the head before it ends on a TPB it fills (on) / none (off), each after the
stores of the columns it reads where the plan stores v late (``test_late_read_stores.
_plan_checks``), every load of bytes the program writes after their stores
(``test_view_writers.unordered_loads``), and onnxruntime on the W8A8 outputs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from m100.passes.schedule import list_schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
from test_bench_llm import _prefill_feed  # noqa: E402
from test_late_read_stores import T, _layer, _plan_checks, same_bits_and_numpy  # noqa: E402
from test_view_writers import unordered_loads  # noqa: E402


def _early_loads(pl) -> tuple[int, int]:
    """(run-time B loads -- role ``w``, an activation --, those that start before the last
    instruction a TPB they fill executes for an earlier segment: its compute or copies, which
    the TPB's barrier -- what such a load waited for before -- comes after)."""
    tl, g = pl.timeline, pl.graph
    ends: dict[tuple[int, int], float] = {}  # (segment, TPB) -> its last instruction's end there
    for t in tl.tasks:
        if t.tpb >= 0:
            k = (t.segment, t.tpb)
            ends[k] = max(ends.get(k, 0.0), t.end)
    n = early = 0
    for t in tl.tasks:
        if t.kind != "dma-in" or t.role != "w" or g.tensors[t.tensor].kind == "weight":
            continue
        n += 1
        for x in t.dst_tpbs:
            prev = [e for (s, y), e in ends.items() if y == x and s < t.segment]
            if prev and t.start < max(prev) - 1e-6:
                early += 1
                break
    return n, early


@pytest.mark.parametrize("quant", ["f32", "w8a8"])
def test_heads_b_operands_prefetched_same_bits(quant, monkeypatch, placements):
    """(Session 25's CI: the W8A8 program with the switch on computed y off by up to 0.75 --
    head 0's q loads of rows 85-105 read before RoPE's late stores wrote them, which no view of
    q waited for: ``test_view_writers``; session 26 fixed it and added the plan's order and
    onnxruntime here.)"""
    from m100.tools import driver
    cfg, model, w = _layer(quant)
    feed = _prefill_feed(cfg, T, 1, 7)
    if quant == "f32":
        feed = {k: v.astype(np.float32) for k, v in feed.items()}
    got, late = {}, {}
    for on in (True, False):
        monkeypatch.setattr(list_schedule, "ACT_PREFETCH", on)
        prog = driver.compile(model, machine="m100").program
        pl = placements[-1]
        if pl.timeline.late_reads:  # each load of v's columns after the stores that wrote them
            _plan_checks(pl)
        late[on] = bool(pl.timeline.late_reads)
        n, bad = unordered_loads(pl)  # each load of written bytes after their stores
        assert n and not bad, bad[:3]
        n, early = _early_loads(pl)
        assert n, "no matmul reads a run-time B operand: the test checks nothing"
        if on:
            assert early, "no head's kT / v load overlaps the head before: the test checks nothing"
        else:
            assert early == 0, early
        res = driver.run(prog, feed)  # full mode: races and deadlocks checked
        assert res.ok and not res.reports, res.reports[:3]
        got[on] = res.outputs
    if quant == "w8a8":  # the prefetched v loads with v's stores built late (the 7B layer's)
        assert late[True], "no late read stores with the switch on: _plan_checks checks nothing"
    same_bits_and_numpy(got, quant, cfg, w, feed)
    if quant == "w8a8":  # the switch-off program is no independent oracle: onnxruntime
        want, _ = driver.oracle_outputs(model, [feed[i.name] for i in model.graph.input])
        for k, v in zip([o.name for o in model.graph.output], want):
            # (int8 requantization rounds apart: y 0.05 off at most; the wrong y was 0.31 off)
            err = np.abs(got[True][k].astype(np.float64).reshape(v.shape) - v).max()
            assert err < 0.1, (k, err)


def test_model_input_b_operands_not_prefetched(monkeypatch, placements):
    """A run-time B operand that is a model input -- decode's KV cache, ``past_kT`` / ``past_v``
    -- keeps the TPB's barrier (the 7B decode planned 16.003 -> 16.24 ms/token with it
    prefetched): the decode layer's program is the same bytes with the switch on and off."""
    from m100.frontend import llm
    from m100.tools import driver
    cfg = llm.scaled(llm.config("tiny"), hidden=512, heads=4, kv_heads=4, ffn=512)
    model, _ = llm.build(cfg, "layer", "decode", context=T, batch=1, weights="shape",
                         fuse=True, quant="w4a16", block=128)
    progs = {}
    for on in (True, False):
        monkeypatch.setattr(list_schedule, "ACT_PREFETCH", on)
        progs[on] = driver.compile(model, machine="m100").program.to_bytes()
        pl = placements[-1]
        g = pl.graph
        assert any(t.kind == "dma-in" and t.role == "w" and g.tensors[t.tensor].kind == "input"
                   for t in pl.timeline.tasks), "no model input read as a B operand"
    assert progs[True] == progs[False]

"""Issue 13, session 20: LLaMA's W8A8 MLP without its activations through memory.

* gate's ``silu(g)`` (f16), the operand of up's TCU epilogue (``post_in``), kept in the HBSM of
  gate's TPBs (``keep.POST_IN``): up's pieces read their ``[rows, cols]`` box in place when
  gate's piece on their TPB has exactly that box, else copy it over the mesh; gate stores
  nothing and up loads nothing of it.
* up's int8 result kept for down when down is a lockstep GEMM (``keep.LOCKSTEP_MATMULS``): each
  K chunk of down's activation -- rows x a range of up's columns -- is one DTDU broadcast from
  the up pieces holding it to down's column parts, instead of one DRB broadcast from memory per
  column tile.

Oracle: numpy written from the ONNX definitions (QuantizeLinear, MatMulInteger, Cast, Mul,
Sigmoid op by op in f16, Add); the program must give the same bits with the tensors kept and
without, and move fewer bytes over the CCB DMA engines.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from m100.targets.m100.isa import MatMul, Space, Unit

SX = 1.0 / 32


def _mlp(t: int, h: int, f: int):
    """x [t, h] f16 -> y = x + down(quantize(silu(gate(xq)) * up(xq))), each projection
    ``Cast(Cast(MatMulInteger(xq, W), f32) * dq, f16)`` (LLaMA's W8A8 form, ``llm_graph``)."""
    inits = [numpy_helper.from_array(np.array(np.float16(SX)), "sx"),
             numpy_helper.from_array(np.array(0, np.int8), "zx")]
    ins = [helper.make_tensor_value_info("x", TP.FLOAT16, [t, h])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"])]
    for name, a, k, n in (("wg", "xq", h, f), ("wu", "xq", h, f), ("wd", "mq", f, h)):
        ins += [helper.make_tensor_value_info(name, TP.INT8, [k, n]),
                helper.make_tensor_value_info(name + ".dq", TP.FLOAT, [n])]
        nodes += [helper.make_node("MatMulInteger", [a, name], [name + ".acc"]),
                  helper.make_node("Cast", [name + ".acc"], [name + ".accf"], to=TP.FLOAT),
                  helper.make_node("Mul", [name + ".accf", name + ".dq"], [name + ".yf"]),
                  helper.make_node("Cast", [name + ".yf"], [name + ".y"], to=TP.FLOAT16)]
        if name == "wu":
            nodes += [helper.make_node("Sigmoid", ["wg.y"], ["s"]),
                      helper.make_node("Mul", ["wg.y", "s"], ["silu"]),
                      helper.make_node("Mul", ["silu", "wu.y"], ["m"]),
                      helper.make_node("QuantizeLinear", ["m", "sx", "zx"], ["mq"])]
    nodes.append(helper.make_node("Add", ["x", "wd.y"], ["y"]))
    g = helper.make_graph(nodes, "mlp", ins, [helper.make_tensor_value_info("y", TP.FLOAT16,
                                                                            [t, h])], inits)
    mo = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    mo.ir_version = 10
    return mo


def _quantize(v):
    """QuantizeLinear(v, 1/32, 0): saturate(round_half_even(v / s)) (exact: s a power of two)."""
    return np.clip(np.rint(v.astype(np.float64) / SX), -128, 127).astype(np.int64)


def _proj(aq, w, dq):
    return ((aq @ w.astype(np.int64)).astype(np.float32) * dq).astype(np.float16)


def _definition(feed):
    """numpy from the ONNX definitions, each f16 op rounded to f16 where the graph rounds it."""
    x = feed["x"]
    xq = _quantize(x)
    g = _proj(xq, feed["wg"], feed["wg.dq"])
    u = _proj(xq, feed["wu"], feed["wu.dq"])
    one = np.float16(1)
    with np.errstate(all="ignore"):
        s = one / (np.exp(-g) + one)  # Sigmoid in f16: exp, add, divide each rounded
        m = (g * s) * u
    d = _proj(_quantize(m), feed["wd"], feed["wd.dq"])
    return x + d


def _feed(t, h, f, seed=3):
    rng = np.random.default_rng(seed)
    feed = {"x": (rng.standard_normal((t, h)) * 2).astype(np.float16)}
    for name, k, n in (("wg", h, f), ("wu", h, f), ("wd", f, h)):
        feed[name] = rng.integers(-128, 128, (k, n)).astype(np.int8)
        # scales that keep silu(g) * u around the int8 steps of 1/32
        feed[name + ".dq"] = ((rng.random(n) * 2e-4 + 1e-4) * (32.0 / np.sqrt(k))).astype(
            np.float32)
    return feed


def _compile(model, machine, monkeypatch, post_in: bool, lockstep: bool):
    """The program with every eligible activation kept (the ``all`` keep mode forced) and what
    the plan it was emitted from says (graph, kept ops, tasks, tilings)."""
    from m100.passes.schedule import keep, m100_schedule, placement
    from m100.tools import driver
    monkeypatch.setattr(keep, "POST_IN", post_in)
    monkeypatch.setattr(keep, "LOCKSTEP_MATMULS", lockstep)
    seen = {}
    sched = getattr(m100_schedule.schedule, "orig", m100_schedule.schedule)

    def forced(sched, segs, tl):
        return sched.build(segs, keep="all"), "all"

    def schedule(g, *a, **k):
        pl = sched(g, *a, **k)
        tl = pl.timeline
        seen.update(g=g, kept=set(tl.kept), tasks=list(tl.tasks), plans=dict(tl.plans))
        return pl
    schedule.orig = sched
    monkeypatch.setattr(placement, "keep_activations", forced)
    monkeypatch.setattr(m100_schedule, "schedule", schedule)
    prog = driver.compile(model, machine=machine).program
    return prog, seen


@pytest.mark.parametrize("t,h,f,hbsm,in_place", [
    # gate on 8 TPBs, up and down a pipeline on 14: up's pieces copy their silu(g) boxes
    (64, 128, 384, 0, False),
    # a small HBSM: gate and up 4 x 8 alike (in place), down a lockstep GEMM in K chunks
    (128, 256, 768, 64 * 1024, True)])
def test_mlp_silu_and_up_kept_same_bits_as_numpy(t, h, f, hbsm, in_place, monkeypatch):
    from m100.targets.m100.machine import get_machine
    from m100.tools import driver
    machine = get_machine("m100")
    if hbsm:
        machine = machine.replace(hbsm_bytes=hbsm)
    model = _mlp(t, h, f)
    feed = _feed(t, h, f)
    want = _definition(feed)
    got, seen, dmas = {}, {}, {}
    for on in (False, True):
        prog, seen[on] = _compile(model, machine, monkeypatch, on, on)
        res = driver.run(prog, feed)  # full mode: races checked
        assert res.ok and not res.reports, res.reports[:3]
        got[on] = res.outputs["y"].reshape(t, h)
        dmas[on] = sum(1 for _, i in prog.instructions() if i.executor[0] is Unit.DMA)
        posts = [i for _, i in prog.instructions() if isinstance(i, MatMul) and
                 i.post_in is not None]
        assert posts and all(i.post_in.space is Space.HBSM for i in posts)
    np.testing.assert_array_equal(got[False], want)
    np.testing.assert_array_equal(got[True], want)
    g = seen[True]["g"]
    ops = {o.name: o for o in g.ops}
    # (down's ``post_in`` is x, the residual: a model input)
    up = [o for o in ops.values() if o.unit == "tcu.matmul" and o.attrs.get("post_in") and
          getattr(g.producer(o.attrs["post_in"]), "unit", "") == "tcu.matmul"]
    assert len(up) == 1
    up = up[0]
    gate = g.producer(up.attrs["post_in"]).name
    kept = {on: seen[on]["kept"] for on in (False, True)}
    assert gate in kept[True] and gate not in kept[False], kept
    tasks = seen[True]["tasks"]
    # no load of silu(g), no store of it
    assert not [x for x in tasks if x.unit == "dma" and x.tensor == up.attrs["post_in"]]
    copies = [x for x in tasks if x.kind == "copy" and x.op == gate]
    assert bool(copies) != in_place  # in place: up's pieces read gate's tiles where they are
    if in_place:  # down reads up's kept int8 result chunk by chunk (DTDU broadcasts)
        down = [o for o in ops.values() if up.outputs[0] in o.inputs][0]
        plan = seen[True]["plans"][down.name]
        assert up.name in kept[True] and plan.tk < plan.k
        assert [x for x in tasks if x.kind == "copy" and x.op == up.name and
                len(x.dst_tpbs) > 1]
        assert not [x for x in tasks if x.unit == "dma" and x.tensor == up.outputs[0]]
    assert dmas[True] < dmas[False], dmas

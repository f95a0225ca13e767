"""Concat inputs written in place (``from_ir.movement.find_in_place``): a part that is one
contiguous run of the concat's result is a view of it on the writing side -- its producer stores
straight into the result and the concat moves only its other parts. Checked against numpy written
from the ops' definitions with the interpreter's race checks on, and against the same model
compiled without it (the concat's copies come back)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP, helper as h, numpy_helper as nh

from m100.passes.schedule.from_ir import movement as fm
from m100.passes.schedule.graph import Op, OpGraph, Tensor
from m100.passes.schedule.ir_facts import Lowering
from m100.tools import driver


def _ints(name, vals):
    return nh.from_array(np.array(vals, np.int64), name)


def _model():
    """x [4, 64] and b [1, 32] inputs, w_i [64, 64] weights:
    m_i = x[i] @ w_i (row slices are views; four GEMVs), c = Concat(m_0..m_3, axis 0) [4, 64]:
    every part one contiguous run, written in place; y1 = relu(c);
    e = Concat(relu(x[0:1, :32]), b, axis 1) [1, 64]: the relu written in place, the input b
    copied; y2 = e * 2;
    y3 = Concat(x[:, :32] + 1, x[:, 32:] * 3, axis 1) [4, 64]: a model output, its parts copied."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((4, 64, 64)) / 8).astype(np.float32)
    nodes, inits = [], [_ints("ax0", [0]), _ints("ax1", [1]), _ints("one_", [1]),
                        nh.from_array(np.array(1.0, np.float32), "c1"),
                        nh.from_array(np.array(2.0, np.float32), "c2"),
                        nh.from_array(np.array(3.0, np.float32), "c3")]
    ms = []
    for i in range(4):
        inits += [_ints(f"s{i}", [i]), _ints(f"e{i}", [i + 1]), nh.from_array(w[i], f"w{i}")]
        nodes += [h.make_node("Slice", ["x", f"s{i}", f"e{i}", "ax0"], [f"r{i}"]),
                  h.make_node("MatMul", [f"r{i}", f"w{i}"], [f"m{i}"])]
        ms.append(f"m{i}")
    inits += [_ints("z", [0]), _ints("h32", [32]), _ints("h64", [64])]
    nodes += [
        h.make_node("Concat", ms, ["c"], axis=0),
        h.make_node("Relu", ["c"], ["y1"]),
        h.make_node("Slice", ["x", "z", "one_", "ax0"], ["x0"]),
        h.make_node("Slice", ["x0", "z", "h32", "ax1"], ["x0l"]),
        h.make_node("Relu", ["x0l"], ["x0r"]),
        h.make_node("Concat", ["x0r", "b"], ["e"], axis=1),
        h.make_node("Mul", ["e", "c2"], ["y2"]),
        h.make_node("Slice", ["x", "z", "h32", "ax1"], ["xl"]),
        h.make_node("Slice", ["x", "h32", "h64", "ax1"], ["xr"]),
        h.make_node("Add", ["xl", "c1"], ["fl"]),
        h.make_node("Mul", ["xr", "c3"], ["fr"]),
        h.make_node("Concat", ["fl", "fr"], ["y3"], axis=1),
    ]
    g = h.make_graph(nodes, "in_place", [h.make_tensor_value_info("x", TP.FLOAT, [4, 64]),
                                         h.make_tensor_value_info("b", TP.FLOAT, [1, 32])],
                     [h.make_tensor_value_info("y1", TP.FLOAT, [4, 64]),
                      h.make_tensor_value_info("y2", TP.FLOAT, [1, 64]),
                      h.make_tensor_value_info("y3", TP.FLOAT, [4, 64])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    return m, w


def _dmas(program) -> int:
    return sum(1 for _, ins in program.instructions() if type(ins).__name__ == "Dma")


def test_in_place_exact_fewer_dmas(monkeypatch):
    m, w = _model()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    b = rng.standard_normal((1, 32)).astype(np.float32)
    c = np.concatenate([x[i:i + 1].astype(np.float64) @ w[i] for i in range(4)], axis=0)
    want = {"y1": np.maximum(c, 0),
            "y2": np.concatenate([np.maximum(x[:1, :32], 0), b], axis=1) * 2,
            "y3": np.concatenate([x[:, :32] + 1, x[:, 32:] * 3], axis=1)}
    on = driver.compile(m, machine="tiny")
    got = driver.run(on.program, {"x": x, "b": b})
    assert got.ok and not got.reports
    for k, v in want.items():  # the GEMVs in f32 on the TCU: f32 accumulation order
        np.testing.assert_allclose(got.outputs[k].reshape(v.shape), v, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got.outputs["y2"].reshape(1, 64), want["y2"].astype(np.float32))
    np.testing.assert_array_equal(got.outputs["y3"].reshape(4, 64), want["y3"].astype(np.float32))
    monkeypatch.setattr(fm, "find_in_place", lambda g, low, align, views, strided=None: {})
    off = driver.compile(m, machine="tiny")
    got_off = driver.run(off.program, {"x": x, "b": b})
    assert got_off.ok and not got_off.reports
    for k in want:  # the same values: the same ops, only where the parts are written differs
        np.testing.assert_array_equal(got.outputs[k], got_off.outputs[k])
    # the four GEMV results and the relu are written in place: at least five DMAs fewer (a
    # copy may be cut into several); b and the two strided parts are still copied
    assert _dmas(on.program) <= _dmas(off.program) - 5


def _heads_model():
    """x [8, 64], w_i [64, 16]: m_i = x @ w_i (TCU), r = relu(x @ v) [8, 16] (a CVU op),
    c = Concat(m_0, m_1, m_2, m_3, r, axis 1) [8, 80] -- columns of c, not contiguous runs: the
    attention heads side by side -- y1 = c @ u [80, 24]; y2 = m_3 * 2 (m_3 read twice: copied)."""
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((4, 64, 16)) / 8).astype(np.float32)
    v = (rng.standard_normal((64, 16)) / 8).astype(np.float32)
    u = (rng.standard_normal((80, 24)) / 8).astype(np.float32)
    inits = [nh.from_array(w[i], f"w{i}") for i in range(4)] + \
        [nh.from_array(v, "v"), nh.from_array(u, "u"), nh.from_array(np.array(2.0, np.float32), "c2")]
    nodes = [h.make_node("MatMul", ["x", f"w{i}"], [f"m{i}"]) for i in range(4)]
    nodes += [h.make_node("MatMul", ["x", "v"], ["xv"]), h.make_node("Relu", ["xv"], ["r"]),
              h.make_node("Concat", ["m0", "m1", "m2", "m3", "r"], ["c"], axis=1),
              h.make_node("MatMul", ["c", "u"], ["y1"]), h.make_node("Mul", ["m3", "c2"], ["y2"])]
    g = h.make_graph(nodes, "heads", [h.make_tensor_value_info("x", TP.FLOAT, [8, 64])],
                     [h.make_tensor_value_info("y1", TP.FLOAT, [8, 24]),
                      h.make_tensor_value_info("y2", TP.FLOAT, [8, 16])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    return m, w, v, u


def test_columns_written_in_place_exact_fewer_dmas(monkeypatch):
    """The parts of a 2-D concat along columns are stored by their producers into the result's
    columns (``OpGraph.strided``): the same values as with the concat's copies, fewer DMAs; a
    part read by another op too is copied."""
    from m100.frontend.mlir_load import default_context
    from m100.passes.schedule.from_ir import from_module
    from m100.tools.onnx_backend import compile_onnx
    m, w, v, u = _heads_model()
    g = from_module(compile_onnx(m, default_context(), graph=True)).graph
    (cat,) = [op for op in g.ops if op.name.startswith("concat")]
    assert g.in_place[cat.name] == frozenset({0, 1, 2, 4})
    assert {t: g.strided[t] for t in g.strided} == {
        cat.inputs[i]: (cat.outputs[0], (0, c)) for i, c in ((0, 0), (1, 16), (2, 32), (4, 64))}
    x = np.random.default_rng(3).standard_normal((8, 64)).astype(np.float32)
    xd = x.astype(np.float64)
    c = np.concatenate([xd @ w[i] for i in range(4)] + [np.maximum(xd @ v, 0)], axis=1)
    want = {"y1": c @ u, "y2": (xd @ w[3]) * 2}
    on = driver.compile(m, machine="tiny")
    got = driver.run(on.program, {"x": x})
    assert got.ok and not got.reports
    for k, val in want.items():
        np.testing.assert_allclose(got.outputs[k].reshape(val.shape), val, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(fm, "_strided_parts", lambda *a: frozenset())
    off = driver.compile(m, machine="tiny")
    got_off = driver.run(off.program, {"x": x})
    assert got_off.ok and not got_off.reports
    for k in want:
        np.testing.assert_array_equal(got.outputs[k], got_off.outputs[k])
    assert _dmas(on.program) <= _dmas(off.program) - 4


def _graph(ops, tensors):
    g = OpGraph([Tensor(*t) for t in tensors])
    low = {}
    for name, kind, ins, outs, params in ops:
        g.add_op(Op(name, "dtdu.copy", tuple(ins), tuple(outs)))
        low[name] = Lowering(kind, params=params)
    return g, low


def test_find_in_place_rules():
    f32 = 4
    g, low = _graph(
        [("pa", "gcopy", ["x"], ["a"], {}), ("pb", "gcopy", ["x"], ["b"], {}),
         ("pc", "gcopy", ["x"], ["c"], {}), ("pd", "gcopy", ["x"], ["d"], {}),
         ("ar", "reshape", ["a"], ["ar2"], {}),                         # a reshape view of a
         ("cat", "concat", ["ar2", "b", "x1"], ["o"], dict(dim=1)),     # [1, 3, 16] -> in place
         ("cat2", "concat", ["o", "c"], ["o2"], dict(dim=1)),           # o carries its parts
         ("odd", "concat", ["d", "e"], ["o3"], dict(dim=2)),            # dim 1 is 2: strided
         ("dup", "concat", ["f", "f"], ["o4"], dict(dim=0)),            # the same part twice
         ("out", "concat", ["g1", "g2"], ["y"], dict(dim=0)),           # a model output
         ("mis", "concat", ["k1", "k2"], ["o5"], dict(dim=0))],         # 12 B: misaligned
        [("x", (64,), "f32", "input"), ("x1", (1, 1, 16), "f32", "input"),
         ("a", (16,)), ("ar2", (1, 1, 16)), ("b", (1, 1, 16)), ("o", (1, 3, 16)),
         ("c", (1, 2, 16)), ("o2", (1, 5, 16)),
         ("d", (1, 2, 4)), ("e", (1, 2, 4)), ("o3", (1, 2, 8)),
         ("f", (2, 4)), ("o4", (4, 4)),
         ("g1", (2, 4)), ("g2", (2, 4)), ("y", (4, 4), "f32", "output"),
         ("k1", (1, 3)), ("k2", (1, 3)), ("o5", (2, 3))])
    for t in ("d", "e", "f", "g1", "g2", "k1", "k2"):
        g.add_op(Op(f"p{t}", "dtdu.copy", ("x",), (t,)))
        low[f"p{t}"] = Lowering("gcopy", params={})
    views = fm.find_views(g, low, 64)
    assert views == {"ar2": ("a", 0)}
    placed = fm.find_in_place(g, low, 64, views)
    # cat2 first (the later concat): o and c are placed in o2; then cat's parts land in o2
    # through o's offset; the model input x1 is copied; k2's offset (12 B) is not aligned
    assert placed == {"cat2": frozenset({0, 1}), "cat": frozenset({0, 1}),
                      "mis": frozenset({0})}
    assert views == {"o": ("o2", 0), "c": ("o2", 3 * 16 * f32), "a": ("o2", 0),
                     "ar2": ("o2", 0), "b": ("o2", 16 * f32), "k1": ("o5", 0)}
    # with 4-byte alignment k2 is placed too
    views = fm.find_views(g, low, 4)
    assert fm.find_in_place(g, low, 4, views)["mis"] == frozenset({0, 1})
    assert views["k2"] == ("o5", 3 * f32)

"""Reads without copies (session 13, prefill RoPE): ``fold-slice-reads`` folds a static slice read
only by elementwise generics into their input maps (the CVU op loads the halves of its source
through strided walks), and ``from_ir.movement.find_output_reshapes`` makes the input of a reshape
into a model output a view of that output (its producer stores there; the reshape moves nothing).
Checked against numpy written from the ops' definitions with the interpreter's race checks on, and
against the same model compiled without each (the copies come back, the values are the same)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP, helper as h, numpy_helper as nh

from m100.passes.graph import fold_slice_reads as fsr
from m100.passes.schedule.from_ir import movement as fm
from m100.passes.schedule.from_ir import strided_views as sv
from m100.passes.schedule.graph import Op, OpGraph, Tensor
from m100.passes.schedule.ir_facts import Lowering
from m100.tools import driver

T, N, HD = 16, 4, 16
HALF = HD // 2


def _ints(name, vals):
    return nh.from_array(np.array(vals, np.int64), name)


def _model():
    """RoPE on the halves (the builder's ``PREFILL_ROPE = "halves"`` form, f32): x [T, N*HD]
    viewed [T, N, HD], tables c, s [T, 1, HD] read broadcast over the heads;
    y_lo = x_lo * c_lo - x_hi * s_lo, y_hi = x_hi * c_hi + x_lo * s_hi (slices of the last axis),
    Y = Concat([1, T, N, HALF] parts, axis 0); yq = Transpose(Y, [2, 1, 0, 3]) reshaped
    [N, T, HD] (an output: the reshape's input written in place there); yk = Transpose(Y,
    [2, 0, 3, 1]) reshaped [1, N, HD, T] (the same)."""
    nodes, inits = [], [_ints("ax2", [2]), _ints("one", [1]), _ints("z", [0]),
                        _ints("h", [HALF]), _ints("e", [HD]),
                        _ints("s3", [T, N, HD]), _ints("sp", [1, T, N, HALF]),
                        _ints("sq", [N, T, HD]), _ints("sk", [1, N, HD, T])]

    def halves(t):
        nodes.append(h.make_node("Slice", [t, "z", "h", "ax2", "one"], [t + "_lo"]))
        nodes.append(h.make_node("Slice", [t, "h", "e", "ax2", "one"], [t + "_hi"]))
        return t + "_lo", t + "_hi"
    nodes.append(h.make_node("Reshape", ["x", "s3"], ["x3"]))
    xl, xh = halves("x3")
    cl, ch = halves("c")
    sl, sh = halves("s")
    nodes += [h.make_node("Mul", [xl, cl], ["a"]), h.make_node("Mul", [xh, sl], ["b"]),
              h.make_node("Sub", ["a", "b"], ["ylo"]),
              h.make_node("Mul", [xh, ch], ["p"]), h.make_node("Mul", [xl, sh], ["q"]),
              h.make_node("Add", ["p", "q"], ["yhi"]),
              h.make_node("Reshape", ["ylo", "sp"], ["ylo4"]),
              h.make_node("Reshape", ["yhi", "sp"], ["yhi4"]),
              h.make_node("Concat", ["ylo4", "yhi4"], ["Y"], axis=0),
              h.make_node("Transpose", ["Y"], ["tq"], perm=[2, 1, 0, 3]),
              h.make_node("Reshape", ["tq", "sq"], ["yq"]),
              h.make_node("Transpose", ["Y"], ["tk"], perm=[2, 0, 3, 1]),
              h.make_node("Reshape", ["tk", "sk"], ["yk"])]
    g = h.make_graph(nodes, "rope_halves",
                     [h.make_tensor_value_info("x", TP.FLOAT, [T, N * HD]),
                      h.make_tensor_value_info("c", TP.FLOAT, [T, 1, HD]),
                      h.make_tensor_value_info("s", TP.FLOAT, [T, 1, HD])],
                     [h.make_tensor_value_info("yq", TP.FLOAT, [N, T, HD]),
                      h.make_tensor_value_info("yk", TP.FLOAT, [1, N, HD, T])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _dmas(program) -> int:
    return sum(1 for _, ins in program.instructions() if type(ins).__name__ == "Dma")


def _want(x, c, s):
    """Rotate-half RoPE from its definition: x * C + [-x_hi, x_lo] * S (f32 ops as the CVU)."""
    x3 = x.reshape(T, N, HD)
    rot = np.concatenate([-x3[..., HALF:], x3[..., :HALF]], axis=-1)
    r = (x3 * c + rot * s).astype(np.float32)              # [T, N, HD]
    return {"yq": r.transpose(1, 0, 2), "yk": r.transpose(1, 2, 0)[None]}


def test_rope_halves_read_in_place_exact_fewer_dmas(monkeypatch):
    m = _model()
    rng = np.random.default_rng(3)
    feed = {"x": rng.standard_normal((T, N * HD)).astype(np.float32),
            "c": rng.standard_normal((T, 1, HD)).astype(np.float32),
            "s": rng.standard_normal((T, 1, HD)).astype(np.float32)}
    want = _want(feed["x"], feed["c"], feed["s"])
    on = driver.compile(m, machine="tiny")
    got = driver.run(on.program, feed)
    assert got.ok and not got.reports
    for k, v in want.items():  # f32: x*c and rot*s each rounded to f32, then their sum
        np.testing.assert_array_equal(got.outputs[k].reshape(v.shape), v)
    # without the folds: the four halves of x and the tables are slice copies, the two
    # reshapes into the outputs are copies
    monkeypatch.setattr(fsr, "fold", lambda op, views=None, dead=None: False)
    monkeypatch.setattr(fm, "find_output_reshapes", lambda g, low, views: set())
    monkeypatch.setattr(sv, "ENABLED", False)  # (the slices not strided views: session 17)
    off = driver.compile(m, machine="tiny")
    got_off = driver.run(off.program, feed)
    assert got_off.ok and not got_off.reports
    for k in want:
        np.testing.assert_array_equal(got.outputs[k], got_off.outputs[k])
    assert _dmas(on.program) <= _dmas(off.program) - 8


def test_fold_slice_reads_rules():
    """What is folded: a whole-block slice (offset and source size multiples of its size) read
    only by elementwise generics; not a slice that is not a whole block, nor one that something
    else reads (here the function's result)."""
    from xdsl.context import Context
    from xdsl.dialects.builtin import ModuleOp

    from m100.frontend.onnx_import import load_onnx
    from m100.passes.graph.m100_graph import M100Graph

    def graph(nodes, outs, extra=()):
        g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [4, 8])],
                         [h.make_tensor_value_info(o, TP.FLOAT, [4, sz]) for o, sz in outs],
                         [_ints("ax1", [1]), _ints("z", [0]), _ints("c1", [1]),
                          _ints("c4", [4]), _ints("c5", [5]), _ints("c8", [8]),
                          nh.from_array(np.array(2.0, np.float32), "two"), *extra])
        mod = load_onnx(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]))
        assert isinstance(mod, ModuleOp)
        M100Graph().apply(Context(), mod)
        mod.verify()
        return str(mod)
    folded = graph([h.make_node("Slice", ["x", "c4", "c8", "ax1"], ["hi"]),
                    h.make_node("Mul", ["hi", "two"], ["y"])], [("y", 4)])
    assert "tensor.extract_slice" not in folded and "(d0, 1, d1)" in folded
    odd = graph([h.make_node("Slice", ["x", "c1", "c5", "ax1"], ["mid"]),
                 h.make_node("Mul", ["mid", "two"], ["y"])], [("y", 4)])
    assert "tensor.extract_slice" in odd                  # offset 1 of size 4: not a block
    ret = graph([h.make_node("Slice", ["x", "z", "c4", "ax1"], ["lo"]),
                 h.make_node("Mul", ["lo", "two"], ["y"])], [("y", 4), ("lo", 4)])
    assert "tensor.extract_slice" in ret                  # also a result of the function


def test_find_output_reshapes_rules():
    g = OpGraph([Tensor(*t) for t in [
        ("x", (4, 8), "f32", "input"), ("t", (8, 4)), ("y", (32,), "f32", "output"),
        ("u", (8, 4)), ("z", (32,), "f32", "output"), ("w", (8, 4)),
        ("v", (32,), "f32", "output")]])
    low = {}
    for name, kind, ins, outs in [("tr", "transpose", ["x"], ["t"]), ("ry", "reshape", ["t"], ["y"]),
                                  ("tu", "transpose", ["x"], ["u"]), ("rz", "reshape", ["u"], ["z"]),
                                  ("ux", "gcopy", ["u"], ["w"]), ("rv", "reshape", ["x"], ["v"])]:
        g.add_op(Op(name, "dtdu.copy", tuple(ins), tuple(outs)))
        low[name] = Lowering(kind, params={"perm": [1, 0]} if kind == "transpose" else {})
    views = fm.find_views(g, low, 64)
    assert views == {}
    # t is read by ry only: written in place into y; u has another reader; x is a model input
    assert fm.find_output_reshapes(g, low, views) == {"ry"}
    assert views == {"t": ("y", 0)}

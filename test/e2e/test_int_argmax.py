"""Integer ArgMax / ArgMin through the whole stack (compile for ``tiny`` + interpreter), compared
exactly with numpy written from the ONNX definition (the index of the first -- or, with
``select_last_index``, the last -- extreme along the axis).

torch-mlir lowers them as a max-with-index generic whose compare is ``cmpi sgt/sge/slt/sle`` from
the type's lowest/highest value (``passes/schedule/ir_index.argmax_info``; refused before), the
CSU argmax routine computes it; uint8 inputs are zero-extended to int32 first
(``frontend/onnx_rewrite_unsigned``: torch-mlir compares them unsigned, the CSU signed).
Inputs: every value of the 8-bit types, rows of only the extreme values (the arg-max of a row of
only the type's minimum is the first or the last index, from the init value alone), and for the
wider types a few values with many ties, extremes included.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h

from m100.tools.onnx_backend import M100Backend

SHAPE = (4, 8, 10)
#: (axis, keepdims, select_last_index)
VARIANTS = [(2, 1, 0), (0, 0, 1), (1, 1, 1), (-1, 0, 0)]


def _inputs(dt: np.dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lo, hi = int(np.iinfo(dt).min), int(np.iinfo(dt).max)
    n = int(np.prod(SHAPE))
    if dt.itemsize == 1:  # every value once, then random values
        vals = np.concatenate([np.arange(lo, hi + 1), rng.integers(lo, hi, n - 256, endpoint=True)])
    else:  # many ties, extremes included
        vals = rng.choice(np.array([lo, lo + 1, -1, 0, 1, hi - 1, hi], np.int64), n)
    x = rng.permutation(vals).astype(dt).reshape(SHAPE)
    x[0, 0, :] = lo  # rows of only the lowest / highest value
    x[1, 1, :] = hi
    x[2, :, 3] = lo
    x[3, :, 4] = hi
    x[:, 5, 6] = hi
    x[:, 6, 7] = lo
    return x


def _oracle(x: np.ndarray, op: str, axis: int, keep: int, last: int) -> np.ndarray:
    v = x.astype(np.int64)
    if op == "ArgMin":
        v = -v
    ext = v.max(axis=axis, keepdims=True)
    hit = v == ext
    n = x.shape[axis]
    idx = np.arange(n).reshape([n if d == axis % x.ndim else 1 for d in range(x.ndim)])
    pick = np.where(hit, idx, -1).max(axis=axis) if last else np.where(hit, idx, n).min(axis=axis)
    pick = pick.astype(np.int64)
    return np.expand_dims(pick, axis) if keep else pick


def _model(dt: np.dtype):
    tt = h.np_dtype_to_tensor_dtype(dt)
    nodes, outs = [], []
    zero = np.zeros(SHAPE, dt)
    for op in ("ArgMax", "ArgMin"):
        for i, (axis, keep, last) in enumerate(VARIANTS):
            y = f"{op}_{i}"
            nodes.append(h.make_node(op, ["x"], [y], axis=axis, keepdims=keep,
                                     select_last_index=last))
            outs.append(h.make_tensor_value_info(y, onnx.TensorProto.INT64,
                                                 _oracle(zero, op, axis, keep, last).shape))
    g = h.make_graph(nodes, "int_argmax", [h.make_tensor_value_info("x", tt, SHAPE)], outs)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.mark.onnx_op("ArgMax", "ArgMin", kind="oracle")
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32"])
def test_integer_argmax_argmin_exact(dtype):
    dt = np.dtype(dtype)
    rep = M100Backend.prepare(_model(dt), machine="tiny")
    for seed in (0, 1):
        x = _inputs(dt, seed)
        got = rep.run([x])
        k = 0
        for op in ("ArgMax", "ArgMin"):
            for axis, keep, last in VARIANTS:
                want = _oracle(x, op, axis, keep, last)
                assert got[k].shape == want.shape, (op, axis, keep, last)
                np.testing.assert_array_equal(got[k], want,
                                              err_msg=f"{op} axis={axis} keep={keep} last={last}")
                k += 1


@pytest.mark.onnx_op("ArgMax", kind="negative")
@pytest.mark.parametrize("dtype", ["uint16", "int64"])
def test_integer_argmax_unsupported_types_are_one_clear_error(dtype, tmp_path):
    """uint16 (torch-mlir compares it unsigned and can not Cast from it) and int64 (beyond the CSU
    routine's 32-bit compare) are refused in one line naming the op, never a wrong index."""
    import subprocess
    import sys

    dt = np.dtype(dtype)
    tt = h.np_dtype_to_tensor_dtype(dt)
    g = h.make_graph([h.make_node("ArgMax", ["x"], ["y"], axis=1)], "g",
                     [h.make_tensor_value_info("x", tt, (3, 5))],
                     [h.make_tensor_value_info("y", onnx.TensorProto.INT64, (3, 1))])
    p = tmp_path / "m.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), p)
    r = subprocess.run([sys.executable, "-m", "m100.tools.m100_cli", "compile", str(p), "--machine",
                        "tiny", "-o", str(tmp_path / "m.bin")], capture_output=True, text=True)
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "arg-max" in err[0] and "Traceback" not in r.stderr, r.stderr


@pytest.mark.onnx_op("ArgMax", "ArgMin", "ReduceMax", "ReduceMin", kind="oracle")
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_value_and_index_of_one_input(dtype):
    """ReduceMax + ArgMax (and ReduceMin + ArgMin, the last extreme) of one input and axis:
    torch-mlir merges each pair into one two-result generic, which ``split-value-index`` splits
    (refused before). Values with many ties; numpy from the definitions."""
    from onnx import numpy_helper as nh

    dt = np.dtype(dtype)
    tt = h.np_dtype_to_tensor_dtype(dt)
    rng = np.random.default_rng(3)
    x = rng.integers(-4, 5, SHAPE).astype(dt)
    x[0, 0, :] = -4
    nodes = [h.make_node("ReduceMax", ["x", "a2"], ["vmax"], keepdims=1),
             h.make_node("ArgMax", ["x"], ["imax"], axis=2, keepdims=1),
             h.make_node("ReduceMin", ["x", "a0"], ["vmin"], keepdims=0),
             h.make_node("ArgMin", ["x"], ["imin"], axis=0, keepdims=0, select_last_index=1)]
    wants = [x.max(axis=2, keepdims=True), _oracle(x, "ArgMax", 2, 1, 0),
             x.min(axis=0), _oracle(x, "ArgMin", 0, 0, 1)]
    outs = [h.make_tensor_value_info(n, tt if n[0] == "v" else onnx.TensorProto.INT64, w.shape)
            for n, w in zip(("vmax", "imax", "vmin", "imin"), wants)]
    g = h.make_graph(nodes, "value_index", [h.make_tensor_value_info("x", tt, SHAPE)], outs,
                     [nh.from_array(np.array([2], np.int64), "a2"),
                      nh.from_array(np.array([0], np.int64), "a0")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    got = M100Backend.prepare(m, machine="tiny").run([x])
    for name, gv, want in zip(("vmax", "imax", "vmin", "imin"), got, wants):
        assert gv.shape == want.shape, name
        np.testing.assert_array_equal(gv, want, err_msg=name)


@pytest.mark.onnx_op("ArgMax", "ArgMin", kind="oracle")
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_argmax_over_an_axis_of_size_one(dtype):
    """canonicalize folds the index of a reduced dimension of size 1 into a constant; the generic
    was then taken for a plain reduction and refused (found by the integer fuzzer, seed 804)."""
    dt = np.dtype(dtype)
    tt = h.np_dtype_to_tensor_dtype(dt)
    x = np.arange(-6, 6).astype(dt).reshape(3, 1, 4)
    nodes = [h.make_node("ArgMax", ["x"], ["a"], axis=1, keepdims=1),
             h.make_node("ArgMin", ["x"], ["b"], axis=-2, keepdims=0, select_last_index=1),
             h.make_node("ReduceMax", ["x"], ["v"], axes=[1], keepdims=1)]
    wants = [_oracle(x, "ArgMax", 1, 1, 0), _oracle(x, "ArgMin", -2, 0, 1), x.max(1, keepdims=True)]
    outs = [h.make_tensor_value_info(n, onnx.TensorProto.INT64 if n != "v" else tt, w.shape)
            for n, w in zip("abv", wants)]
    g = h.make_graph(nodes, "size1", [h.make_tensor_value_info("x", tt, x.shape)], outs)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    got = M100Backend.prepare(m, machine="tiny").run([x])
    for name, gv, want in zip("abv", got, wants):
        np.testing.assert_array_equal(gv, want, err_msg=name)

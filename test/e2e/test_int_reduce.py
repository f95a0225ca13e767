"""Integer ReduceMax / ReduceMin through the whole stack (compile for ``tiny`` + interpreter),
compared exactly with numpy (``np.max`` / ``np.min`` over the ONNX node's axes and keepdims).

torch-mlir lowers them as a max-with-index generic (the index result unused): ``maxsi``/``minsi``
for signed types, ``maxui``/``minui`` for uint8; the CVU's integer lane reduces them exactly
(``passes/schedule/from_ir/cvu.py``: the neutral init is the type's extreme value; unsigned values
are zero-extended, reduced and stored back as the type's bits). Before, every one was refused
(and uint8 ones went through the order flip of ``onnx_rewrite_unsigned``, wrong with ``maxui``).

Each model holds one node per (op, axes, keepdims) variant, so one compile covers them all; the
inputs take every value of the 8-bit types (each exactly once, shuffled) plus rows of only the
extreme values (a reduction whose result is the neutral element), and the i32 extremes.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h
from onnx import numpy_helper as nh

from m100.tools.onnx_backend import M100Backend

SHAPE = (4, 8, 10)
#: (axes or None for all, keepdims); negative axes, a middle axis, two axes, all axes
VARIANTS = [((2,), 1), ((2,), 0), ((0,), 1), ((1,), 0), ((-1, 0), 1), ((0, 2), 0), (None, 1),
            (None, 0)]


def _inputs(dt: np.dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dt == np.bool_:
        x = rng.integers(0, 2, SHAPE).astype(bool)
        x[0, 0, :], x[1, 1, :] = False, True
        return x
    lo, hi = int(np.iinfo(dt).min), int(np.iinfo(dt).max)
    if dt.itemsize == 8 or dt == np.uint32:
        # held as i32 on the M100 (graph inputs range-checked at run time): the i32 extremes,
        # [0, 2**31) for the unsigned types
        lo, hi = max(lo, -2**31), 2**31 - 1
    n = int(np.prod(SHAPE))
    if dt.itemsize == 1:  # every value once, then random values
        vals = np.concatenate([np.arange(lo, hi + 1), rng.integers(lo, hi, n - 256, endpoint=True)])
        x = rng.permutation(vals).astype(dt).reshape(SHAPE)
    else:
        x = rng.integers(lo, hi, SHAPE, endpoint=True).astype(dt)
    x[0, 0, :] = lo  # a row of the smallest value: max == min == the neutral of max
    x[1, 1, :] = hi
    x[2, :, 3] = hi
    x[3, 2, 0] = lo
    return x


def _model(dt: np.dtype):
    tt = h.np_dtype_to_tensor_dtype(dt)
    nodes, outs, inits = [], [], []
    for op in ("ReduceMax", "ReduceMin"):
        for i, (axes, keep) in enumerate(VARIANTS):
            y = f"{op}_{i}"
            ins = ["x"]
            if axes is not None:
                inits.append(nh.from_array(np.array(axes, np.int64), f"axes_{op}_{i}"))
                ins.append(f"axes_{op}_{i}")
            nodes.append(h.make_node(op, ins, [y], keepdims=keep))
            outs.append(h.make_tensor_value_info(y, tt, _oracle(np.zeros(SHAPE, dt), op, axes,
                                                                keep).shape))
    g = h.make_graph(nodes, "int_reduce", [h.make_tensor_value_info("x", tt, SHAPE)], outs, inits)
    # bool: opset 20
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20 if dt == np.bool_ else 18)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _oracle(x, op, axes, keep):
    f = np.max if op == "ReduceMax" else np.min
    return np.asarray(f(x, axis=None if axes is None else tuple(axes), keepdims=bool(keep)))


@pytest.mark.onnx_op("ReduceMax", "ReduceMin", kind="oracle")
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "uint32", "bool"])
def test_integer_reduce_max_min_exact(dtype):
    dt = np.dtype(dtype)
    model = _model(dt)
    rep = M100Backend.prepare(model, machine="tiny")
    for seed in (0, 1):
        x = _inputs(dt, seed)
        got = rep.run([x])
        k = 0
        for op in ("ReduceMax", "ReduceMin"):
            for axes, keep in VARIANTS:
                want = _oracle(x, op, axes, keep)
                assert got[k].dtype == dt and got[k].shape == want.shape, (op, axes, keep)
                np.testing.assert_array_equal(got[k], want, err_msg=f"{op} axes={axes} keep={keep}")
                k += 1


#: op -> numpy from its ONNX definition (integers: exact)
SUMS = {"ReduceSum": np.sum, "ReduceProd": np.prod,
        "ReduceL1": lambda x, **k: np.sum(np.abs(x), **k),
        "ReduceSumSquare": lambda x, **k: np.sum(x * x, **k)}


@pytest.mark.onnx_op(*SUMS, kind="oracle")
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_sum_prod_exact(dtype):
    """The integer sum-like reductions (addi / muli bodies, refused before as well) of values whose
    results fit i32, over a last, a first and two axes, kept or not."""
    dt = np.dtype(dtype)
    tt = h.np_dtype_to_tensor_dtype(dt)
    rng = np.random.default_rng(5)
    x = rng.integers(-2000, 2000, SHAPE).astype(dt)
    p = rng.integers(-3, 4, SHAPE).astype(dt)  # ReduceProd: products of at most 10 factors
    cases = [(op, axes, keep) for op in SUMS for axes, keep in (((2,), 1), ((0,), 0), ((0, 2), 1))]
    nodes, outs, inits, wants = [], [], [], []
    for i, (op, axes, keep) in enumerate(cases):
        src = "p" if op == "ReduceProd" else "x"
        inits.append(nh.from_array(np.array(axes, np.int64), f"ax{i}"))
        want = np.asarray(SUMS[op]((p if src == "p" else x).astype(np.int64), axis=axes,
                                   keepdims=bool(keep)))
        assert np.abs(want).max() < 2**31  # exact in the i32 integer lane (and in ONNX's type)
        wants.append(want.astype(dt))
        nodes.append(h.make_node(op, [src, f"ax{i}"], [f"y{i}"], keepdims=keep))
        outs.append(h.make_tensor_value_info(f"y{i}", tt, want.shape))
    g = h.make_graph(nodes, "int_sums", [h.make_tensor_value_info("x", tt, SHAPE),
                                         h.make_tensor_value_info("p", tt, SHAPE)], outs, inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(model, full_check=True)
    got = M100Backend.prepare(model, machine="tiny").run([x, p])
    for (op, axes, keep), gv, want in zip(cases, got, wants):
        assert gv.dtype == dt
        np.testing.assert_array_equal(gv, want, err_msg=f"{op} axes={axes} keep={keep}")


def test_integer_sum_overflow_is_a_fault_not_a_wrapped_value():
    """An int32 ReduceSum whose result leaves i32 (ONNX would wrap) is the integer lane's run-time
    fault, reported by the interpreter: never a plausible wrong number."""
    from m100.tools.onnx_backend import InterpreterReport

    tt = h.np_dtype_to_tensor_dtype(np.dtype(np.int32))
    g = h.make_graph([h.make_node("ReduceSum", ["x", "ax"], ["y"], keepdims=0)], "ovf",
                     [h.make_tensor_value_info("x", tt, [2, 4])],
                     [h.make_tensor_value_info("y", tt, [2])],
                     [nh.from_array(np.array([1], np.int64), "ax")])
    rep = M100Backend.prepare(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]),
                              machine="tiny")
    small = np.arange(8, dtype=np.int32).reshape(2, 4)
    np.testing.assert_array_equal(rep.run([small])[0], small.sum(axis=1))
    with pytest.raises(InterpreterReport, match="integer overflow"):
        rep.run([np.full((2, 4), 2**30, np.int32)])

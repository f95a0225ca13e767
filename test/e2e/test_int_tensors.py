"""Integer tensors through the whole stack (issue 11 item 4): ONNX graphs on int64/int32/bool
tensors compiled, run on the interpreter and compared exactly with onnxruntime; the i64 -> i32
narrowing refuses what does not fit with one line."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from m100.tools import driver
from m100.tools.m100_cli import main as m100

vi = h.make_tensor_value_info


def _model(nodes, ins, outs, inits=()):
    g = h.make_graph(nodes, "ints", ins, outs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m)
    return m


def int_graph():
    """Where(a < b, a + b, a / b) on int64 (Div truncates), Equal/Not/And/Or/Xor on bools,
    Cast float -> int32 (truncation) and int64 -> float, Abs/Neg/Max/Min/Clip on int32."""
    S = [3, 8]
    nodes = [
        h.make_node("Less", ["a", "b"], ["lt"]), h.make_node("Add", ["a", "b"], ["s"]),
        h.make_node("Div", ["a", "nz"], ["q"]), h.make_node("Where", ["lt", "s", "q"], ["w"]),
        h.make_node("Equal", ["a", "b"], ["eq"]), h.make_node("Not", ["eq"], ["ne"]),
        h.make_node("GreaterOrEqual", ["x", "y"], ["ge"]),
        h.make_node("And", ["ne", "ge"], ["and"]), h.make_node("Or", ["lt", "ge"], ["or"]),
        h.make_node("Xor", ["and", "or"], ["xor"]),
        h.make_node("Cast", ["x"], ["xi"], to=T.INT32),
        h.make_node("Cast", ["a"], ["af"], to=T.FLOAT), h.make_node("Mul", ["af", "x"], ["ax"]),
        h.make_node("Abs", ["xi"], ["xa"]), h.make_node("Neg", ["xa"], ["xn"]),
        h.make_node("Max", ["xn", "i32"], ["mx"]), h.make_node("Min", ["mx", "xi"], ["mn"]),
        h.make_node("Clip", ["mn", "lo", "hi"], ["cl"]),
    ]
    ins = [vi("a", T.INT64, S), vi("b", T.INT64, S), vi("nz", T.INT64, S), vi("x", T.FLOAT, S),
           vi("y", T.FLOAT, S), vi("i32", T.INT32, S)]
    outs = [vi("w", T.INT64, S), vi("xor", T.BOOL, S), vi("ax", T.FLOAT, S), vi("cl", T.INT32, S)]
    inits = [h.make_tensor("lo", T.INT32, [], [-3]), h.make_tensor("hi", T.INT32, [], [2])]
    return _model(nodes, ins, outs, inits)


def int_inputs(rng):
    S = (3, 8)
    nz = rng.integers(1, 9, size=S) * rng.choice([-1, 1], size=S)
    return {"a": rng.integers(-50, 50, size=S), "b": rng.integers(-50, 50, size=S), "nz": nz,
            "x": (rng.standard_normal(S) * 4).astype(np.float32),
            "y": (rng.standard_normal(S) * 4).astype(np.float32),
            "i32": rng.integers(-6, 6, size=S).astype(np.int32)}


def test_int_graph_matches_onnxruntime_exactly():
    rng = np.random.default_rng(11)
    cr = driver.compile(int_graph(), machine="tiny")
    ck = driver.check_compiled(cr, inputs=int_inputs(rng))
    assert ck.passed, ck.summary()
    # integer outputs are compared exactly (max abs error 0), not within a float tolerance
    assert all(e.max_abs == 0 for e in ck.errors if e.name != "ax"), ck.summary()


def test_m100_check_feeds_declared_integer_dtypes(tmp_path, capsys):
    p = tmp_path / "ints.onnx"
    onnx.save(_model([h.make_node("Equal", ["a", "b"], ["e"]),
                      h.make_node("Where", ["e", "x", "y"], ["o"])],
                     [vi("a", T.INT64, [2, 5]), vi("b", T.INT64, [2, 5]),
                      vi("x", T.FLOAT, [2, 5]), vi("y", T.FLOAT, [2, 5])],
                     [vi("o", T.FLOAT, [2, 5])]), p)
    assert m100(["check", str(p), "--machine", "tiny"]) == 0
    assert "PASS" in capsys.readouterr().out


def test_int64_input_outside_i32_is_one_line_error(tmp_path, capsys):
    m = _model([h.make_node("Add", ["a", "a"], ["o"])], [vi("a", T.INT64, [1, 2])],
               [vi("o", T.INT64, [1, 2])])
    cr = driver.compile(m, machine="tiny")
    with pytest.raises(Exception) as ei:
        driver.run(cr.program, {"a": np.array([[1, 1 << 40]], np.int64)})
    msg = str(ei.value)
    assert "\n" not in msg and "do not fit the program's i32" in msg


def test_i32_overflow_is_a_fault_not_a_wrong_number():
    # int64 arithmetic whose result leaves i32: a run-time fault of the integer lane (an i64
    # tensor is held as i32), never a silently wrapped value
    m = _model([h.make_node("Mul", ["a", "a"], ["o"])], [vi("a", T.INT64, [1, 2])],
               [vi("o", T.INT64, [1, 2])])
    cr = driver.compile(m, machine="tiny")
    res = driver.run(cr.program, {"a": np.array([[3, 1 << 20]], np.int64)})
    assert any("integer overflow" in r.message for r in res.reports)


# --- index ops on the CSU: Gather, GatherElements, ArgMax/ArgMin ------------------------------
def _check(m, inputs):
    cr = driver.compile(m, machine="tiny")
    ck = driver.check_compiled(cr, inputs=inputs)
    assert ck.passed, ck.summary()
    return cr


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_any_axis_negative_indices(axis):
    rng = np.random.default_rng(3 + axis)
    shape = [6, 5, 4]
    n = shape[axis]
    m = _model([h.make_node("Gather", ["d", "i"], ["o"], axis=axis)],
               [vi("d", T.FLOAT, shape), vi("i", T.INT64, [2, 3])],
               [vi("o", T.FLOAT, shape[:axis % 3] + [2, 3] + shape[axis % 3 + 1:])])
    idx = rng.integers(-n, n, size=(2, 3))
    cr = _check(m, {"d": rng.standard_normal(shape).astype(np.float32), "i": idx})
    assert any(i.MNEMONIC == "csu.call" for _, i in cr.program.instructions())


def test_gather_embedding_of_a_constant_table():
    rng = np.random.default_rng(5)
    table = rng.standard_normal((32, 8)).astype(np.float32)
    m = _model([h.make_node("Gather", ["E", "ids"], ["o"])], [vi("ids", T.INT64, [1, 6])],
               [vi("o", T.FLOAT, [1, 6, 8])], [onnx.numpy_helper.from_array(table, "E")])
    _check(m, {"ids": rng.integers(0, 32, size=(1, 6))})


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_elements(axis):
    rng = np.random.default_rng(7 + axis)
    m = _model([h.make_node("GatherElements", ["d", "i"], ["o"], axis=axis)],
               [vi("d", T.FLOAT, [4, 5]), vi("i", T.INT64, [3, 5] if axis == 0 else [4, 3])],
               [vi("o", T.FLOAT, [3, 5] if axis == 0 else [4, 3])])
    n = [4, 5][axis]
    idx = rng.integers(-n, n, size=(3, 5) if axis == 0 else (4, 3))
    _check(m, {"d": rng.standard_normal((4, 5)).astype(np.float32), "i": idx})


@pytest.mark.parametrize("op,axis,keepdims,last", [("ArgMax", 0, 1, 0), ("ArgMin", 1, 0, 1),
                                                   ("ArgMax", -1, 1, 1), ("ArgMin", 2, 0, 0)])
def test_argmax_argmin_any_axis(op, axis, keepdims, last):
    rng = np.random.default_rng(abs(axis) + 3 * keepdims + 5 * last)
    m = _model([h.make_node(op, ["x"], ["i"], axis=axis, keepdims=keepdims,
                            select_last_index=last)],
               [vi("x", T.FLOAT, [3, 4, 5])],
               [vi("i", T.INT64, [1 if d == axis % 3 else n for d, n in enumerate([3, 4, 5])
                                  if keepdims or d != axis % 3])])
    x = rng.integers(-2, 3, size=(3, 4, 5)).astype(np.float32)  # ties: first vs last matters
    _check(m, {"x": x})


# --- a token-id LLaMA-architecture LM: int64 ids -> Gather -> layer -> LM head -> ArgMax -------
@pytest.mark.slow
def test_token_id_llama_lm_with_greedy_next_token():
    """The 1-layer LLaMA LM of test/data (vocab 128, int64 ids [1, 8]) with an ArgMax over the
    logits appended: token ids in, logits and next-token ids out, against onnxruntime (logits
    within the check tolerance, ids exactly)."""
    from pathlib import Path

    m = onnx.load(str(Path(__file__).resolve().parents[1] / "data" / "llama_lm_small.onnx"))
    y = m.graph.output[0].name
    m.graph.node.append(h.make_node("ArgMax", [y], ["next_id"], axis=-1, keepdims=0))
    m.graph.output.append(vi("next_id", T.INT64, [1, 8]))
    cr = driver.compile(m, machine="tiny")
    assert any(i.MNEMONIC == "csu.call" for _, i in cr.program.instructions())  # the lookup
    rng = np.random.default_rng(0)
    for _ in range(2):
        ck = driver.check_compiled(cr, inputs={"x": rng.integers(0, 128, size=(1, 8))})
        assert ck.passed, ck.summary()
        assert next(e for e in ck.errors if e.name == "next_id").max_abs == 0


@pytest.mark.parametrize("shape,axis,k,largest,dt", [([3, 6], 1, 2, 1, T.FLOAT),
                                                     ([4, 5, 3], 1, 3, 0, T.FLOAT),
                                                     ([4, 7], -1, 3, 1, T.INT64)])
def test_topk_values_and_indices(shape, axis, k, largest, dt):
    rng = np.random.default_rng(k + largest)
    oshape = list(shape)
    oshape[axis] = k
    m = _model([h.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)],
               [vi("x", dt, shape)], [vi("v", dt, oshape), vi("i", T.INT64, oshape)],
               [h.make_tensor("k", T.INT64, [1], [k])])
    x = rng.integers(-3, 3, size=shape)  # ties: ONNX orders them by the lower index
    _check(m, {"x": x.astype(np.float32 if dt == T.FLOAT else np.int64)})


def test_reference_executor_runs_the_topk_sort():
    # the graph-level oracle (frontend/reference_sort.py) on torch-mlir's sort of TopK
    from m100.frontend.onnx_import import load_onnx
    from m100.frontend.reference import run as ref_run
    from m100.tools.onnx_backend import onnxruntime_run

    m = _model([h.make_node("TopK", ["x", "k"], ["v", "i"], axis=0, largest=0)],
               [vi("x", T.INT64, [6, 3])], [vi("v", T.INT64, [4, 3]), vi("i", T.INT64, [4, 3])],
               [h.make_tensor("k", T.INT64, [1], [4])])
    x = np.random.default_rng(2).integers(-2, 2, size=(6, 3))
    for got, want in zip(ref_run(load_onnx(m), [x]), onnxruntime_run(m, [x])):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op,dt", [("Add", np.int8), ("Sub", np.int8), ("Mul", np.int8),
                                   ("Add", np.int16), ("Mul", np.int16), ("Add", np.uint8),
                                   ("Mul", np.uint8), ("Sub", np.uint16)])
def test_narrow_integer_arithmetic_wraps(op, dt):
    """ONNX Add/Sub/Mul of 8/16-bit integers wrap modulo 2**w (like numpy; arith.addi too): full
    range inputs overflow in most elements. The interpreter faulted at the store ('integer result
    outside the i8 output range') and unsigned inputs >= 128 were refused by ``driver.run``."""
    et = h.np_dtype_to_tensor_dtype(np.dtype(dt))
    m = _model([h.make_node(op, ["a", "b"], ["y"])], [vi("a", et, [4, 16]), vi("b", et, [4, 16])],
               [vi("y", et, [4, 16])])
    info, rng = np.iinfo(dt), np.random.default_rng(3)
    a, b = (rng.integers(info.min, info.max, size=(4, 16), endpoint=True).astype(dt)
            for _ in range(2))
    want = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op](a, b)  # wraps
    assert (want.astype(np.int64) != {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op](
        a.astype(np.int64), b.astype(np.int64))).any()  # the case does overflow
    res = driver.run(driver.compile(m, machine="tiny", tpbs=2).program, {"a": a, "b": b})
    assert res.ok, res.reports
    got = np.asarray(res.outputs["y"]).reshape(4, 16)
    assert np.array_equal(got.view(dt) if got.dtype.itemsize == want.dtype.itemsize else got, want)

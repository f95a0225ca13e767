"""Differential fuzzing of the whole stack against onnxruntime (issue 10).

Hypothesis draws random ONNX graphs (``m100.tools.fuzz_onnx.random_graph``: MatMul, Gemm with
alpha/beta/transA/transB, Conv (+bias), pooling, unary and broadcasting binary ops, Softmax,
LayerNorm chains, Reshape/Transpose/Concat, residual adds; M = 1 and size-1 dims; operands as
initializers or graph inputs). Each graph is compiled for ``tiny`` and ``m100``, run on the reference
interpreter (race and deadlock checks on) and compared with onnxruntime on the same inputs:
``|got - want| <= 1e-4 * max(1, max|want|) + 1e-3 * |want|`` elementwise (f32 with a different
summation order). A compile refusal that is one line of an ``M100Error`` subclass is allowed (and
counted); a numeric mismatch, an interpreter report, any other exception or a multi-line error
fails, hypothesis shrinks the graph, and the minimal failing model and its inputs are written to
``out/fuzz/last_failure.onnx`` / ``.npz`` (replay with ``m100 check``/``m100-sim``).

Integer graphs (``m100.tools.fuzz_int.random_int_graph``: int8/int16/int32/uint8/uint16, wrapping
arithmetic, Div, bit ops, compares + Where, Casts, reductions, MatMulInteger) are compared
bit-exactly with onnxruntime, or with ONNX's reference evaluator where onnxruntime lacks the op.

Budgets: the default run draws a few graphs of each family (about 40-60 s CPU); the slow tier draws
500 float and 300 integer graphs.
``M100_FUZZ_SEED`` changes the (otherwise fixed) seed.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from m100.tools.fuzz_int import random_int_graph
from m100.tools.fuzz_graph import HypothesisChoices, random_graph
from m100.tools.compare import F16_TOL
from m100.tools.fuzz_onnx import ATOL, RTOL, Campaign, differential, f16_graph, save_failure

SEED = int(os.environ.get("M100_FUZZ_SEED", "20261201"))
OUT = Path(os.environ.get("M100_FUZZ_OUT", "out/fuzz"))
MACHINES = ("tiny", "m100")


def _f16_random_graph(c):
    """The float family's graphs in f16 (``fuzz_onnx.f16_graph``)."""
    return f16_graph(random_graph(c))


def _run(data, camp: Campaign, gen=random_graph) -> None:
    fg = gen(HypothesisChoices(data))
    tol = F16_TOL if gen is _f16_random_graph else None
    outs = differential(fg, MACHINES, rtol=tol or RTOL, atol=tol or ATOL)
    camp.add(camp.graphs, fg, outs)
    fails = [o for o in outs if o.status == "fail"]
    if fails:
        path = save_failure(fg, OUT)
        pytest.fail(f"{fg.describe()}\nsaved to {path}\n"
                    + "\n".join(f"{o.machine}: {o.detail}" for o in fails), pytrace=False)


def _fuzz(n: int, gen=random_graph):
    camp = Campaign()

    @seed(SEED)
    @settings(max_examples=n, deadline=None, database=None, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data())
    def prop(data):
        _run(data, camp, gen)

    prop()
    return camp


#: the generator families: (name, generator, graphs in the default tier, graphs in the slow tier)
FAMILIES = [("float", random_graph, 8, 500), ("int", random_int_graph, 8, 300),
            ("f16", _f16_random_graph, 4, 200)]


@pytest.mark.parametrize("gen,n", [pytest.param(g, n, id=f) for f, g, n, _ in FAMILIES])
def test_fuzz_small(gen, n):
    camp = _fuzz(n, gen)
    print(camp.table())
    assert camp.graphs >= n
    assert camp.status["pass"] > 0  # some graphs compile and match (not all refused)


@pytest.mark.slow
@pytest.mark.parametrize("gen,n", [pytest.param(g, n, id=f) for f, g, _, n in FAMILIES])
def test_fuzz_many_graphs(gen, n):
    camp = _fuzz(n, gen)
    print(camp.table())
    assert camp.graphs >= n
    assert not camp.failures
    # most graphs must be compiled (a fuzzer whose graphs are all refused tests nothing)
    assert camp.status["pass"] >= camp.status["refused"], camp.table()


def test_f16_graph_is_the_float_graph_in_f16():
    """Every float input, output and initializer of the converted graph is float16, the inputs'
    values are the f32 ones rounded to f16, integer inputs are unchanged."""
    import numpy as np
    from onnx import TensorProto

    from m100.tools.fuzz_graph import RandomChoices
    for i in range(6):
        fg = random_graph(RandomChoices(77 + i), 4)
        h = f16_graph(fg)
        g = h.model.graph
        for vi in list(g.input) + list(g.output):
            assert vi.type.tensor_type.elem_type != TensorProto.FLOAT, vi.name
        assert all(t.data_type != TensorProto.FLOAT for t in g.initializer)
        for k, v in fg.inputs.items():
            want = v.astype(np.float16) if v.dtype == np.float32 else v
            assert h.inputs[k].dtype == want.dtype and np.array_equal(h.inputs[k], want)


def test_int_generator_is_deterministic_and_valid():
    import onnx

    from m100.tools.fuzz_graph import RandomChoices

    ops: collections.Counter = collections.Counter()
    types: collections.Counter = collections.Counter()
    for i in range(150):
        a = random_int_graph(RandomChoices(i))
        b = random_int_graph(RandomChoices(i))
        assert a.model.SerializeToString() == b.model.SerializeToString()
        onnx.checker.check_model(a.model, full_check=True)
        ops.update(a.ops)
        types.update(v.dtype.name for v in a.inputs.values())
    for op in ("Add", "Mul", "Div", "Where", "Cast", "BitShift", "MatMulInteger", "ReduceSum",
               "ReduceMax", "ReduceMin", "Concat", "Clip", "TopK", "MaxPool", "Sign", "ArgMax",
               "ArgMin"):
        assert ops[op] > 0, (op, ops)
    assert set(types) == {"int8", "int16", "int32", "uint8", "uint16"}, types


def test_generator_is_deterministic_and_valid():
    """The generator alone (no compile): seeded graphs are reproducible, pass the ONNX checker,
    and cover the op families."""
    import onnx

    from m100.tools.fuzz_graph import RandomChoices

    ops: collections.Counter = collections.Counter()
    for i in range(100):
        a = random_graph(RandomChoices(i))
        b = random_graph(RandomChoices(i))
        assert a.model.SerializeToString() == b.model.SerializeToString()
        onnx.checker.check_model(a.model, full_check=True)  # shapes as declared
        ops.update(a.ops)
    for op in ("MatMul", "Gemm", "Conv", "MaxPool", "AveragePool", "Softmax", "Relu", "Add",
               "Div", "Transpose", "Reshape", "Concat"):
        assert ops[op] > 0, (op, ops)

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

W8A8 chains (``m100.tools.fuzz_quant.random_quant_graph``: quantized projections, the SiLU gate,
``silu(g) * u`` and its int8 quantize, the down projection; M = 1, run-time weights; f16 and
f32) are compared with the output type's tolerance, int8 outputs bit-exactly.

The heads family (``m100.tools.fuzz_graph.random_heads_graph``), half its graphs each: a
projection's output cut into column parts (``random_parts_graph``: Slice / Split on the last
axis), each read by its own MatMul (left or right operand, run-time weights), the results side by
side or added -- the prefill heads' reads of the V projection (column views; on ``m100`` the
large inputs build its stores late: ``build_segments.LATE_READ_STORES``); and the causal
attention chain (``m100.tools.fuzz_attention``: 4-8 heads sharing TPBs, ``q_j @ kT_j`` with
``kT`` / ``v`` written by the program, mask, softmax, ``@ v_j``, ``wo``), with the float
tolerance. The quant family draws that chain in W8A8 in a third of its graphs.

Budgets: the default run draws a few graphs of each family (about 40-60 s CPU); the slow tier draws
500 float and 300 integer graphs.
``M100_FUZZ_SEED`` changes the (otherwise fixed) seed.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from m100.tools.fuzz_int import random_int_graph
from m100.tools.fuzz_graph import HypothesisChoices, random_graph, random_heads_graph, random_parts_graph
from m100.tools.compare import F16_TOL
from m100.tools.fuzz_onnx import Campaign, differential, f16_graph, save_failure, tolerance
from m100.tools.fuzz_quant import random_quant_graph

SEED = int(os.environ.get("M100_FUZZ_SEED", "20261201"))
OUT = Path(os.environ.get("M100_FUZZ_OUT", "out/fuzz"))
MACHINES = ("tiny", "m100")


def _f16_random_graph(c):
    """The float family's graphs in f16 (``fuzz_onnx.f16_graph``)."""
    return f16_graph(random_graph(c))


def _run(data, camp: Campaign, gen=random_graph) -> None:
    fg = gen(HypothesisChoices(data))
    outs = differential(fg, MACHINES, **tolerance(fg))
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
            ("f16", _f16_random_graph, 4, 200), ("quant", random_quant_graph, 3, 150),
            ("heads", random_heads_graph, 3, 200)]


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


def _seeded_graphs(gen, n: int):
    """The graphs of ``gen`` for ``RandomChoices`` seeds 0..n-1, each drawn twice (the same
    bytes) and valid ONNX (shapes as declared)."""
    import onnx

    from m100.tools.fuzz_graph import RandomChoices
    for i in range(n):
        a = gen(RandomChoices(i))
        b = gen(RandomChoices(i))
        assert a.model.SerializeToString() == b.model.SerializeToString()
        onnx.checker.check_model(a.model, full_check=True)
        yield a


def test_int_generator_is_deterministic_and_valid():
    ops: collections.Counter = collections.Counter()
    types: collections.Counter = collections.Counter()
    for a in _seeded_graphs(random_int_graph, 150):
        ops.update(a.ops)
        types.update(v.dtype.name for v in a.inputs.values())
    for op in ("Add", "Mul", "Div", "Where", "Cast", "BitShift", "MatMulInteger", "ReduceSum",
               "ReduceMax", "ReduceMin", "Concat", "Clip", "TopK", "MaxPool", "Sign", "ArgMax",
               "ArgMin"):
        assert ops[op] > 0, (op, ops)
    assert set(types) == {"int8", "int16", "int32", "uint8", "uint16"}, types


def test_quant_generator_is_deterministic_and_valid():
    """The W8A8 chains: reproducible, valid ONNX, every form drawn (projection, silu, the MLP's
    int8 quantize, the down projection + residual, the Cast to each narrow integer type), M = 1,
    run-time weights and K > 512 among them."""
    import onnx

    forms: collections.Counter = collections.Counter()
    for a in _seeded_graphs(random_quant_graph, 200):
        g = a.model.graph
        ops = [n.op_type for n in g.node]
        out_int8 = g.output[0].type.tensor_type.elem_type == onnx.TensorProto.INT8
        narrow = [onnx.helper.get_attribute_value(n.attribute[0]) for n in g.node
                  if n.op_type == "Cast" and n.attribute[0].i in (21, 22, 25, 26)]
        if narrow:  # Cast to int4 / uint4 (opset 21) or int2 / uint2 (opset 25), back to int8
            assert len(narrow) == 1 and ops[-1] == "Cast" and out_int8, ops
            assert a.model.opset_import[0].version == (25 if narrow[0] in (25, 26) else 21)
            forms[f"narrow {narrow[0]}"] += 1
            continue
        form = ("mlp_down" if "Add" in ops else
                ("mlp_q" if "Sigmoid" in ops else "proj_q") if out_int8 else
                "silu" if "Sigmoid" in ops else "proj")
        forms[form] += 1
        m = next(iter(a.inputs.values())).shape[0]
        forms["M=1"] += m == 1
        # an int8 weight [K, N] given at run time
        forms["runtime W"] += any(v.dtype == np.int8 and v.ndim == 2 for v in a.inputs.values())
        forms["f16"] += g.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
        # (the wide draw: K beyond 512 on rows that several TPB rows share, fuzz_quant.WIDE_K)
        forms["K>512"] += "Softmax" not in ops and m >= 16 and \
            next(iter(a.inputs.values())).shape[1] > 512
    assert all(forms[k] > 0 for k in ("proj", "proj_q", "silu", "mlp_q", "mlp_down", "M=1",
                                      "runtime W", "f16", "K>512", "narrow 21", "narrow 22",
                                      "narrow 25", "narrow 26")), forms


def test_generator_is_deterministic_and_valid():
    """The generator alone (no compile): seeded graphs are reproducible, pass the ONNX checker,
    and cover the op families."""
    ops: collections.Counter = collections.Counter()
    for a in _seeded_graphs(random_graph, 100):
        ops.update(a.ops)
    for op in ("MatMul", "Gemm", "Conv", "MaxPool", "AveragePool", "Softmax", "Relu", "Add",
               "Div", "Transpose", "Reshape", "Concat"):
        assert ops[op] > 0, (op, ops)


def test_parts_generator_is_deterministic_and_valid():
    """The heads family's column parts alone (no compile): seeded graphs are reproducible, pass
    the ONNX checker, and draw every form: Slice and Split parts, widths that are column views (a
    multiple of 16 f32 columns, more than one row) and not, the part as the left and as the
    right MatMul operand, run-time weights, results concatenated and added, M = 1, the large
    inputs."""
    from m100.tools.fuzz_graph import HEADS_BIG

    forms: collections.Counter = collections.Counter()
    for a in _seeded_graphs(random_parts_graph, 120):
        g = a.model.graph
        shapes = {n: list(v.shape) for n, v in a.inputs.items()}
        x = shapes[g.input[0].name]
        forms["M=1"] += x[0] == 1
        forms["big"] += tuple(x) in HEADS_BIG
        mm = [n for n in g.node if n.op_type == "MatMul"]
        v = mm[0].output[0]  # the projection (the first MatMul: no MatMul before the heads)
        parts = [o for n in g.node if v in n.input and n.op_type in ("Slice", "Split")
                 for o in n.output]
        assert len(parts) >= 2, a.describe()
        forms["split"] += any(n.op_type == "Split" for n in g.node)
        forms["slice"] += any(n.op_type == "Slice" for n in g.node)
        forms["runtime Wv"] += mm[0].input[1] in a.inputs
        part_reads = [n for n in mm if set(n.input) & set(parts)]
        forms["left"] += any(n.input[0] in parts for n in part_reads)
        forms["right"] += any(n.input[1] in parts for n in part_reads)
        w = shapes.get(mm[0].input[1])
        forms["cview"] += x[0] > 1 and w is not None and (w[1] // len(parts)) % 16 == 0
        forms["concat"] += any(n.op_type == "Concat" for n in g.node)
    assert all(forms[k] > 0 for k in ("M=1", "big", "split", "slice", "runtime Wv", "left",
                                      "right", "cview", "concat")), forms


def _attention_forms(a, forms: collections.Counter) -> None:
    """Count the attention chain's forms in the graph ``a`` (float or W8A8) into ``forms``."""
    g = a.model.graph
    ops = collections.Counter(n.op_type for n in g.node)
    x = next(iter(a.inputs.values())).shape
    producer = {o: n for n in g.node for o in n.output}
    heads = 0
    for n in g.node:  # a head: Softmax(...(q_j @ kT_j)) (not a softmax before the projections)
        src = producer.get(n.input[0]) if n.op_type == "Softmax" else None
        while src is not None and src.op_type in ("Add", "Mul", "Div"):  # the mask, the scale
            src = next((producer[i] for i in src.input if i in producer), None)
        if src is None or src.op_type not in ("MatMul", "Gemm") or src.input[0] not in producer:
            continue
        heads += 1
        kt = producer.get(src.input[1])
        assert kt is not None, "the head's B operand is not written by the program"
        forms["B written by the program"] += 1
        forms[f"B {kt.op_type}"] += 1
    assert 4 <= heads <= 8, a.describe()
    forms["M=1"] += x[0] == 1
    forms["M>=16"] += x[0] >= 16
    forms["gemm transB"] += ops["Gemm"] > 0
    forms["mask"] += any(t.name.startswith("mask") for t in g.initializer)
    forms["kT/v outputs"] += len(g.output) > 1
    forms["runtime W"] += any(v.ndim == 2 and v.shape[0] > 1 and k != g.input[0].name
                              for k, v in a.inputs.items())
    forms["split"] += ops["Split"] > 0
    forms["quantized heads"] += ops["QuantizeLinear"] > 2
    forms["GQA"] += len({n.input[1] for n in g.node if n.op_type == "MatMul" and
                         producer.get(n.input[0]) is not None and
                         producer[n.input[0]].op_type == "Softmax"}) < heads


def test_attention_generator_is_deterministic_and_valid():
    """The causal attention chain (no compile), float (the heads family's attention half) and
    W8A8 (the quant family's third): reproducible, valid ONNX, 4-8 heads each a ``Softmax`` of
    ``q_j @ kT_j`` (``MatMul`` or ``Gemm(transB=1)``) whose B operand a node of the graph writes
    (a ``Transpose`` / ``Slice`` / ``Reshape`` of the projection: never an input or an
    initializer), and every form drawn: ``M = 1`` and 16+ rows, the mask, GQA, ``kT`` / ``v``
    outputs, run-time weights, Split parts, W8A8 heads quantized one by one."""
    from m100.tools.fuzz_attention import random_attention_graph
    from m100.tools.fuzz_graph import RandomChoices

    for gen, n in ((random_attention_graph, 60), (random_quant_graph, 150)):
        forms: collections.Counter = collections.Counter()
        for a in _seeded_graphs(gen, n):
            if "Softmax" in a.ops:  # (the quant family's other forms have none)
                _attention_forms(a, forms)
        want = ["M=1", "M>=16", "gemm transB", "mask", "kT/v outputs", "runtime W", "split",
                "GQA", "B Transpose", "B Reshape", "B Slice"]
        if gen is random_quant_graph:
            want.append("quantized heads")
        assert all(forms[k] > 0 for k in want), forms
    heads = collections.Counter(random_heads_graph(RandomChoices(i)).model.graph.name
                                for i in range(40))
    assert heads["fuzz_attention"] and heads["fuzz_heads"], heads


def _reader_rounds(pl) -> tuple[int, int]:
    """(segments after the late-stored projection that read its column views, of them those on a
    TPB of an earlier such reader: the heads' later rounds, where ``LATE_READ_ROUNDS`` acts)."""
    tl, g = pl.timeline, pl.graph
    (si, _), = tl.late_reads.items()
    by_name = {o.name: o for o in g.ops}
    root = by_name[tl.segments[si].stages[0].op].outputs[0]
    seen: set[int] = set()
    n = again = 0
    for seg in tl.segments[si + 1:]:
        if any(g.cviews.get(t, ("",))[0] == root for st in seg.stages
               for t in by_name[st.op].inputs):
            tpbs = {x for st in seg.stages for x in st.tpbs}
            n += 1
            again += bool(tpbs & seen)
            seen |= tpbs
    return n, again


@pytest.mark.parametrize("rounds", [True, False], ids=["rounds", "first-round"])
@pytest.mark.parametrize("machine,i", [("m100", 1), ("tiny", 37)])
def test_heads_family_reaches_the_late_read_stores(machine, i, rounds, monkeypatch):
    """Seeded heads graphs whose V projection's stores the plan builds late, each just before
    the heads that read its columns (``build_segments.LATE_READ_STORES``: seed 1 on ``m100``,
    ``[64, 512] @ [512, 128]``, four heads; seed 37 on ``tiny``, 16 rows K 1024), agree with
    onnxruntime (race and deadlock checks on). Both run their heads in more than one round on
    the same TPBs (4 readers, 3 of them on a TPB of an earlier one), so
    ``build_segments.LATE_READ_ROUNDS`` changes their plans (and programs): each side against
    onnxruntime (session 25, the campaign's 120 graphs x tiny/m100: 34 of the 35 compiles that
    build late stores have such rounds; the switch changes 31 plans, 26 programs). If the
    generator changes and a seed no longer builds late stores in rounds, pick another
    (``random_parts_graph(RandomChoices(i))``, the plan's ``timeline.late_reads``,
    :func:`_reader_rounds`)."""
    from m100.passes.schedule import build_segments, m100_schedule
    from m100.tools.fuzz_graph import RandomChoices

    monkeypatch.setattr(build_segments, "LATE_READ_ROUNDS", rounds)

    seen = []
    orig = m100_schedule.schedule

    def spy(*a, **kw):
        seen.append(orig(*a, **kw))
        return seen[-1]

    monkeypatch.setattr(m100_schedule, "schedule", spy)
    fg = random_parts_graph(RandomChoices(i))
    outs = differential(fg, (machine,), **tolerance(fg))
    assert [o.status for o in outs] == ["pass"], [o.detail for o in outs]
    late = [pl for pl in seen if pl.timeline.late_reads]
    assert late, fg.describe()
    n, again = _reader_rounds(late[-1])
    assert n >= 2 and again, (n, again, fg.describe())


def _mod_softmax_f16(k: float = 1000):
    """fuzz f16 seed 1303 #3: ``Softmax(Mod(fmod=1)(x * 1000, w), axis=1)`` in f16. onnxruntime
    runs it in f32 (no f16 kernel for a node: ``InsertedPrecisionFreeCast``), so ``x * 1000`` is
    not rounded to f16 before the (discontinuous) fmod: 0.19 off the ONNX definition."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from m100.tools.fuzz_graph import FuzzGraph

    nodes = [helper.make_node("Mul", ["in1", "k"], ["t3"]),
             helper.make_node("Mod", ["t3", "w"], ["t5"], fmod=1),
             helper.make_node("Softmax", ["t5"], ["t6"], axis=1)]
    inits = [numpy_helper.from_array(np.array(k, np.float16), "k"),
             numpy_helper.from_array(np.array([-1.136, -1.995, 1.134], np.float16), "w")]
    g = helper.make_graph(nodes, "mod_softmax",
                          [helper.make_tensor_value_info("in1", TensorProto.FLOAT16, [2, 4, 3])],
                          [helper.make_tensor_value_info("t6", TensorProto.FLOAT16, [2, 4, 3])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    x = np.random.default_rng(1303).uniform(-4, 4, (2, 4, 3)).astype(np.float16)
    return FuzzGraph(m, {"in1": x}, ["Mul", "Mod", "Softmax"])


def test_fuzz_definition_decides_when_onnxruntime_is_off_it():
    """Where onnxruntime is off the ONNX definition (``onnx.reference``), the definition decides:
    the program (which rounds ``x * 1000`` to f16 as ONNX says) passes, and a result that agrees
    with onnxruntime instead would fail. Without a dispute, onnxruntime stays the oracle."""
    import numpy as np

    from m100.tools.fuzz_onnx import compare_outputs, definition_run, oracle_run

    fg = _mod_softmax_f16()
    feeds = [fg.inputs["in1"]]
    ort_out = oracle_run(fg.model, feeds)
    ref = definition_run(fg.model, feeds, ort_out, F16_TOL, F16_TOL)
    # the definition from numpy, independently: f16 product, fmod, softmax
    x = fg.inputs["in1"]
    t5 = np.fmod((x * np.float16(1000)).astype(np.float16),
                 np.array([-1.136, -1.995, 1.134], np.float16)).astype(np.float64)
    e = np.exp(t5 - t5.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    if ref is None:  # onnxruntime agrees with the definition (a later version may)
        assert not compare_outputs(ort_out, [want], F16_TOL, F16_TOL)[0]
    else:
        assert not compare_outputs(ref, [want], F16_TOL, F16_TOL)[0]
        assert compare_outputs(ort_out, [want], F16_TOL, F16_TOL)[0]  # the dispute is real
        assert compare_outputs(ort_out, ref, F16_TOL, F16_TOL)[0]
    outs = differential(fg, ("tiny",), rtol=F16_TOL, atol=F16_TOL)
    assert [o.status for o in outs] == ["pass"], outs
    # no dispute (x * 1 is exact in f16): onnxruntime stays the oracle
    fg1 = _mod_softmax_f16(1)
    assert definition_run(fg1.model, feeds, oracle_run(fg1.model, feeds), F16_TOL, F16_TOL) is None


def test_compare_non_finite_where_the_definition_is():
    """Where the definition overflows (f16 ``x * 2e4``, then ``fmod(inf, w)`` is NaN: fuzz f16 seed
    1403 #23, which onnxruntime computed in f32 and so finite), a NaN or infinity equal in class to
    the definition's passes; any other non-finite result, or a finite one there, fails."""
    import numpy as np

    from m100.tools.fuzz_onnx import compare_outputs
    inf, nan = np.inf, np.nan
    want = [np.array([1.0, nan, inf, -inf])]
    assert not compare_outputs([np.array([1.0, nan, inf, -inf])], want)[0]
    for got in ([1.0, 0.0, inf, -inf], [1.0, nan, -inf, -inf], [1.0, nan, inf, nan],
                [nan, nan, inf, -inf], [1.0 + 1e-1, nan, inf, -inf]):
        assert compare_outputs([np.array(got)], want)[0], got
    assert compare_outputs([np.array([inf])], [np.array([1.0])])[0]  # non-finite, want finite

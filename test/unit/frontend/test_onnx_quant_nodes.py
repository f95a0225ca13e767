"""ONNX node tests of the quantized operators (QuantizeLinear, DequantizeLinear, QLinearMatMul,
QLinearConv, MatMulInteger, ConvInteger) through ``M100ReferenceBackend`` (torch-mlir import with the
``onnx_rewrite_quant`` rewrites + the numpy reference executor), run like
``onnx.backend.test.BackendTest`` runs them.

Measured (onnx 1.23, torch-mlir 20261001): 39 of 39 cases pass (17 before the run-time
parameter rewrite of onnx_rewrite_qruntime.py and the narrow types of onnx_rewrite_narrow_int.py;
34 before the float8/float4 encoding and the uint16 QuantizeLinear held as int16 bits). Before this work ``test_dequantizelinear_axis`` (uint8, per axis) computed 1525
instead of 24 (torch-mlir defect, now rewritten before import). Run-time scales / zero points are rewritten into plain ops before torch-mlir
(onnx_rewrite_qruntime.py), so the compiled stack runs them too (test/e2e/test_quant_runtime_params.py,
test_quant_narrow_types.py). The fast suite runs four cases; the
slow tier runs all of them and checks the counts."""

from __future__ import annotations

import importlib

import pytest

from m100.tools.onnx_backend import M100ReferenceBackend

OPS = {"QuantizeLinear": "quantizelinear", "DequantizeLinear": "dequantizelinear",
       "QLinearMatMul": "qlinearmatmul", "QLinearConv": "qlinearconv",
       "MatMulInteger": "matmulinteger", "ConvInteger": "convinteger"}

PASSING = {
    "test_quantizelinear", "test_quantizelinear_int16", "test_dequantizelinear",
    "test_dequantizelinear_axis", "test_dequantizelinear_uint16", "test_dequantizelinear_int16",
    "test_qlinearmatmul_2D_uint8_float32", "test_qlinearmatmul_3D_uint8_float32",
    "test_qlinearmatmul_2D_uint8_float16", "test_qlinearmatmul_3D_uint8_float16",
    "test_qlinearmatmul_2D_int8_float32", "test_qlinearmatmul_3D_int8_float32",
    "test_qlinearmatmul_2D_int8_float16", "test_qlinearmatmul_3D_int8_float16",
    "test_qlinearconv", "test_matmulinteger", "test_convinteger_without_padding",
    # run-time scales / zero points rewritten per the ONNX definition (onnx_rewrite_qruntime.py)
    "test_quantizelinear_axis", "test_quantizelinear_blocked_asymmetric",
    "test_quantizelinear_blocked_symmetric", "test_dequantizelinear_blocked",
    "test_convinteger_with_padding",
    # float8 / int4 / uint4 / int2 / uint2 held in bytes (onnx_rewrite_narrow_int.py)
    "test_dequantizelinear_e4m3fn", "test_dequantizelinear_e4m3fn_float16",
    "test_dequantizelinear_e4m3fn_zero_point", "test_dequantizelinear_e5m2",
    "test_dequantizelinear_int2", "test_dequantizelinear_int4", "test_dequantizelinear_uint2",
    "test_dequantizelinear_uint4", "test_quantizelinear_int2", "test_quantizelinear_int4",
    "test_quantizelinear_uint2", "test_quantizelinear_uint4",
    # float8 / float4 encoding, uint16 held as int16 bits
    "test_quantizelinear_e4m3fn", "test_quantizelinear_e5m2", "test_quantizelinear_float4e2m1",
    "test_dequantizelinear_float4e2m1", "test_quantizelinear_uint16",
}
FAST = {"test_dequantizelinear_axis", "test_qlinearconv", "test_qlinearmatmul_2D_uint8_float32",
        "test_convinteger_without_padding"}


def _cases():
    from onnx.backend.test.case import node as node_pkg

    for mod in OPS.values():
        importlib.import_module(f"{node_pkg.__name__}.{mod}")
    out, seen = [], set()
    for tc in node_pkg._NodeTestCases:
        if tc.model is None or tc.name in seen:
            continue
        if {n.op_type for n in tc.model.graph.node} & OPS.keys():
            seen.add(tc.name)
            out.append(tc)
    return sorted(out, key=lambda t: t.name)


CASES = _cases()


def _run(tc) -> str | None:
    """None if the case passes; the one-line error if it is refused. Wrong numbers raise."""
    from onnx.backend.test.runner import Runner, _normalize_tensor

    try:
        rep = M100ReferenceBackend.prepare(tc.model, "CPU")
        for inputs, refs in tc.data_sets:
            outs = list(rep.run([_normalize_tensor(x) for x in inputs]))
            Runner.assert_similar_outputs([_normalize_tensor(x) for x in refs], outs,
                                          rtol=tc.rtol, atol=tc.atol)
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001 - a refusal: must be one line
        msg = str(e)
        assert "\n" not in msg.strip(), msg
        return msg
    return None


@pytest.mark.parametrize("tc", [pytest.param(t, id=t.name) for t in CASES if t.name in FAST])
def test_quant_node_case_passes(tc):
    assert _run(tc) is None


@pytest.mark.slow
def test_all_quant_node_cases_pass_or_refuse_clearly():
    passed = {tc.name for tc in CASES if _run(tc) is None}
    assert passed == PASSING
    assert len(CASES) == 39

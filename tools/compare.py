"""Comparing a program's outputs with an oracle: onnxruntime for ONNX models, the graph reference
executor for MLIR; max abs/rel error with rtol/atol, integers exactly, quantized outputs in LSB.

Part of the end-to-end flow (:mod:`m100.tools.driver` re-exports these names; ``driver.check``
uses them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from m100.errors import M100Error
from m100.tools.program_io import DriverError


@dataclass
class OutputError:
    name: str
    max_abs: float
    max_rel: float
    ok: bool
    # quantized outputs (int8/uint8, or a DequantizeLinear's result): compared in LSB of the
    # output's scale (1 for int8/uint8): % of elements exact / within 1 LSB, the largest error
    lsb: float | None = None
    exact_pct: float = 100.0
    within1_pct: float = 100.0
    max_lsb: float = 0.0

    def describe(self) -> str:
        if self.lsb is None:
            return f"{self.name}: max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g}"
        return (f"{self.name}: quantized (LSB {self.lsb:.6g}): {self.exact_pct:.3f} % exact, "
                f"{self.within1_pct:.3f} % within 1 LSB, max {self.max_lsb:.0f} LSB")


#: a quantized output passes when at least this share of its elements is within 1 LSB of the
#: oracle (issue 11: onnxruntime's integer kernels and ours may round a tie differently, and one
#: LSB propagates through later layers)
LSB_PASS_PCT = 99.9


#: an f16 output is compared with at least these tolerances: onnxruntime's CPU kernels compute f16
#: models in f32 (its InsertCastTransformer casts whole f16 subgraphs to f32 and drops the casts
#: between them), the program rounds every op's result to f16 as the ONNX definition does
#: (test/e2e/test_quant_e2e.py checks it bit-exactly against numpy), so they differ by f16 rounding
F16_TOL = 1e-2


def output_lsb(model, name: str) -> float | None:
    """The LSB of ONNX output ``name`` when it is quantized: 1 for an int8/uint8 output, the scale
    of a per-tensor DequantizeLinear producing it; None otherwise."""
    if model is None or not hasattr(model, "graph"):
        return None
    from onnx import TensorProto, numpy_helper
    for o in model.graph.output:
        if o.name == name and o.type.tensor_type.elem_type in (TensorProto.INT8, TensorProto.UINT8):
            return 1.0
    inits = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and name in n.output and n.input[1] in inits:
            sc = numpy_helper.to_array(inits[n.input[1]])
            if sc.size == 1 and float(sc.reshape(-1)[0]) > 0:
                return float(sc.reshape(-1)[0])
    return None


def oracle_outputs(module_or_model, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], str]:
    """onnxruntime for ONNX models, the graph reference executor for MLIR."""
    if hasattr(module_or_model, "graph"):
        from m100.tools.onnx_backend import onnxruntime_run
        try:
            outs = onnxruntime_run(module_or_model, inputs)
        except M100Error:
            raise
        except Exception as e:  # noqa: BLE001 - onnxruntime's own exception types
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise DriverError(f"the oracle (onnxruntime) refused the inputs: {first}") from None
        return [np.asarray(x) for x in outs], "onnxruntime"
    from m100.frontend.reference import run as ref_run
    return ref_run(module_or_model, inputs), "reference executor"


def compare(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float,
            lsb: float | None = None) -> OutputError:
    """Max abs/rel error and the rtol/atol verdict; with ``lsb`` (a quantized output, see
    :func:`output_lsb`) the errors in LSB and the :data:`LSB_PASS_PCT` verdict instead."""
    want = np.asarray(want)
    got = np.asarray(got)
    if got.size != want.size:
        return OutputError(name, float("inf"), float("inf"), False)
    if want.dtype.kind == "u" and got.dtype.kind == "i" and got.dtype.itemsize == want.dtype.itemsize:
        got = got.view(want.dtype)  # signless MLIR integers: the same bits (a uint16 held as i16)
    if want.dtype.kind in "biu" and lsb is None:  # integer / boolean (not quantized): exactly
        g64 = got.reshape(want.shape).astype(np.int64)
        w64 = want.astype(np.int64)
        d = np.abs(g64 - w64)
        return OutputError(name, float(d.max()) if d.size else 0.0, 0.0, bool((d == 0).all()))
    got = got.reshape(want.shape).astype(np.float64)
    w = want.astype(np.float64)
    diff = np.abs(got - w)
    max_abs = float(diff.max()) if diff.size else 0.0
    rel = diff / np.maximum(np.abs(w), np.finfo(np.float32).tiny)
    # relative error where it is meaningful (|want| above atol); absolute below
    big = np.abs(w) > atol
    max_rel = float(rel[big].max()) if big.any() else 0.0
    finite = bool(np.isfinite(got).all())
    if lsb is not None:
        steps = np.rint(diff / lsb)  # whole LSB steps (a dequantized value is a multiple of lsb)
        exact = float(np.mean(steps == 0) * 100) if steps.size else 100.0
        within = float(np.mean(steps <= 1) * 100) if steps.size else 100.0
        mx = float(steps.max()) if steps.size else 0.0
        return OutputError(name, max_abs, max_rel, finite and within >= LSB_PASS_PCT, lsb, exact,
                           within, mx)
    ok = bool(np.all(diff <= atol + rtol * np.abs(w))) and finite
    return OutputError(name, max_abs, max_rel, ok)

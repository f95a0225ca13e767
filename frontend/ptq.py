"""Post-training quantization of float ONNX models (issue 11): ``m100 compile --quantize SCHEME
--calibration FILE.npz``.

The quantized model is an ordinary ONNX model of the forms the rest of the stack compiles
(``notes/quant-recipes.md``), made with onnxruntime's own quantization tools, so the quantized
graph is exactly what onnxruntime would run and onnxruntime stays the oracle of the compiled
program:

* ``w8a8``: ``quantize_static`` QDQ, int8 weights per output channel (symmetric; ``per_channel``),
  int8 activations per tensor (asymmetric), int32 biases; calibration ``minmax`` or ``percentile``
  (99.999) over the given inputs. Only the contractions (Conv, MatMul, Gemm) are quantized: softmax,
  norms, residual adds, pooling, activations and matmuls of two activations (attention) stay
  float between a DequantizeLinear and the next QuantizeLinear (where accuracy needs it; the TCU
  runs the i8 x i8 contractions, the CVU the rest).
* ``f16``: every float initializer, input and output in float16
  (``onnxruntime.transformers.float16``); contractions accumulate in f32 and round on store.
* ``w4a16`` and ``bf16``: refused with one line (the scheduler has no bf16 buffers; int4 weights
  with blocked scales need per-block rescaling the TCU epilogue does not do, see docs/graph.md).

:func:`layer_errors` reports the per-layer quantization error (relative L2 error of every
contraction's output against the float model, both run by onnxruntime on the calibration inputs).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from m100.errors import M100Error

SCHEMES = ("w8a8", "f16", "w4a16", "bf16")
METHODS = ("minmax", "percentile")


class QuantizeError(M100Error):
    """A user-facing PTQ error (bad scheme, calibration file)."""


def _inputs(model) -> list:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def load_calibration(path, model) -> list[dict[str, np.ndarray]]:
    """Calibration samples from ``path`` (.npz): one array per model input, keyed by the input's
    name, shaped ``[N, *input_shape]`` (N samples) or ``input_shape`` (one sample)."""
    from onnx import helper

    path = os.fspath(path)
    try:
        z = np.load(path)
    except (OSError, ValueError) as e:
        raise QuantizeError(f"{path}: not a readable .npz calibration file ({e})") from None
    samples: list[dict[str, np.ndarray]] = []
    n = None
    with z:
        for inp in _inputs(model):
            if inp.name not in z.files:
                raise QuantizeError(f"{path}: no array for model input '{inp.name}' (has "
                                    f"{', '.join(z.files) or 'none'})")
            shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
            a = np.asarray(z[inp.name])
            if list(a.shape) == shape:
                a = a[None]
            if list(a.shape[1:]) != shape:
                raise QuantizeError(f"{path}: '{inp.name}' has shape {list(a.shape)}, expected "
                                    f"{shape} or [N, {', '.join(map(str, shape))}]")
            dt = helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type)
            if n is not None and a.shape[0] != n:
                raise QuantizeError(f"{path}: inputs have different sample counts")
            n = a.shape[0]
            for i in range(n):
                if len(samples) <= i:
                    samples.append({})
                samples[i][inp.name] = a[i].astype(dt)
    if not samples:
        raise QuantizeError(f"{path}: no calibration samples")
    return samples


def quantize_model(model, scheme: str, calibration: list[dict[str, np.ndarray]] | None = None, *,
                   per_channel: bool = True, method: str = "minmax"):
    """``model`` (float ONNX) quantized by ``scheme`` (:data:`SCHEMES`)."""
    if scheme not in SCHEMES:
        raise QuantizeError(f"unknown quantization scheme '{scheme}' (known: {', '.join(SCHEMES)})")
    if scheme == "f16":
        return to_f16(model)
    if scheme in ("w4a16", "bf16"):
        raise QuantizeError(f"quantization scheme '{scheme}' is not supported yet (w8a8, f16 are)")
    if method not in METHODS:
        raise QuantizeError(f"unknown calibration method '{method}' (known: {', '.join(METHODS)})")
    if not calibration:
        raise QuantizeError("w8a8 needs calibration inputs (--calibration FILE.npz)")
    return _w8a8(model, calibration, per_channel, method)


def _w8a8(model, calibration, per_channel: bool, method: str):
    import logging

    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calibration)

        def get_next(self):
            return next(self.it, None)

    cm = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile}[method]
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
        m = model
        if max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) < 13:
            from onnx import version_converter  # per-channel needs opset >= 13
            m = version_converter.convert_version(model, 17)
        onnx.save(m, src)
        from onnxruntime.quantization.shape_inference import quant_pre_process
        pre = os.path.join(d, "p.onnx")  # folds BatchNorm into the convolutions first
        quant_pre_process(src, pre, skip_symbolic_shape=True)
        src = pre
        # activation x activation matmuls (attention scores, probs x V) stay float: a weight
        # is what w8a8 quantizes per channel (torch-mlir would make them quantized_batch_matmul)
        pm = onnx.load(src)
        for i, n in enumerate(pm.graph.node):  # nodes_to_exclude goes by node name
            n.name = n.name or f"m100_node{i}"
        onnx.save(pm, src)
        consts = {i.name for i in pm.graph.initializer} | \
            {o for n in pm.graph.node if n.op_type == "Constant" for o in n.output}
        exclude = [n.name for n in pm.graph.node if n.op_type == "MatMul"
                   and not any(i in consts for i in n.input)]
        level = logging.getLogger().level
        logging.getLogger().setLevel(logging.ERROR)
        try:
            quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ,
                            per_channel=per_channel, activation_type=QuantType.QInt8,
                            weight_type=QuantType.QInt8, calibrate_method=cm,
                            op_types_to_quantize=["Conv", "MatMul", "Gemm"],
                            nodes_to_exclude=exclude,
                            extra_options={"CalibPercentile": 99.999})
        finally:
            logging.getLogger().setLevel(level)
        return onnx.load(dst)


def to_f16(model):
    """``model`` in float16 (initializers, inputs, outputs; ops unchanged)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    m = onnx.ModelProto()
    m.CopyFrom(model)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = convert_float_to_float16(m, keep_io_types=False, disable_shape_infer=True)
    onnx.checker.check_model(out)
    return out


def layer_errors(float_model, quant_model, samples: list[dict[str, np.ndarray]]) -> list[tuple]:
    """Per quantized tensor of ``quant_model`` that the float model also computes (the outputs
    of the contractions and the activations feeding them; a QDQ model keeps the float tensor names,
    ``t -> QuantizeLinear -> DequantizeLinear``), in graph order: (name, relative L2 error of the
    dequantized value against the float model's, over ``samples``), then the graph outputs."""
    import onnx
    from onnx import helper

    from m100.frontend.ort_session import ort_session

    fnames = {o for n in float_model.graph.node for o in n.output}
    prod = {o: n for n in quant_model.graph.node for o in n.output}
    pairs = []  # (float tensor, quantized model tensor holding its dequantized value)
    for n in quant_model.graph.node:
        if n.op_type != "DequantizeLinear" or n.input[0] not in prod:
            continue
        q = prod[n.input[0]]
        if q.op_type == "QuantizeLinear" and q.input[0] in fnames and \
                q.input[0] not in [p[0] for p in pairs]:
            pairs.append((q.input[0], n.output[0]))
    pairs += [(o.name, o.name) for o in float_model.graph.output]

    def session(m, outs):
        m2 = onnx.ModelProto()
        m2.CopyFrom(m)
        have = {o.name for o in m2.graph.output}
        for o in outs:
            if o not in have:
                m2.graph.output.append(helper.make_empty_tensor_value_info(o))
        return ort_session(m2, threads=0)

    fs = session(float_model, [p[0] for p in pairs])
    qs = session(quant_model, [p[1] for p in pairs])
    qin = {i.name: helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
           for i in _inputs(quant_model)}
    num = np.zeros(len(pairs))
    den = np.zeros(len(pairs))
    for smp in samples:
        fr = dict(zip([o.name for o in fs.get_outputs()], fs.run(None, smp)))
        qr = dict(zip([o.name for o in qs.get_outputs()],
                      qs.run(None, {k: v.astype(qin[k]) for k, v in smp.items()})))
        for i, (f, q) in enumerate(pairs):
            fv = fr[f].astype(np.float64)
            num[i] += float(np.sum((qr[q].astype(np.float64) - fv) ** 2))
            den[i] += float(np.sum(fv ** 2))
    return [(f, float(np.sqrt(num[i] / den[i])) if den[i] else 0.0)
            for i, (f, _) in enumerate(pairs)]


__all__ = ["METHODS", "SCHEMES", "QuantizeError", "layer_errors", "load_calibration",
           "quantize_model", "to_f16"]

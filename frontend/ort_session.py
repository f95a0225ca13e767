"""The one way m100 opens an onnxruntime session (the oracle of tests, benches and PTQ).

Why one place: onnxruntime's answers depend on session options that are easy to forget, and a
forgotten one turns the oracle wrong without a word:

* ``session.x64quantprecision = 1`` (always): on x86-64 CPUs with AVX2 but without VNNI (AVX512-VNNI
  or AVX-VNNI), onnxruntime's u8 x s8 integer GEMM kernels (MatMulInteger, QLinearMatMul,
  QLinearConv, the int8 QDQ fusions) use ``vpmaddubsw``, which *saturates* the sum of two u8*s8
  products to int16: ``255*127*2 = 64770`` becomes 32767. On such a machine (CI ran on an AMD EPYC
  with AVX2 only) onnxruntime's MatMulInteger with uint8 activations was off the ONNX definition
  by up to 25 000 on a 144-element result, and 16 quantized tests failed against it although the
  compiled program matched numpy. Precision mode 1 uses the exact (slower) kernel; on VNNI
  machines it changes nothing. In that mode onnxruntime registers some integer kernels for uint8
  activations only (QLinearConv, QLinearMatMul and QGemm with int8 activations are "not
  implemented"): a session it refuses so is made again without the mode. Those kernels take
  int8 activations and are not the saturating u8 x s8 path (``vpmaddubsw`` multiplies unsigned
  by signed bytes); the tests on them agree with the compiled programs on the AVX2-only machine.
* ``intra_op_num_threads = 1``: reproducible reductions (and the speed baseline is one thread).
* ``log_severity_level = 3``: no warnings on stderr.

``config`` adds session config entries (e.g. ``{"session.qdqisint8allowed": "1"}`` for the int8
QDQ kernels, ``{"session.disable_quant_qdq": "1"}`` to keep DequantizeLinear(int4) -> MatMul as
the ONNX definition reads instead of onnxruntime's MatMulNBits rewrite).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: config entries every session gets (module doc)
ALWAYS = {"session.x64quantprecision": "1"}


def session_options(config: dict[str, str] | None = None, *, threads: int = 1,
                    optimize: bool = True):
    """onnxruntime ``SessionOptions`` with :data:`ALWAYS`, ``config``, ``threads`` intra-op
    threads (and one inter-op thread), warnings off; ``optimize=False``: no graph optimization."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for k, v in (ALWAYS | (config or {})).items():
        so.add_session_config_entry(k, v)
    return so


def ort_session(model: Any, config: dict[str, str] | None = None, *, threads: int = 1,
                optimize: bool = True, optimized_model_path: str | None = None):
    """An onnxruntime CPU session on ``model`` (a ``ModelProto``, serialized bytes or a path) with
    :func:`session_options`; ``optimized_model_path``: where onnxruntime writes the graph it
    runs (after its fusions)."""
    import onnxruntime as ort

    def options(extra: dict[str, str]):
        so = session_options((config or {}) | extra, threads=threads, optimize=optimize)
        if optimized_model_path is not None:
            so.optimized_model_filepath = str(optimized_model_path)
        return so

    if isinstance(model, (str, Path)):
        src: Any = str(model)
    elif isinstance(model, bytes):
        src = model
    else:
        src = model.SerializeToString()
    try:
        return ort.InferenceSession(src, options({}), providers=["CPUExecutionProvider"])
    except ort.capi.onnxruntime_pybind11_state.NotImplemented:
        # an int8-activation kernel that exists only outside precision mode 1 (module doc)
        return ort.InferenceSession(src, options({"session.x64quantprecision": "0"}),
                                    providers=["CPUExecutionProvider"])

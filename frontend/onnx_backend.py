"""An ``onnx.backend.base.Backend`` that runs ONNX models through m100: import (torch-mlir) -> optional
graph pipeline (``m100-graph`` when ``m100.passes.graph`` provides it) -> numpy reference executor.

Used by the ONNX backend node tests (``test/unit/frontend/test_onnx_backend.py``) and by any script
that wants ``prepare(model).run(inputs)``::

    rep = M100Backend.prepare(model)            # imports (and optionally optimizes) once
    outputs = rep.run([x])                      # list of numpy arrays, in graph-output order

``M100Backend.graph_pipeline`` (class attribute, default False) selects whether ``m100-graph`` runs;
:class:`M100GraphBackend` is the same backend with it on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from m100.frontend.onnx_import import FrontendError, load_onnx
from m100.frontend.reference import run


def graph_pipeline_pass():
    """The ``m100-graph`` ModulePass instance, or None while the graph passes do not exist."""
    try:
        from m100.passes.graph.m100_graph import M100Graph
    except ImportError:
        return None
    return M100Graph()


def compile_onnx(model, ctx=None, *, graph: bool = False):
    """Import ``model`` (path or ModelProto); with ``graph=True`` also run the m100-graph pipeline."""
    from m100.frontend.mlir_load import shared_context

    ctx = ctx or shared_context()
    module = load_onnx(model, ctx)
    if graph:
        p = graph_pipeline_pass()
        if p is None:
            raise FrontendError("the m100-graph pipeline is not available (m100.passes.graph)")
        p.apply(ctx, module)
        module.verify()
    return module


def _backend_base():
    import onnx.backend.base as base

    return base


class M100BackendRep(_backend_base().BackendRep):
    """A compiled model: ``run(inputs)`` executes it on the numpy reference executor."""

    def __init__(self, module, input_names: Sequence[str], output_dtypes: Sequence[np.dtype | None] = ()):
        self.module = module
        self.input_names = list(input_names)
        self.output_dtypes = list(output_dtypes)

    def run(self, inputs, **kwargs):  # noqa: ANN001 - onnx's signature
        if isinstance(inputs, dict):
            inputs = [inputs[n] for n in self.input_names]
        elif isinstance(inputs, np.ndarray):
            inputs = [inputs]
        outs = run(self.module, [np.asarray(x) for x in inputs])
        return tuple(_as_onnx_dtype(o, dt) for o, dt in
                     zip(outs, self.output_dtypes + [None] * (len(outs) - len(self.output_dtypes))))


def _as_onnx_dtype(x: np.ndarray, dt: np.dtype | None) -> np.ndarray:
    """MLIR integers are signless and bf16 is computed as f32: give the ONNX output type back
    (uint8 <- i8 is a reinterpretation of the same bits; bfloat16 is a rounding of f32)."""
    if dt is None or x.dtype == dt:
        return x
    if x.dtype.kind in "iu" and dt.kind in "iu" and x.dtype.itemsize == dt.itemsize:
        return x.view(dt)
    if dt.name == "bfloat16" or dt.kind == "f":
        return x.astype(dt)
    return x


def _onnx_output_dtypes(model) -> list:
    from onnx import helper

    out = []
    for o in model.graph.output:
        try:
            out.append(np.dtype(helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type)))
        except Exception:  # noqa: BLE001 - unknown/unsupported element type: leave as computed
            out.append(None)
    return out


class M100Backend(_backend_base().Backend):
    """ONNX backend: torch-mlir import (+ optional m100-graph) + the numpy reference executor."""

    graph_pipeline = False

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs):  # noqa: ANN001
        super().prepare(model, device, **kwargs)
        inits = {i.name for i in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in inits]
        return M100BackendRep(compile_onnx(model, graph=cls.graph_pipeline), names,
                              _onnx_output_dtypes(model))

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):  # noqa: ANN001
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


class M100GraphBackend(M100Backend):
    """:class:`M100Backend` with the m100-graph pipeline between import and execution."""

    graph_pipeline = True


def onnxruntime_run(model, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The oracle: onnxruntime (CPU, single thread) on the same model and inputs."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
    return sess.run(None, feeds)

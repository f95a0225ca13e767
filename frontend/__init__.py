"""m100 frontend: ONNX (through torch-mlir) and MLIR text -> xDSL func + linalg on tensors.

* :func:`load_onnx` (``path or ModelProto, ctx``) -> ``ModuleOp``
* :func:`load_mlir` (``path or text, ctx``) -> ``ModuleOp``
* :func:`load` dispatches on the suffix (``.onnx`` / anything else = MLIR text).
* :mod:`m100.frontend.reference` runs a ``func.func`` of linalg on tensors with numpy (the oracle).
* :mod:`m100.frontend.torch_import` (optional, needs torch): a PyTorch module -> ``ModuleOp``.
"""

from __future__ import annotations

import os

from m100.frontend.mlir_load import default_context, load_mlir, load_mlir_text
from m100.frontend.onnx_import import FrontendError, load_onnx, onnx_to_linalg_text

__all__ = [
    "FrontendError",
    "default_context",
    "load",
    "load_mlir",
    "load_mlir_text",
    "load_onnx",
    "onnx_to_linalg_text",
]


def load(path, ctx=None):
    """Load ``path``: ``.onnx`` through torch-mlir, anything else as MLIR text."""
    if str(os.fspath(path)).lower().endswith(".onnx"):
        return load_onnx(path, ctx)
    return load_mlir(path, ctx)

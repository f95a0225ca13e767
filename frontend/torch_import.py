"""PyTorch modules -> xDSL func + linalg on tensors (optional: needs ``torch``, not a dependency).

    from m100.frontend.torch_import import load_torch
    module = load_torch(torch_module, (example_input,))

Uses ``torch_mlir.fx.export_and_import(module, *example, output_type="linalg-on-tensors")`` (the
verified recipe in ``notes/frontend-recipes.md``), prints generic form and parses with the extended
linalg dialect, exactly like the ONNX path. Without torch installed, :func:`load_torch` raises a
one-line :class:`~m100.frontend.onnx_import.FrontendError` saying how to install it.
"""

from __future__ import annotations

from m100.frontend.dense_blobs import attach_dense_blobs, split_dense_blobs
from m100.frontend.onnx_import import FrontendError, _one_line


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def load_torch(module, example_inputs, ctx=None, *, name: str | None = None):
    """Export ``module(*example_inputs)`` with torch-mlir's FX importer and parse it into xDSL."""
    if not torch_available():
        raise FrontendError(
            "importing a PyTorch module needs torch (pip install torch); ONNX files need only torch-mlir"
        )
    from torch_mlir import fx

    from m100.frontend.mlir_load import load_mlir_text, verify_module

    name = name or type(module).__name__
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    try:
        mlir_module = fx.export_and_import(module, *example_inputs, output_type="linalg-on-tensors")
    except Exception as e:  # torch.export / torch-mlir failures
        raise FrontendError(f"{name}: torch-mlir FX import failed: {_one_line(e, 200)}") from None
    text = mlir_module.operation.get_asm(print_generic_op_form=True, large_elements_limit=None)
    text, blobs = split_dense_blobs(text)
    xmod = load_mlir_text(text, ctx, name=name, verify=False)
    attach_dense_blobs(xmod, blobs)
    verify_module(xmod, name)
    return xmod

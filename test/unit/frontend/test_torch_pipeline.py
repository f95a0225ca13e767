"""torch-mlir's lowering without its shape refinement where it has nothing to refine
(``m100.frontend.torch_pipeline``): the same text as torch-mlir's whole pipeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from m100.frontend import models

pytest.importorskip("torch_mlir")

DATA = Path(__file__).resolve().parents[2] / "data"


def _imported(model):
    """(torch-mlir module, its context) of ``model`` after torch-mlir's ONNX import."""
    import torch_mlir.ir as tir
    from torch_mlir.dialects import torch as torch_d
    from torch_mlir.extras import onnx_importer

    from m100.frontend import onnx_import

    prepared = onnx_import.prepare_model(model, "m")
    ctx = tir.Context()
    ctx.enable_multithreading(False)
    torch_d.register_dialect(ctx)
    info = onnx_importer.ModelInfo(prepared, config=onnx_importer.Config())
    module = info.create_module(context=ctx)
    onnx_importer.NodeImporter.define_function(info.main_graph, module.operation).import_all()
    return module, ctx


def _full(model) -> str:
    """The generic text after torch-mlir's own pipeline in one pass manager (the oracle)."""
    from torch_mlir.passmanager import PassManager

    from m100.frontend import torch_pipeline

    module, ctx = _imported(model)
    with ctx:
        PassManager.parse(torch_pipeline.PIPELINE).run(module.operation)
    return module.operation.get_asm(print_generic_op_form=True, large_elements_limit=None)


def _ours(model, skip: bool = True) -> tuple[str, bool]:
    from m100.frontend import torch_pipeline

    module, ctx = _imported(model)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch_pipeline, "SKIP_REFINEMENT", skip)
        skipped = torch_pipeline.run(module, ctx)
    return module.operation.get_asm(print_generic_op_form=True, large_elements_limit=None), skipped


def test_parts_add_up_to_the_pipeline():
    """The three parts are torch-mlir's printed pipeline cut in two places, nothing dropped."""
    import torch_mlir.ir as tir
    from torch_mlir.dialects import torch as torch_d
    from torch_mlir.passmanager import PassManager

    from m100.frontend import torch_pipeline

    ctx = tir.Context()
    torch_d.register_dialect(ctx)
    cut = torch_pipeline.parts(ctx)
    assert cut is not None
    with ctx:
        whole = str(PassManager.parse(torch_pipeline.PIPELINE))
        printed = [str(PassManager.parse(p)) for p in cut]
    head = "builtin.module("
    assert all(p.startswith(head) and p.endswith(")") for p in printed)
    assert head + ",".join(p[len(head):-1] for p in printed) + ")" == whole
    assert "torch-reify-shape-calculations" in printed[1]
    assert "torch-reify-shape-calculations" not in printed[0] + printed[2]
    assert "torch-scalarize-shapes" in printed[1]


def _reshape_by_runtime_shape():
    """y = Relu(Reshape(x, s)) with the shape ``s`` an input: known at run time only."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["r"]),
                           helper.make_node("Relu", ["r"], ["y"])], "g", [x, s], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _dynamic_batch():
    """Relu(MatMul(x, w)) with x of a symbolic batch dimension."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    w = numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(8, 4), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]),
                           helper.make_node("Relu", ["m"], ["y"])], "g", [x], [y], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _reshape_by_constant():
    """Flatten-like Reshape by a constant shape initializer, then Gemm (static everywhere)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])
    s = numpy_helper.from_array(np.array([2, 12], dtype=np.int64), "s")
    w = numpy_helper.from_array(np.ones((12, 5), dtype=np.float32), "w")
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["r"]),
                           helper.make_node("MatMul", ["r", "w"], ["y"])], "g", [x], [y], [s, w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _onnx_function():
    """MeanVarianceNormalization: an ONNX function, imported as a call to a private function."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])
    g = helper.make_graph([helper.make_node("MeanVarianceNormalization", ["x"], ["y"])], "g",
                          [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("build, skips", [
    (lambda: models.conv_relu_maxpool(f=16), True),
    (lambda: models.resnet18(hw=32, num_classes=10), True),
    (models.mlp, True),
    (lambda: onnx.load(str(DATA / "llama_layer_small.onnx")), None),
    (lambda: onnx.load(str(DATA / "llama_lm_small.onnx")), None),
    (_reshape_by_constant, None),
    (_reshape_by_runtime_shape, False),
    (_dynamic_batch, False),
    (_onnx_function, False),
], ids=["convnet", "resnet18-32", "mlp", "llama_layer", "llama_lm", "reshape-const",
        "reshape-runtime-shape", "dynamic-batch", "onnx-function"])
def test_light_pipeline_is_the_full_one(build, skips):
    """Where the refinement is skipped the text is torch-mlir's whole pipeline's; where a shape is
    not static or computed at run time, or a function is called, it is not skipped (``skips``
    None: either)."""
    model = build()
    want = _full(model)
    got, skipped = _ours(model)
    if skips is not None:
        assert skipped is skips
    assert got == want
    # the split pipeline with the refinement always run is torch-mlir's pipeline too
    assert _ours(model, skip=False) == (want, False)

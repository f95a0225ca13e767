"""m100-graph on the onnx wheel's real architectures (random weights): the reference executor
gives the same logits before and after the pipeline, and every op is classified. Slow (torch-mlir
import of ResNet-50 takes about a minute): `make test-slow`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from m100.context import make_context  # noqa: E402
from m100.frontend import load_onnx, models  # noqa: E402
from m100.frontend.reference import run  # noqa: E402
from m100.passes.graph.classify_ops import UNITS  # noqa: E402
from m100.passes.graph.common import UNIT  # noqa: E402
from m100.passes.graph.m100_graph import M100Graph  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _logits(model):
    """Drop a final Softmax (random weights saturate it, which would hide differences)."""
    g = model.graph
    last = g.node[-1]
    if last.op_type == "Softmax" and last.output[0] == g.output[0].name:
        src = last.input[0]
        del g.node[-1]
        for n in g.node:
            for i, o in enumerate(n.output):
                if o == src:
                    n.output[i] = g.output[0].name
    return model


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet", "resnet50", "inception_v1", "shufflenet"])
def test_light_model(name):
    path = LIGHT / f"light_{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} not in this onnx wheel")
    model = _logits(models.randomize_light_model(onnx.load(str(path))))
    ctx = make_context()
    before = load_onnx(model, ctx)
    after = load_onnx(model, ctx)
    M100Graph().apply(ctx, after)
    after.verify()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (ref,) = run(before, [x])
    (got,) = run(after, [x])
    assert np.std(ref) > 1e-3  # not saturated: the comparison means something
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(ref))))
    from xdsl.dialects import func
    for f in after.walk():
        if isinstance(f, func.FuncOp):
            for op in f.body.blocks[0].ops:
                if op.name.startswith(("linalg.", "tensor.")) and op.name != "tensor.empty":
                    assert op.attributes[UNIT].data in UNITS, op.name

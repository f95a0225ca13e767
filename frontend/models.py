"""Small ONNX models built with ``onnx.helper`` for tests and benchmarks (no torch, nothing downloaded).

* :func:`mlp` -- MatMul + Add + Relu (+ Gemm head).
* :func:`conv_relu_maxpool` -- Conv + Relu + MaxPool.
* :func:`resnet18` -- ResNet-18 (BasicBlocks, BatchNorm, residual Adds, GlobalAveragePool, Gemm) with
  random weights and random BatchNorm statistics (so the outputs are not ~0 and a wrong op shows).
* :func:`randomize_light_model` -- the onnx wheel's ``light_*.onnx`` models build every weight with
  ``ConstantOfShape`` (all values equal, so the output is a constant vector that hides most bugs); this
  replaces those weights with random initializers.
"""

from __future__ import annotations

import numpy as np

OPSET = 17


def _onnx():
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    return onnx, TensorProto, helper, numpy_helper


def _model(nodes, name, inputs, outputs, inits, opset=OPSET):
    onnx, TensorProto, helper, numpy_helper = _onnx()
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def mlp(batch=4, d_in=16, hidden=32, d_out=10, seed=0):
    """x[batch, d_in] -> MatMul -> Add -> Relu -> MatMul -> Add -> Relu -> Gemm(transB) -> y[batch, d_out]."""
    _, _, helper, _ = _onnx()
    rng = np.random.default_rng(seed)
    f = lambda *s: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)  # noqa: E731
    inits = {"W1": f(d_in, hidden), "B1": f(hidden), "W2": f(hidden, hidden), "B2": f(hidden),
             "W3": f(d_out, hidden), "B3": f(d_out)}
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h0"]),
        helper.make_node("Add", ["h0", "B1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "W2"], ["h3"]),
        helper.make_node("Add", ["h3", "B2"], ["h4"]),
        helper.make_node("Relu", ["h4"], ["h5"]),
        helper.make_node("Gemm", ["h5", "W3", "B3"], ["y"], transB=1),
    ]
    return _model(nodes, "mlp", [("x", [batch, d_in])], [("y", [batch, d_out])], inits)


def conv_relu_maxpool(n=1, c=3, hw=16, f=8, seed=0):
    """x[n,c,hw,hw] -> Conv 3x3 pad 1 (+bias) -> Relu -> MaxPool 2x2/2 -> Conv 3x3 stride 2 -> Relu."""
    _, _, helper, _ = _onnx()
    rng = np.random.default_rng(seed)
    inits = {
        "W1": (rng.standard_normal((f, c, 3, 3)) / np.sqrt(c * 9)).astype(np.float32),
        "B1": rng.standard_normal(f).astype(np.float32) * 0.1,
        "W2": (rng.standard_normal((f, f, 3, 3)) / np.sqrt(f * 9)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "W2"], ["c2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["y"]),
    ]
    out_hw = ((hw // 2) + 2 - 3) // 2 + 1
    return _model(nodes, "convnet", [("x", [n, c, hw, hw])], [("y", [n, f, out_hw, out_hw])], inits)


def resnet18(batch=1, hw=224, num_classes=1000, seed=0):
    """ResNet-18 (torchvision layout, NCHW) with random weights and BatchNorm statistics."""
    _, _, helper, _ = _onnx()
    rng = np.random.default_rng(seed)
    nodes, inits = [], {}
    counter = [0]

    def name(p):
        counter[0] += 1
        return f"{p}{counter[0]}"

    def conv_bn(x, cin, cout, k, stride, relu):
        w, y = name("w"), name("conv")
        inits[w] = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        p = k // 2
        nodes.append(helper.make_node("Conv", [x, w], [y], kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[p, p, p, p]))
        s, b, m, v, z = name("bn_s"), name("bn_b"), name("bn_m"), name("bn_v"), name("bn")
        inits[s] = rng.uniform(0.5, 1.5, cout).astype(np.float32)
        inits[b] = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits[m] = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits[v] = rng.uniform(0.5, 1.5, cout).astype(np.float32)
        nodes.append(helper.make_node("BatchNormalization", [y, s, b, m, v], [z], epsilon=1e-5))
        if relu:
            r = name("relu")
            nodes.append(helper.make_node("Relu", [z], [r]))
            return r
        return z

    x = conv_bn("x", 3, 64, 7, 2, True)
    p = name("pool")
    nodes.append(helper.make_node("MaxPool", [x], [p], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = p, 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for blk in range(2):
            s = stride if blk == 0 else 1
            h = conv_bn(x, cin, cout, 3, s, True)
            h = conv_bn(h, cout, cout, 3, 1, False)
            sc = conv_bn(x, cin, cout, 1, s, False) if (s != 1 or cin != cout) else x
            a, r = name("add"), name("relu")
            nodes.append(helper.make_node("Add", [h, sc], [a]))
            nodes.append(helper.make_node("Relu", [a], [r]))
            x, cin = r, cout
    g, fl = name("gap"), name("flat")
    nodes.append(helper.make_node("GlobalAveragePool", [x], [g]))
    nodes.append(helper.make_node("Flatten", [g], [fl], axis=1))
    inits["fc_w"] = (rng.standard_normal((num_classes, 512)) / np.sqrt(512)).astype(np.float32)
    inits["fc_b"] = (rng.standard_normal(num_classes) * 0.1).astype(np.float32)
    nodes.append(helper.make_node("Gemm", [fl, "fc_w", "fc_b"], ["y"], transB=1))
    return _model(nodes, "resnet18", [("x", [batch, 3, hw, hw])], [("y", [batch, num_classes])], inits)


def randomize_light_model(model, seed=0):
    """Replace the ``ConstantOfShape`` weights of an onnx-wheel ``light_*`` model by random initializers.

    BatchNorm variances (4th input of BatchNormalization; also the ``riv`` names of ResNet-50) get
    values in [0.5, 1.5]; other weights N(0, 2/fan_in). Returns a new ``ModelProto``.
    """
    onnx, _, helper, numpy_helper = _onnx()
    model = onnx.ModelProto.FromString(model.SerializeToString())
    rng = np.random.default_rng(seed)
    g = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    positive = {n.input[4] for n in g.node if n.op_type == "BatchNormalization" and len(n.input) > 4}
    scales = {n.input[1] for n in g.node if n.op_type == "BatchNormalization"}
    keep, new_inits = [], []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input and node.input[0] in inits:
            shape = tuple(int(d) for d in inits[node.input[0]])
            out = node.output[0]
            if out in positive or out in scales:
                arr = rng.uniform(0.5, 1.5, shape)
            else:
                fan = int(np.prod(shape[1:])) if len(shape) > 1 else max(1, shape[0] if shape else 1)
                arr = rng.standard_normal(shape) * np.sqrt(2.0 / fan) * (0.1 if len(shape) == 1 else 1.0)
            new_inits.append(numpy_helper.from_array(arr.astype(np.float32), out))
        else:
            keep.append(node)
    del g.node[:]
    g.node.extend(keep)
    used = {i for n in keep for i in n.input}
    old = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(old + new_inits)
    # old IR versions also list initializers as graph inputs: keep only the real (fed) inputs
    init_names = {i.name for i in g.initializer}
    real = [i for i in g.input if i.name not in init_names and i.name in used]
    del g.input[:]
    g.input.extend(real)
    model.ir_version = max(model.ir_version, 7)  # IR >= 4: initializers need not be graph inputs
    return model


if __name__ == "__main__":  # python -m m100.frontend.models NAME OUT.onnx
    import sys

    import onnx

    builders = {"mlp": mlp, "convnet": conv_relu_maxpool, "resnet18": resnet18}
    if len(sys.argv) != 3 or sys.argv[1] not in builders:
        sys.exit(f"usage: python -m m100.frontend.models {{{'|'.join(builders)}}} OUT.onnx")
    onnx.save(builders[sys.argv[1]](), sys.argv[2])

"""Vision model families as ONNX graphs built with ``onnx.helper`` (issue 12; nothing downloaded,
nothing large committed): random He-scaled weights and random BatchNorm statistics, so the
outputs are O(1) and a wrong op shows.

Every builder takes ``hw`` (input side), ``width`` (channel multiplier; thin models for the default
test run) and ``num_classes``; :data:`FAMILIES` maps a name to ``(builder, full-size kwargs,
small kwargs)``:

* ``mobilenet_v2`` -- inverted residuals, depthwise 3x3, ReLU6 (Clip);
* ``mobilenet_v3`` -- MobileNetV3-Small: depthwise 3x3/5x5, squeeze-excite, hard-swish/sigmoid;
* ``shufflenet_v2`` -- channel split (Split), shuffle (Reshape/Transpose/Reshape), depthwise;
* ``efficientnet_b0`` -- MBConv with SiLU (x * Sigmoid) and squeeze-excite, 3x3/5x5 depthwise;
* ``googlenet`` -- GoogLeNet v1: 7x7/2 stem, LRN, ceil-mode max pooling, inception concat;
* ``squeezenet`` -- SqueezeNet 1.1 fire modules (concat of 1x1 and 3x3 expands);
* ``resnet50`` -- bottleneck ResNet-50;
* ``yolo`` -- a YOLO-style detector: strided conv backbone, FPN neck (nearest Resize x2 + Concat),
  two 1x1 heads with Sigmoid;
* ``unet`` -- U-Net: conv blocks, max-pool down, ConvTranspose 2x2/2 up, skip Concats.
"""

from __future__ import annotations

import numpy as np

OPSET = 17


class _Net:
    """Accumulates nodes and initializers; every layer returns its output name."""

    def __init__(self, seed: int):
        from onnx import helper
        self.h = helper
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: dict[str, np.ndarray] = {}
        self.k = 0

    def name(self, p: str) -> str:
        self.k += 1
        return f"{p}{self.k}"

    def const(self, arr, p="c") -> str:
        n = self.name(p)
        self.inits[n] = np.asarray(arr)
        return n

    def op(self, op: str, ins: list[str], **attrs) -> str:
        y = self.name(op.lower())
        self.nodes.append(self.h.make_node(op, ins, [y], **attrs))
        return y

    def conv(self, x, cin, cout, k, s=1, g=1, bn=True, act=None, bias=False, pad=None):
        w = self.const((self.rng.standard_normal((cout, cin // g, k, k))
                        * np.sqrt(2.0 / (cin // g * k * k))).astype(np.float32), "w")
        ins = [x, w]
        if bias:
            ins.append(self.const((self.rng.standard_normal(cout) * 0.1).astype(np.float32), "b"))
        p = k // 2 if pad is None else pad
        y = self.op("Conv", ins, kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p], group=g)
        if bn:
            r = self.rng
            y = self.op("BatchNormalization", [
                y, self.const(r.uniform(0.5, 1.5, cout).astype(np.float32), "bn_s"),
                self.const((r.standard_normal(cout) * 0.1).astype(np.float32), "bn_b"),
                self.const((r.standard_normal(cout) * 0.1).astype(np.float32), "bn_m"),
                self.const(r.uniform(0.5, 1.5, cout).astype(np.float32), "bn_v")], epsilon=1e-5)
        return self.act(y, act)

    def act(self, y, act):
        if act is None:
            return y
        if act == "relu":
            return self.op("Relu", [y])
        if act == "relu6":
            return self.op("Clip", [y, self.const(np.float32(0)), self.const(np.float32(6))])
        if act == "hsigmoid":  # max(0, min(1, x/6 + 1/2)) (ONNX HardSigmoid, alpha 1/6)
            t = self.op("Add", [self.op("Mul", [y, self.const(np.float32(1 / 6))]),
                                self.const(np.float32(0.5))])
            return self.op("Clip", [t, self.const(np.float32(0)), self.const(np.float32(1))])
        if act == "hswish":
            return self.op("Mul", [y, self.act(y, "hsigmoid")])
        if act == "sigmoid":
            return self.op("Sigmoid", [y])
        if act == "silu":
            return self.op("Mul", [y, self.op("Sigmoid", [y])])
        raise ValueError(act)

    def se(self, x, c, squeeze, gate="hsigmoid", inner="relu"):
        """Squeeze-excite: x * gate(conv(act(conv(GAP(x)))))."""
        s = self.op("GlobalAveragePool", [x])
        s = self.conv(s, c, squeeze, 1, bn=False, bias=True, act=inner)
        s = self.conv(s, squeeze, c, 1, bn=False, bias=True, act=gate)
        return self.op("Mul", [x, s])

    def head(self, x, c, num_classes):
        g = self.op("GlobalAveragePool", [x])
        f = self.op("Flatten", [g], axis=1)
        w = self.const((self.rng.standard_normal((num_classes, c)) / np.sqrt(c)).astype(np.float32))
        b = self.const((self.rng.standard_normal(num_classes) * 0.1).astype(np.float32))
        return self.op("Gemm", [f, w, b], transB=1)

    def model(self, name, y_names, hw, batch=1):
        import onnx
        h = self.h
        graph = h.make_graph(
            self.nodes, name, [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                        [batch, 3, hw, hw])],
            [h.make_tensor_value_info(y, onnx.TensorProto.FLOAT, None) for y in y_names],
            [onnx.numpy_helper.from_array(np.asarray(a, np.float32) if np.asarray(a).dtype ==
                                          np.float64 else np.asarray(a), n)
             for n, a in self.inits.items()])
        m = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])
        m.ir_version = 8
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.output}
        for o in m.graph.output:
            o.CopyFrom(inferred[o.name])
        onnx.checker.check_model(m)
        return m


def _ch(c, width, div=8):
    return max(div, int(c * width + div / 2) // div * div)


def mobilenet_v2(hw=224, width=1.0, num_classes=1000, seed=0, blocks=None):
    n = _Net(seed)
    c = _ch(32, width)
    x = n.conv("x", 3, c, 3, 2, act="relu6")
    table = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
             (6, 160, 3, 2), (6, 320, 1, 1)]
    for t, co, reps, s in table[:blocks]:
        co = _ch(co, width)
        for i in range(reps):
            hid = c * t
            y = x if t == 1 else n.conv(x, c, hid, 1, act="relu6")
            y = n.conv(y, hid, hid, 3, s if i == 0 else 1, g=hid, act="relu6")
            y = n.conv(y, hid, co, 1)
            x = n.op("Add", [x, y]) if (i > 0 or s == 1) and c == co else y
            c = co
    last = _ch(1280, max(1.0, width))
    x = n.conv(x, c, last, 1, act="relu6")
    return n.model("mobilenet_v2", [n.head(x, last, num_classes)], hw)


def mobilenet_v3(hw=224, width=1.0, num_classes=1000, seed=0):
    """MobileNetV3-Small."""
    n = _Net(seed)
    c = _ch(16, width)
    x = n.conv("x", 3, c, 3, 2, act="hswish")
    # k, expansion, out, SE, activation, stride
    table = [(3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2),
             (3, 88, 24, False, "relu", 1), (5, 96, 40, True, "hswish", 2),
             (5, 240, 40, True, "hswish", 1), (5, 240, 40, True, "hswish", 1),
             (5, 120, 48, True, "hswish", 1), (5, 144, 48, True, "hswish", 1),
             (5, 288, 96, True, "hswish", 2), (5, 576, 96, True, "hswish", 1),
             (5, 576, 96, True, "hswish", 1)]
    for k, e, co, se, act, s in table:
        e, co = _ch(e, width), _ch(co, width)
        y = x if e == c else n.conv(x, c, e, 1, act=act)
        y = n.conv(y, e, e, k, s, g=e, act=act)
        if se:
            y = n.se(y, e, _ch(e // 4, 1.0))
        y = n.conv(y, e, co, 1)
        x = n.op("Add", [x, y]) if s == 1 and c == co else y
        c = co
    last = _ch(576, width)
    x = n.conv(x, c, last, 1, act="hswish")
    return n.model("mobilenet_v3", [n.head(x, last, num_classes)], hw)


def shufflenet_v2(hw=224, width=1.0, num_classes=1000, seed=0):
    n = _Net(seed)
    stages = [_ch(116, width, 4), _ch(232, width, 4), _ch(464, width, 4)]
    c = 24
    x = n.conv("x", 3, c, 3, 2, act="relu")
    x = n.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])

    def shuffle(t, ch):
        s = n.op("Reshape", [t, n.const(np.array([1, 2, ch // 2, -1], np.int64))])
        s = n.op("Transpose", [s], perm=[0, 2, 1, 3])
        return s, ch

    hwc = [hw // 4]
    for co, reps in zip(stages, (4, 8, 4)):
        for i in range(reps):
            half = co // 2
            if i == 0:
                a = n.conv(x, c, c, 3, 2, g=c)
                a = n.conv(a, c, half, 1, act="relu")
                b = n.conv(x, c, half, 1, act="relu")
                b = n.conv(b, half, half, 3, 2, g=half)
                b = n.conv(b, half, half, 1, act="relu")
                hwc[0] = (hwc[0] + 1) // 2
            else:
                a = n.name("split_a")
                bb = n.name("split_b")
                n.nodes.append(n.h.make_node("Split", [x, n.const(np.array([half, half], np.int64))],
                                             [a, bb], axis=1))
                b = n.conv(bb, half, half, 1, act="relu")
                b = n.conv(b, half, half, 3, 1, g=half)
                b = n.conv(b, half, half, 1, act="relu")
            cat = n.op("Concat", [a, b], axis=1)
            s, _ = shuffle(cat, co)
            x = n.op("Reshape", [s, n.const(np.array([1, co, hwc[0], hwc[0]], np.int64))])
            c = co
    last = 1024 if width >= 1 else _ch(1024, width)
    x = n.conv(x, c, last, 1, act="relu")
    return n.model("shufflenet_v2", [n.head(x, last, num_classes)], hw)


def efficientnet_b0(hw=224, width=1.0, num_classes=1000, seed=0):
    n = _Net(seed)
    c = _ch(32, width)
    x = n.conv("x", 3, c, 3, 2, act="silu")
    # expansion, k, stride, out, repeats
    table = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
             (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]
    for t, k, s, co, reps in table:
        co = _ch(co, width)
        for i in range(reps):
            e = c * t
            y = x if t == 1 else n.conv(x, c, e, 1, act="silu")
            y = n.conv(y, e, e, k, s if i == 0 else 1, g=e, act="silu")
            y = n.se(y, e, max(1, c // 4), gate="sigmoid", inner="silu")
            y = n.conv(y, e, co, 1)
            x = n.op("Add", [x, y]) if i > 0 and c == co else y
            c = co
    last = _ch(1280, max(1.0, width))
    x = n.conv(x, c, last, 1, act="silu")
    return n.model("efficientnet_b0", [n.head(x, last, num_classes)], hw)


def googlenet(hw=224, width=1.0, num_classes=1000, seed=0):
    """GoogLeNet (Inception v1) with its two LRNs and ceil-mode max pooling."""
    n = _Net(seed)
    w = lambda v: _ch(v, width)  # noqa: E731

    def pool(t, k=3, s=2, p=0):
        return n.op("MaxPool", [t], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, ceil_mode=1)

    def lrn(t):
        return n.op("LRN", [t], size=5, alpha=1e-4, beta=0.75, bias=1.0)

    x = n.conv("x", 3, w(64), 7, 2, bn=False, bias=True, act="relu")
    x = lrn(pool(x))
    x = n.conv(x, w(64), w(64), 1, bn=False, bias=True, act="relu")
    x = n.conv(x, w(64), w(192), 3, bn=False, bias=True, act="relu")
    x = pool(lrn(x))
    c = w(192)
    cfg = [(64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), "pool",
           (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64),
           (112, 144, 288, 32, 64, 64), (256, 160, 320, 32, 128, 128), "pool",
           (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)]
    for blk in cfg:
        if blk == "pool":
            x = pool(x)
            continue
        b1, r3, b3, r5, b5, bp = (w(v) for v in blk)
        p1 = n.conv(x, c, b1, 1, bn=False, bias=True, act="relu")
        p2 = n.conv(n.conv(x, c, r3, 1, bn=False, bias=True, act="relu"), r3, b3, 3, bn=False,
                    bias=True, act="relu")
        p3 = n.conv(n.conv(x, c, r5, 1, bn=False, bias=True, act="relu"), r5, b5, 5, bn=False,
                    bias=True, act="relu")
        p4 = n.conv(pool(x, 3, 1, 1), c, bp, 1, bn=False, bias=True, act="relu")
        x = n.op("Concat", [p1, p2, p3, p4], axis=1)
        c = b1 + b3 + b5 + bp
    return n.model("googlenet", [n.head(x, c, num_classes)], hw)


def squeezenet(hw=224, width=1.0, num_classes=1000, seed=0):
    """SqueezeNet 1.1."""
    n = _Net(seed)
    w = lambda v: _ch(v, width)  # noqa: E731

    def pool(t):
        return n.op("MaxPool", [t], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)

    def fire(t, cin, s, e):
        sq = n.conv(t, cin, s, 1, bn=False, bias=True, act="relu")
        a = n.conv(sq, s, e, 1, bn=False, bias=True, act="relu")
        b = n.conv(sq, s, e, 3, bn=False, bias=True, act="relu")
        return n.op("Concat", [a, b], axis=1), 2 * e

    x = pool(n.conv("x", 3, w(64), 3, 2, bn=False, bias=True, act="relu", pad=0))
    c = w(64)
    for item in [(16, 64), (16, 64), "pool", (32, 128), (32, 128), "pool", (48, 192), (48, 192),
                 (64, 256), (64, 256)]:
        if item == "pool":
            x = pool(x)
            continue
        x, c = fire(x, c, w(item[0]), w(item[1]))
    x = n.conv(x, c, num_classes, 1, bn=False, bias=True, act="relu")
    y = n.op("Flatten", [n.op("GlobalAveragePool", [x])], axis=1)
    return n.model("squeezenet", [y], hw)


def resnet50(hw=224, width=1.0, num_classes=1000, seed=0):
    n = _Net(seed)
    w = lambda v: _ch(v, width)  # noqa: E731
    x = n.conv("x", 3, w(64), 7, 2, act="relu")
    x = n.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = w(64)
    for mid, reps, s in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        mid = w(mid)
        out = 4 * mid
        for i in range(reps):
            st = s if i == 0 else 1
            y = n.conv(x, c, mid, 1, act="relu")
            y = n.conv(y, mid, mid, 3, st, act="relu")
            y = n.conv(y, mid, out, 1)
            sc = n.conv(x, c, out, 1, st) if (st != 1 or c != out) else x
            x = n.op("Relu", [n.op("Add", [y, sc])])
            c = out
    return n.model("resnet50", [n.head(x, c, num_classes)], hw)


def yolo(hw=416, width=1.0, num_classes=80, seed=0, anchors=3):
    """YOLO-style: a strided conv backbone (32x down), an FPN neck (nearest Resize x2 + Concat
    with the 16x feature) and two 1x1 detection heads with Sigmoid."""
    n = _Net(seed)
    w = lambda v: _ch(v, width)  # noqa: E731
    x, c = "x", 3
    feats = []
    for co in (32, 64, 128, 256, 512):
        x = n.conv(x, c, w(co), 3, 2, act="relu")
        x = n.conv(x, w(co), w(co), 3, 1, act="relu")
        c = w(co)
        feats.append((x, c))
    (f16, c16), (f32, c32) = feats[-2], feats[-1]
    out_ch = anchors * (5 + num_classes)
    p32 = n.conv(f32, c32, w(256), 1, act="relu")
    h32 = n.act(n.conv(p32, w(256), out_ch, 1, bn=False, bias=True), "sigmoid")
    up = n.conv(p32, w(256), w(128), 1, act="relu")
    up = n.op("Resize", [up, "", n.const(np.array([1, 1, 2, 2], np.float32), "scales")],
              mode="nearest")
    cat = n.op("Concat", [up, f16], axis=1)
    p16 = n.conv(cat, w(128) + c16, w(256), 3, act="relu")
    h16 = n.act(n.conv(p16, w(256), out_ch, 1, bn=False, bias=True), "sigmoid")
    return n.model("yolo", [h32, h16], hw)


def unet(hw=128, width=1.0, num_classes=2, seed=0, depth=4):
    n = _Net(seed)
    w = lambda v: _ch(v, width)  # noqa: E731

    def block(t, cin, co):
        t = n.conv(t, cin, co, 3, act="relu")
        return n.conv(t, co, co, 3, act="relu")

    x, c = "x", 3
    skips = []
    for i in range(depth):
        co = w(64 * 2 ** i)
        x = block(x, c, co)
        skips.append((x, co))
        x = n.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        c = co
    co = w(64 * 2 ** depth)
    x = block(x, c, co)
    c = co
    for sk, cs in reversed(skips):
        wt = n.const((n.rng.standard_normal((c, cs, 2, 2)) * np.sqrt(1.0 / c)).astype(np.float32), "wt")
        bt = n.const((n.rng.standard_normal(cs) * 0.1).astype(np.float32), "bt")
        up = n.op("ConvTranspose", [x, wt, bt], kernel_shape=[2, 2], strides=[2, 2])
        x = block(n.op("Concat", [sk, up], axis=1), 2 * cs, cs)
        c = cs
    y = n.conv(x, c, num_classes, 1, bn=False, bias=True)
    return n.model("unet", [y], hw)


#: name -> (builder, full-size kwargs, small kwargs for the default test run)
FAMILIES = {
    "mobilenet_v2": (mobilenet_v2, dict(hw=224), dict(hw=32, width=0.25, num_classes=10)),
    "mobilenet_v3": (mobilenet_v3, dict(hw=224), dict(hw=32, width=0.25, num_classes=10)),
    "shufflenet_v2": (shufflenet_v2, dict(hw=224), dict(hw=32, width=0.25, num_classes=10)),
    "efficientnet_b0": (efficientnet_b0, dict(hw=224), dict(hw=32, width=0.25, num_classes=10)),
    "googlenet": (googlenet, dict(hw=224), dict(hw=64, width=0.125, num_classes=10)),
    "squeezenet": (squeezenet, dict(hw=224), dict(hw=64, width=0.25, num_classes=10)),
    "resnet50": (resnet50, dict(hw=224), dict(hw=32, width=0.125, num_classes=10)),
    "yolo": (yolo, dict(hw=416), dict(hw=64, width=0.125, num_classes=3)),
    "unet": (unet, dict(hw=128), dict(hw=32, width=0.125, num_classes=2, depth=3)),
}


def build(name: str, size: str = "small", **kw):
    """The model ``name`` of :data:`FAMILIES` at ``size`` ``"small"`` or ``"full"``."""
    fn, full, small = FAMILIES[name]
    return fn(**{**(small if size == "small" else full), **kw})


def op_model(kind: str):
    """One-op ONNX models of the vision rewrites (lit tests, docs): ``lrn``, ``resize_nearest``,
    ``resize_linear``, ``convtranspose_k2``, ``convtranspose_k3``, ``pad_reflect``, ``lppool``,
    ``maxpool_dilated``, ``avgpool_pad``, ``conv1d``, ``depthwise``."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    x_shape = [1, 4, 8, 8]
    inits = {}
    if kind == "lrn":
        node = h.make_node("LRN", ["x"], ["y"], size=3, alpha=1e-3, beta=0.75, bias=1.0)
    elif kind in ("resize_nearest", "resize_linear"):
        inits["s"] = np.array([1, 1, 2, 2], np.float32)
        node = h.make_node("Resize", ["x", "", "s"], ["y"], mode=kind.split("_")[1],
                           coordinate_transformation_mode="asymmetric" if "nearest" in kind
                           else "half_pixel", nearest_mode="floor")
    elif kind == "convtranspose_k2":
        inits["w"], inits["b"] = f(4, 6, 2, 2), f(6)
        node = h.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2])
    elif kind == "convtranspose_k3":
        inits["w"] = f(4, 6, 3, 3)
        node = h.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1],
                           output_padding=[1, 1])
    elif kind == "pad_reflect":
        inits["p"] = np.array([0, 0, 2, 1, 0, 0, 1, 2], np.int64)
        node = h.make_node("Pad", ["x", "p"], ["y"], mode="reflect")
    elif kind == "lppool":
        node = h.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], p=2)
    elif kind == "maxpool_dilated":
        node = h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])
    elif kind == "avgpool_pad":
        node = h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    elif kind == "conv1d":
        x_shape = [1, 4, 16]
        inits["w"] = f(6, 4, 3)
        node = h.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1])
    elif kind == "depthwise":
        inits["w"] = f(4, 1, 3, 3)
        node = h.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], group=4)
    else:
        raise ValueError(kind)
    g = h.make_graph([node], kind, [h.make_tensor_value_info("x", T.FLOAT, x_shape)],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)])
    m.ir_version = 8
    out = onnx.shape_inference.infer_shapes(m).graph.output[0]
    m.graph.output[0].CopyFrom(out)
    return m

"""Transformer models built with ``onnx.helper`` (random weights, nothing downloaded), in the form
PyTorch's ONNX exporter writes them: ``[B, S, D] @ W + b`` linears, heads by Reshape + Transpose,
``Q @ K^T`` batched MatMuls, Softmax, erf-GELU as Div/Erf/Add/Mul, LayerNormalization.

* :func:`bert_layer` -- one BERT encoder layer (post-LN): self-attention + FFN, each with a
  residual Add and LayerNormalization.
* :func:`vit` -- a ViT: patch-embedding Conv (kernel = stride = patch), class token (Concat),
  position embedding (Add), ``depth`` pre-LN encoder layers, final LayerNorm, the class token's
  row (Slice) through a linear head. ``vit(img=224, patch=16, dim=192, depth=12, heads=3,
  mlp=768)`` is ViT-tiny; the defaults are a small one for the test suite.
"""

from __future__ import annotations

import math

import numpy as np

from m100.frontend.models import _model, _onnx

OPSET = 18


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: dict[str, np.ndarray] = {}
        self.k = 0

    def w(self, name: str, *shape: int, scale: float | None = None) -> str:
        s = scale if scale is not None else 1.0 / math.sqrt(shape[0])
        self.inits[name] = (self.rng.standard_normal(shape) * s).astype(np.float32)
        return name

    def c(self, name: str, value) -> str:
        self.inits[name] = np.asarray(value)
        return name

    def op(self, op: str, ins: list[str], **attrs) -> str:
        _, _, helper, _ = _onnx()
        self.k += 1
        out = f"{op.lower()}_{self.k}"
        self.nodes.append(helper.make_node(op, ins, [out], name=f"{op}_{self.k}", **attrs))
        return out

    def linear(self, x: str, p: str, d_in: int, d_out: int) -> str:
        y = self.op("MatMul", [x, self.w(f"{p}.weight", d_in, d_out)])
        return self.op("Add", [y, self.w(f"{p}.bias", d_out, scale=0.1)])

    def layernorm(self, x: str, p: str, d: int) -> str:
        g = self.c(f"{p}.gamma", (1.0 + 0.1 * self.rng.standard_normal(d)).astype(np.float32))
        b = self.c(f"{p}.beta", (0.1 * self.rng.standard_normal(d)).astype(np.float32))
        return self.op("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-5)

    def gelu(self, x: str) -> str:
        d = self.op("Div", [x, self.c(f"sqrt2_{self.k}", np.float32(math.sqrt(2.0)))])
        e = self.op("Erf", [d])
        a = self.op("Add", [e, self.c(f"one_{self.k}", np.float32(1.0))])
        m = self.op("Mul", [x, a])
        return self.op("Mul", [m, self.c(f"half_{self.k}", np.float32(0.5))])

    def attention(self, x: str, p: str, b: int, s: int, d: int, heads: int) -> str:
        dh = d // heads
        shp = self.c(f"{p}.heads_shape", np.array([b, s, heads, dh], np.int64))

        def split(t: str) -> str:
            return self.op("Transpose", [self.op("Reshape", [t, shp])], perm=[0, 2, 1, 3])

        q = split(self.linear(x, f"{p}.q", d, d))
        k = split(self.linear(x, f"{p}.k", d, d))
        v = split(self.linear(x, f"{p}.v", d, d))
        kt = self.op("Transpose", [k], perm=[0, 1, 3, 2])
        sc = self.op("Mul", [self.op("MatMul", [q, kt]),
                             self.c(f"{p}.scale", np.float32(1.0 / math.sqrt(dh)))])
        pr = self.op("Softmax", [sc], axis=-1)
        ctx = self.op("Transpose", [self.op("MatMul", [pr, v])], perm=[0, 2, 1, 3])
        ctx = self.op("Reshape", [ctx, self.c(f"{p}.merge_shape", np.array([b, s, d], np.int64))])
        return self.linear(ctx, f"{p}.out", d, d)

    def mlp(self, x: str, p: str, d: int, hidden: int) -> str:
        return self.linear(self.gelu(self.linear(x, f"{p}.fc1", d, hidden)), f"{p}.fc2", hidden, d)


def bert_layer(batch: int = 1, seq: int = 16, dim: int = 64, heads: int = 4, ffn: int = 128,
               seed: int = 0):
    """x[batch, seq, dim] -> one post-LN BERT encoder layer -> y[batch, seq, dim]."""
    bl = _Builder(seed)
    a = bl.attention("x", "attn", batch, seq, dim, heads)
    h = bl.layernorm(bl.op("Add", ["x", a]), "ln1", dim)
    f = bl.mlp(h, "ffn", dim, ffn)
    y = bl.layernorm(bl.op("Add", [h, f]), "ln2", dim)
    bl.nodes.append(_onnx()[2].make_node("Identity", [y], ["y"]))
    return _model(bl.nodes, "bert_layer", [("x", [batch, seq, dim])], [("y", [batch, seq, dim])],
                  bl.inits, opset=OPSET)


def vit(batch: int = 1, img: int = 32, patch: int = 8, chans: int = 3, dim: int = 64,
        depth: int = 2, heads: int = 2, mlp: int = 128, classes: int = 10, seed: int = 0):
    """x[batch, chans, img, img] -> ViT -> logits[batch, classes]."""
    bl = _Builder(seed)
    n = (img // patch) ** 2
    s = n + 1
    pe = bl.op("Conv", ["x", bl.w("patch.weight", dim, chans, patch, patch,
                                  scale=1.0 / math.sqrt(chans * patch * patch)),
                        bl.w("patch.bias", dim, scale=0.1)], kernel_shape=[patch, patch],
               strides=[patch, patch])
    t = bl.op("Reshape", [pe, bl.c("flat_shape", np.array([batch, dim, n], np.int64))])
    t = bl.op("Transpose", [t], perm=[0, 2, 1])
    cls = bl.c("cls_token", (0.1 * bl.rng.standard_normal((batch, 1, dim))).astype(np.float32))
    t = bl.op("Concat", [cls, t], axis=1)
    t = bl.op("Add", [t, bl.c("pos_embed", (0.1 * bl.rng.standard_normal((1, s, dim))).astype(
        np.float32))])
    for i in range(depth):
        t = bl.op("Add", [t, bl.attention(bl.layernorm(t, f"b{i}.ln1", dim), f"b{i}.attn", batch,
                                          s, dim, heads)])
        t = bl.op("Add", [t, bl.mlp(bl.layernorm(t, f"b{i}.ln2", dim), f"b{i}.mlp", dim, mlp)])
    t = bl.layernorm(t, "norm", dim)
    c0 = bl.op("Slice", [t, bl.c("s0", np.array([0], np.int64)), bl.c("s1", np.array([1], np.int64)),
                         bl.c("s_ax", np.array([1], np.int64))])
    c0 = bl.op("Reshape", [c0, bl.c("cls_shape", np.array([batch, dim], np.int64))])
    y = bl.linear(c0, "head", dim, classes)
    bl.nodes.append(_onnx()[2].make_node("Identity", [y], ["y"]))
    return _model(bl.nodes, "vit", [("x", [batch, chans, img, img])], [("y", [batch, classes])],
                  bl.inits, opset=OPSET)

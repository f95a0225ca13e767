"""Small op graphs used by tests, the benchmark and the docs (built directly, no IR)."""

from __future__ import annotations

from .graph import Op, OpGraph, Tensor, conv_out_hw


class GraphBuilder:
    def __init__(self, dtype: str = "f32"):
        self.g = OpGraph()
        self.dtype = dtype
        self.n = 0

    def _name(self, p: str) -> str:
        self.n += 1
        return f"{p}{self.n}"

    def input(self, shape: tuple[int, ...], name: str = "x") -> str:
        self.g.add_tensor(Tensor(name, shape, self.dtype, "input"))
        return name

    def weight(self, shape: tuple[int, ...]) -> str:
        n = self._name("w")
        self.g.add_tensor(Tensor(n, shape, self.dtype, "weight"))
        return n

    def _out(self, shape: tuple[int, ...], dtype: str | None = None) -> str:
        n = self._name("t")
        self.g.add_tensor(Tensor(n, shape, dtype or self.dtype, "act"))
        return n

    def matmul(self, a: str, n: int, b: str | None = None, epilogue: tuple[str, ...] = ()) -> str:
        sa = self.g.tensors[a].shape
        m, k = (sa[0] if len(sa) == 2 else sa[0] * sa[1]), sa[-1]
        b = b or self.weight((k, n))
        o = self._out((m, n))
        self.g.add_op(Op(self._name("matmul"), "tcu.matmul", (a, b), (o,), dict(m=m, n=n, k=k),
                         epilogue))
        return o

    def conv(self, x: str, f: int, k: int = 3, stride: int = 1, pad: int | None = None,
             groups: int = 1, epilogue: tuple[str, ...] = ()) -> str:
        n, h, w, c = self.g.tensors[x].shape
        p = k // 2 if pad is None else pad
        attrs = dict(n=n, h=h, w=w, c=c, f=f, kh=k, kw=k, stride=(stride, stride),
                     pad=(p, p, p, p), groups=groups)
        oh, ow = conv_out_hw(attrs)
        wt = self.weight((k, k, c // groups, f))
        o = self._out((n, oh, ow, f))
        self.g.add_op(Op(self._name("conv"), "tcu.conv2d", (x, wt), (o,), attrs, epilogue))
        return o

    def pool(self, x: str, k: int = 2, stride: int = 2, pad: int = 0) -> str:
        n, h, w, c = self.g.tensors[x].shape
        attrs = dict(n=n, h=h, w=w, c=c, kh=k, kw=k, stride=(stride, stride), pad=(pad,) * 4)
        oh, ow = conv_out_hw(attrs)
        o = self._out((n, oh, ow, c))
        self.g.add_op(Op(self._name("pool"), "cvu.pool", (x,), (o,), attrs))
        return o

    def eltwise(self, *xs: str, kind: str = "relu") -> str:
        o = self._out(self.g.tensors[xs[0]].shape)
        self.g.add_op(Op(self._name(kind), "cvu.elementwise", tuple(xs), (o,), dict(kind=kind)))
        return o

    def reduce_mean_hw(self, x: str) -> str:
        n, h, w, c = self.g.tensors[x].shape
        o = self._out((n, 1, 1, c))
        self.g.add_op(Op(self._name("gap"), "cvu.pool", (x,), (o,),
                         dict(n=n, h=h, w=w, c=c, kh=h, kw=w, stride=(1, 1), pad=(0, 0, 0, 0))))
        return o

    def reshape2d(self, x: str) -> str:
        s = self.g.tensors[x].shape
        o = self._out((s[0], s[-1] if len(s) == 4 and s[1] == s[2] == 1 else s[1] * s[2] * s[3]))
        self.g.add_op(Op(self._name("flatten"), "dtdu.copy", (x,), (o,), {}))
        return o

    def output(self, t: str) -> OpGraph:
        old = self.g.tensors[t]
        self.g.tensors[t] = Tensor(old.name, old.shape, old.dtype, "output")
        return self.g


def matmul_graph(m: int = 1024, n: int = 1024, k: int = 1024, dtype: str = "f32",
                 runtime_b: bool = False) -> OpGraph:
    """``[m, k] @ [k, n]``; ``b`` a weight, or a graph input when ``runtime_b``."""
    b = GraphBuilder(dtype)
    x = b.input((m, k))
    return b.output(b.matmul(x, n, b.input((k, n), "b") if runtime_b else None))


def mlp_graph(m: int, k: int, hidden: int, n: int, dtype: str = "f32") -> OpGraph:
    """``relu(x @ w1) @ w2`` with ``x`` of ``[m, k]``, ``w1`` of ``[k, hidden]``, ``w2`` of
    ``[hidden, n]``."""
    b = GraphBuilder(dtype)
    h = b.eltwise(b.matmul(b.input((m, k)), hidden), kind="relu")
    return b.output(b.matmul(h, n))


def conv_chain(n: int = 1, hw: int = 56, c: int = 64, f: int = 64, dtype: str = "f32") -> OpGraph:
    """conv3x3 -> relu -> conv3x3 -> maxpool2x2 (a ResNet stage at realistic sizes)."""
    b = GraphBuilder(dtype)
    x = b.input((n, hw, hw, c))
    y = b.conv(x, f)
    y = b.eltwise(y, kind="relu")
    y = b.conv(y, f)
    y = b.pool(y)
    return b.output(y)


def resnet18(n: int = 1, hw: int = 224, dtype: str = "f32", classes: int = 1000) -> OpGraph:
    """ResNet-18 as the graph passes leave it: BN folded, ReLU fused into the conv epilogues,
    residual adds (+ReLU) on the CVU."""
    b = GraphBuilder(dtype)
    x = b.input((n, hw, hw, 3))
    y = b.conv(x, 64, k=7, stride=2, pad=3, epilogue=("bias", "relu"))
    y = b.pool(y, k=3, stride=2, pad=1)
    c = 64
    for stage, f in enumerate((64, 128, 256, 512)):
        for blk in range(2):
            stride = 2 if (stage > 0 and blk == 0) else 1
            z = b.conv(y, f, k=3, stride=stride, epilogue=("bias", "relu"))
            z = b.conv(z, f, k=3, epilogue=("bias",))
            sc = y if (stride == 1 and c == f) else b.conv(y, f, k=1, stride=stride, pad=0,
                                                            epilogue=("bias",))
            y = b.eltwise(z, sc, kind="add_relu")
            c = f
    y = b.reduce_mean_hw(y)
    y = b.reshape2d(y)
    y = b.matmul(y, classes, epilogue=("bias",))
    return b.output(y)

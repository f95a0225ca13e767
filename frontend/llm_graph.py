"""The ONNX graph builder of :mod:`m100.frontend.llm`: how a LLaMA decoder's pieces are written as ONNX.

:class:`LlmGraph` appends nodes and initializers to one graph and knows the three weight forms
the decoder is built in:

* float weights (``quant='none'``): seeded values (``weights='random'``) or declared by shape only
  (``weights='shape'``: external data that is never written, :mod:`m100.frontend.shape_only`);
* W4A16 (``quant='w4a16'``, :meth:`LlmGraph.w4_weight`): int4 ``W`` [K, N] + f16 block scales and a
  blocked ``DequantizeLinear`` (the weight stays int4 in DDR; the TCU dequantizes);
* W8A8 (``quant='w8a8'``, :meth:`LlmGraph.w8_matmul`): ``QuantizeLinear`` of the activation by a static
  power-of-two scale, ``MatMulInteger`` with the int8 weight, the i32 accumulator dequantized per
  output channel.

and the LLaMA primitives written with them (RMSNorm, rotate-half RoPE, column slices, fused
projections, the SiLU-gated MLP). The layers themselves (which primitives, in which order, for
decode and prefill) are :mod:`m100.frontend.llm`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from m100.frontend.llm import LlamaConfig

#: the location the shape-only weights point at (never written: the compiler needs only shapes)
SHAPE_ONLY_LOCATION = "m100-shape-only-weights.bin"
#: W8A8: the static per-tensor scale of every quantized activation (zero point 0): a power of two,
#: so ``x / scale`` is exact in every precision and the int8 rounding is the same everywhere
W8_ACT_SCALE = 1.0 / 32


class LlmBuildError(ValueError):
    """A configuration the builder can not write (one line: what and which weight)."""



class LlmGraph:
    """A small ONNX graph builder (constants become initializers)."""

    def __init__(self, weights: str, seed: int, fuse: bool = False, dtype: str = "f32",
                 quant: str = "none", block: int = 128):
        from onnx import TensorProto
        self.TP = TensorProto
        self.quant = quant
        self.block = block
        self.np_dt = {"f32": np.float32, "f16": np.float16}[dtype]
        self.elem = {"f32": TensorProto.FLOAT, "f16": TensorProto.FLOAT16}[dtype]
        self.nodes: list = []
        self.inits: list = []
        self.inputs: list = []
        self.outputs: list = []
        self.weights = weights
        self.fuse = fuse
        self.rng = np.random.default_rng(seed)
        self.n = 0
        self.values: dict[str, np.ndarray] = {}

    def f(self, v: float):
        """A float scalar of the model's element type."""
        return self.np_dt(v)

    def name(self, p: str) -> str:
        self.n += 1
        return f"{p}_{self.n}"

    def op(self, ty: str, ins: list[str], out: str | None = None, **attrs) -> str:
        from onnx import helper
        out = out or self.name(ty.lower())
        self.nodes.append(helper.make_node(ty, ins, [out], **attrs))
        return out

    def const(self, arr, name: str | None = None) -> str:
        from onnx import numpy_helper
        name = name or self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def ints(self, vals) -> str:
        return self.const(np.asarray(vals, np.int64))

    def declared(self, name: str, elem: int, shape: tuple[int, ...]) -> str:
        """A weight declared by shape and ONNX element type only: external data at
        :data:`SHAPE_ONLY_LOCATION`, never written (``weights='shape'``)."""
        from onnx import TensorProto
        t = TensorProto(name=name, data_type=elem, dims=list(shape))
        t.data_location = TensorProto.EXTERNAL
        t.external_data.add(key="location", value=SHAPE_ONLY_LOCATION)
        self.inits.append(t)
        return name

    def weight(self, name: str, shape: tuple[int, ...], init: str = "proj") -> str:
        """A model weight: seeded values, or declared by shape only (external, never written).
        With ``quant='w4a16'`` a projection [K, N] is int4 ``name`` + f16 scales ``name.scale``
        [K / block, N] and a ``DequantizeLinear(axis=0, block_size=block)`` (the W4A16 form)."""
        from onnx import numpy_helper
        if self.quant == "w4a16" and init == "proj":
            return self.w4_weight(name, shape)
        if self.weights == "shape":
            return self.declared(name, self.elem, shape)
        if init == "norm":
            arr = (1.0 + 0.1 * self.rng.standard_normal(shape)).astype(self.np_dt)
        elif init == "embed":  # rows of ~unit RMS, what the first norm sees
            arr = self.rng.standard_normal(shape).astype(self.np_dt)
        else:
            arr = (self.rng.standard_normal(shape) / np.sqrt(shape[0])).astype(self.np_dt)
        self.values[name] = arr
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def proj(self, x: str, name: str, shape: tuple[int, int], out: str | None = None) -> str:
        """``x @ W`` of the projection ``name`` [K, N]: a float ``MatMul`` (``W`` float, or the
        int4 ``DequantizeLinear`` of W4A16), or with ``quant='w8a8'`` the integer form
        :meth:`w8_matmul`."""
        if self.quant == "w8a8":
            return self.w8_matmul(x, name, shape, out)
        return self.op("MatMul", [x, self.weight(name, shape)], out)

    def w8_quantize(self, x: str) -> str:
        """``QuantizeLinear(x, sx, 0)``: the int8 activation of :meth:`w8_matmul` (per tensor,
        elementwise: the quantize of a concat is the concat of its parts' quantizes, exactly)."""
        from onnx import numpy_helper
        if not any(t.name == "w8_sx" for t in self.inits):  # the shared activation scale, zp
            self.inits += [numpy_helper.from_array(np.asarray(W8_ACT_SCALE, self.np_dt), "w8_sx"),
                           numpy_helper.from_array(np.asarray(0, np.int8), "w8_zx")]
        return self.op("QuantizeLinear", [x, "w8_sx", "w8_zx"])

    def w8_matmul(self, x: str, name: str, shape: tuple[int, int], out: str | None,
                  quantized: bool = False) -> str:
        """W8A8 (SmoothQuant-style, static per-tensor activation scale, per-channel weights):
        ``xq = QuantizeLinear(x, sx, 0)`` (int8; ``sx`` = :data:`W8_ACT_SCALE`, a power of two:
        ``x / sx`` is exact), ``acc = MatMulInteger(xq, W)`` (int8 ``W`` [K, N] = ``name``, i32
        accumulate), ``y = Cast(Cast(acc, f32) * name.dq, f16)`` with ``name.dq`` [N] f32 =
        ``sx * sw[n]`` (the accumulator's dequantization scale per output channel; a weight of
        the layer like ``W``: per layer, so declared by shape too). ``quantized``: ``x`` is
        ``xq`` already (:meth:`w8_quantize` of its parts: prefill attention's heads)."""
        from onnx import TensorProto, numpy_helper
        k, n = shape
        dq = f"{name}.dq"
        if self.weights == "shape":
            self.declared(name, TensorProto.INT8, (k, n))
            self.declared(dq, TensorProto.FLOAT, (n,))
        else:
            q = self.rng.integers(-127, 128, (k, n)).astype(np.int8)
            # dequantized weights ~ N(0, 1/K) like the float model (int8 uniform: std ~73.6)
            sw = (np.abs(self.rng.standard_normal(n)) * 0.5 + 0.5) / (73.6 * np.sqrt(k))
            d = (np.float32(W8_ACT_SCALE) * sw.astype(np.float32)).astype(np.float32)
            self.values[name], self.values[dq] = q, d
            self.inits += [numpy_helper.from_array(q, name), numpy_helper.from_array(d, dq)]
        xq = x if quantized else self.w8_quantize(x)
        acc = self.op("MatMulInteger", [xq, name])
        y = self.op("Mul", [self.op("Cast", [acc], to=TensorProto.FLOAT), dq])
        return self.op("Cast", [y], out, to=self.elem)

    def w4_weight(self, name: str, shape: tuple[int, ...]) -> str:
        from onnx import TensorProto, helper, numpy_helper
        k, n = shape
        b = self.block
        if k % b:
            raise LlmBuildError(f"w4a16: block {b} does not divide K = {k} of '{name}'")
        sname = f"{name}.scale"
        if self.weights == "shape":
            self.declared(name, TensorProto.INT4, (k, n))
            self.declared(sname, TensorProto.FLOAT16, (k // b, n))
        else:
            q = self.rng.integers(-8, 8, (k, n)).astype(np.int8)
            # dequantized weights ~ N(0, 1/K) like the float model: |q| ~ 4.6 on average
            sc = (np.abs(self.rng.standard_normal((k // b, n))) * 0.5 + 0.5) / (4.6 * np.sqrt(k))
            sc = sc.astype(np.float16)
            self.values[name], self.values[sname] = q, sc
            self.inits.append(helper.make_tensor(name, TensorProto.INT4, [k, n],
                                                 q.flatten().tolist()))
            self.inits.append(numpy_helper.from_array(sc, sname))
        return self.op("DequantizeLinear", [name, sname], f"{name}.dq", axis=0, block_size=b)

    def inp(self, name: str, shape, elem: int | None = None) -> str:
        from onnx import helper
        self.inputs.append(helper.make_tensor_value_info(name, self.elem if elem is None else elem,
                                                         list(shape)))
        return name

    def out(self, name: str, shape) -> None:
        from onnx import helper
        self.outputs.append(helper.make_tensor_value_info(name, self.elem, list(shape)))

    def model(self, name: str):
        import onnx
        from onnx import helper
        g = helper.make_graph(self.nodes, name, self.inputs, self.outputs, self.inits)
        w4 = self.quant in ("w4a16", "w8a8")  # int4/blocked DequantizeLinear, f16 QDQ: opset 21
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21 if w4 else 18)],
                              producer_name="m100.frontend.llm")
        m.ir_version = 10 if w4 else 8
        if self.weights != "shape":
            onnx.checker.check_model(m)
        return m

    # --- LLaMA pieces ------------------------------------------------------------------------
    def rmsnorm(self, x: str, w: str, eps: float) -> str:
        p = self.op("Pow", [x, self.const(self.f(2.0))])
        mean = self.op("ReduceMean", [p, self.ints([-1])], keepdims=1)
        r = self.op("Reciprocal", [self.op("Sqrt", [self.op("Add", [mean,
                                                                    self.const(self.f(eps))])])])
        return self.op("Mul", [w, self.op("Mul", [x, r])])

    def rope(self, x: str, cos: str, sin: str, hd: int, out: str | None = None) -> str:
        half = hd // 2
        axes = self.ints([3])
        lo = self.op("Slice", [x, self.ints([0]), self.ints([half]), axes, self.ints([1])])
        hi = self.op("Slice", [x, self.ints([half]), self.ints([hd]), axes, self.ints([1])])
        rot = self.op("Concat", [self.op("Neg", [hi]), lo], axis=-1)
        return self.op("Add", [self.op("Mul", [x, cos]), self.op("Mul", [rot, sin])], out)

    def rope3d(self, x: str, cos: str, sin: str, hd: int) -> str:
        """RoPE of heads' rows ``x`` [n, T, hd] (``cos``/``sin`` [T, hd], broadcast over heads)."""
        half = hd // 2
        axes = self.ints([2])
        lo = self.op("Slice", [x, self.ints([0]), self.ints([half]), axes, self.ints([1])])
        hi = self.op("Slice", [x, self.ints([half]), self.ints([hd]), axes, self.ints([1])])
        rot = self.op("Concat", [self.op("Neg", [hi]), lo], axis=-1)
        return self.op("Add", [self.op("Mul", [x, cos]), self.op("Mul", [rot, sin])])

    def cols(self, t: str, rows: int, c0: int, c1: int) -> str:
        """Columns [c0, c1) of the 2-D ``t`` of ``rows`` rows."""
        return self.op("Slice", [t, self.ints([0, c0]), self.ints([rows, c1]), self.ints([0, 1]),
                                 self.ints([1, 1])])

    def projections(self, xn: str, rows: int, names: list[tuple[str, int]], k: int) -> list[str]:
        """``xn @ W`` for each (weight name, columns); with ``fuse`` one GEMM against the weights
        concatenated along N (stored so: ``wqkv``, ``wgu``) and a column slice per result."""
        group = "qkv" if names[0][0] == "wq" else "gu" if names[0][0] == "wg" else None
        fuse = self.fuse if isinstance(self.fuse, bool) else group in self.fuse
        if not fuse or len(names) == 1:
            return [self.proj(xn, n, (k, c)) for n, c in names]
        fused = "w" + "".join(n[1:] for n, _ in names)
        y = self.proj(xn, fused, (k, sum(c for _, c in names)))
        out, c0 = [], 0
        for _, c in names:
            out.append(self.cols(y, rows, c0, c0 + c))
            c0 += c
        return out

    def mlp(self, h: str, cfg: LlamaConfig, out: str, rows: int) -> str:
        hn = self.rmsnorm(h, self.weight("mlp_norm", (cfg.hidden,), "norm"), cfg.eps)
        gate, up = self.projections(hn, rows, [("wg", cfg.ffn), ("wu", cfg.ffn)], cfg.hidden)
        silu = self.op("Mul", [gate, self.op("Sigmoid", [gate])])
        down = self.proj(self.op("Mul", [silu, up]), "wd", (cfg.ffn, cfg.hidden))
        return self.op("Add", [h, down], out)

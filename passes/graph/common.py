"""Shared helpers of the graph passes (no pass here): attribute names, constants <-> numpy,
op predicates, and a small expression view of ``linalg.generic`` bodies.

The graph passes only *annotate* or *rewrite into ordinary linalg/tensor/arith ops*, so the IR stays
executable by the numpy reference executor after every pass. The discardable attributes they set are
the contract with the space-time scheduler; ``docs/graph.md`` documents them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import (
    AffineMapAttr,
    BFloat16Type,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    TensorType,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.ir.affine import AffineConstantExpr, AffineDimExpr, AffineMap

from m100.dialects.dense import DenseError, numpy_to_dense  # noqa: F401 - re-exported
from m100.dialects.dense import dense_to_numpy as decode_dense

# --- the annotation contract (see docs/graph.md) -------------------------------------------------
UNIT = "m100.unit"  # StringAttr, one of classify_ops.UNITS
GROUP = "m100.group"  # i64: id of an idiom group or of a contraction's epilogue group
EPILOGUE = "m100.epilogue"  # ArrayAttr[StringAttr] on the contraction: ordered fused stages
FUSED_INTO = "m100.fused_into"  # i64 on each fused epilogue op: the contraction's m100.group
STAGE = "m100.stage"  # StringAttr on each fused epilogue op: its stage name
IDIOM = "m100.idiom"  # StringAttr on every member of an idiom group
IDIOM_ROOT = "m100.idiom_root"  # UnitAttr on the op producing the idiom's result
IDIOM_AXIS = "m100.idiom_axis"  # i64 on the root of softmax/layernorm/rmsnorm: normalized dim
IDIOM_EPS = "m100.idiom_eps"  # f64 on the root of layernorm/rmsnorm

CONTRACTIONS = frozenset({
    "linalg.matmul", "linalg.batch_matmul", "linalg.quantized_matmul", "linalg.matvec",
    "linalg.batch_matvec", "linalg.vecmat", "linalg.matmul_transpose_b",
    "linalg.batch_matmul_transpose_b", "linalg.dot", "linalg.quantized_batch_matmul",
})
CONVS = frozenset({
    "linalg.conv_2d_nchw_fchw", "linalg.conv_2d_nhwc_hwcf", "linalg.conv_2d_nhwc_fhwc",
    "linalg.conv_2d_ngchw_fgchw", "linalg.conv_2d_ngchw_gfchw", "linalg.conv_2d_nhwgc_gfhwc",
    "linalg.depthwise_conv_2d_nchw_chw", "linalg.depthwise_conv_2d_nhwc_hwc",
    "linalg.conv_1d_ncw_fcw", "linalg.conv_1d_nwc_wcf", "linalg.conv_2d",
    "linalg.conv_3d_ncdhw_fcdhw", "linalg.conv_2d_nchw_fchw_q", "linalg.conv_2d_nhwc_hwcf_q",
})


def is_conv(name: str) -> bool:
    return name in CONVS or name.startswith(("linalg.conv_", "linalg.depthwise_conv_"))
# the output dimension the TCU's epilogue is per-channel over, per contraction kind
CHANNEL_DIM = {
    "linalg.matmul": 1, "linalg.batch_matmul": 2, "linalg.quantized_matmul": 1,
    "linalg.conv_2d_nchw_fchw": 1, "linalg.conv_2d_nhwc_hwcf": 3, "linalg.conv_2d_nhwc_fhwc": 3,
    "linalg.depthwise_conv_2d_nchw_chw": 1, "linalg.depthwise_conv_2d_nhwc_hwc": 3,
    "linalg.conv_1d_ncw_fcw": 1, "linalg.conv_1d_nwc_wcf": 2,
}


# --- constants <-> numpy ----------------------------------------------------------------------
def np_dtype(t: Attribute) -> np.dtype | None:
    """numpy dtype of an element type (None: no exact numpy equivalent, e.g. bf16)."""
    if isinstance(t, Float32Type):
        return np.dtype("<f4")
    if isinstance(t, Float64Type):
        return np.dtype("<f8")
    if isinstance(t, Float16Type):
        return np.dtype("<f2")
    if isinstance(t, IndexType):
        return np.dtype("<i8")
    if isinstance(t, IntegerType):
        w = t.width.data
        if w == 1:
            return np.dtype("bool")
        if w in (8, 16, 32, 64):
            return np.dtype(f"<i{w // 8}")
    if isinstance(t, BFloat16Type):
        return None
    return None


def dense_to_numpy(attr: DenseIntOrFPElementsAttr) -> np.ndarray | None:
    """The value of a dense elements attribute (:func:`m100.dialects.dense.dense_to_numpy`: bf16 as
    float32, bit-exact), or None for an element type without a decoding."""
    try:
        return decode_dense(attr)
    except DenseError:
        return None


def const_array(v: SSAValue) -> np.ndarray | None:
    """The value of ``v`` if it is defined by ``arith.constant dense<...>`` (else None)."""
    op = v.owner if isinstance(v, OpResult) else None
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, DenseIntOrFPElementsAttr):
        return dense_to_numpy(op.value)
    return None


#: at least this many elements: :func:`transposed` copies by row blocks
TRANSPOSE_BLOCKED_MIN = 1 << 16
TRANSPOSE_BLOCK = 64


def transposed(arr: np.ndarray, perm) -> np.ndarray:
    """``np.transpose(arr, perm)`` -- the same values, dtype and shape. A large array whose
    permutation moves its first axis last and keeps the others in order after a rotation
    (``[1, 0]``; layout-nhwc's FCHW -> HWCF ``[2, 3, 1, 0]``) is copied C-contiguous through row
    blocks: numpy's copy of such a view walks the source down its columns (a stride of a whole
    row per element; ResNet-50's 2048 x 512 weights ~10-20 ms each), the blocks read
    ``TRANSPOSE_BLOCK`` rows at a time. Anything else is numpy's view (its ``tobytes`` copies).
    ``test_transposed_is_numpys``."""
    perm = tuple(int(p) for p in perm)
    a = np.asarray(arr)
    nd = a.ndim
    if a.size < TRANSPOSE_BLOCKED_MIN or nd < 2 or perm not in ((1, 0), (2, 3, 1, 0)) or \
            len(perm) != nd:
        return np.transpose(a, perm)
    f = a.shape[0]
    rest = a.shape[1:]
    # (F, C, H, W) -> (H, W, C, F): the 2-D transpose of (F, C*H*W) gives rows (c, h, w); the
    # rows (each F elements, contiguous) are then put in (h, w, c) order by one more copy
    flat = a.reshape(f, -1)
    cols = flat.shape[1]
    out = np.empty((cols, f), a.dtype)
    b = TRANSPOSE_BLOCK
    for i in range(0, f, b):
        out[:, i:i + b] = flat[i:i + b].T
    if nd == 2:
        return out
    c, h, w = rest
    return np.ascontiguousarray(out.reshape(c, h * w, f).transpose(1, 0, 2)).reshape(h, w, c, f)


def const_view(v: SSAValue) -> np.ndarray | None:
    """:func:`const_array` of ``v`` for reading only: a read-only view of the constant's bytes in
    its shape when they are stored element by element in a numpy type of the machine's byte order
    (not bf16, not i1, not a splat: :func:`m100.dialects.dense.dense_view`), else
    :func:`const_array` (a copy of its own). The same values; a pass that only reads them
    (layout-nhwc's weight packing: ResNet-50's 100 MB) skips a copy.
    ``test_const_view_is_const_array``."""
    from m100.dialects.dense import dense_view

    op = v.owner if isinstance(v, OpResult) else None
    if not (isinstance(op, arith.ConstantOp) and isinstance(op.value, DenseIntOrFPElementsAttr)):
        return None
    view = dense_view(op.value)
    return view if view is not None else const_array(v)


def channel_vector(v: SSAValue, m: AffineMap, ch: int, f: int, *,
                   float_only: bool = False) -> np.ndarray | None:
    """The per-channel values (length ``f``, float64 for floats) of a constant operand ``v`` read
    through map ``m``, or None if ``v`` is not constant or varies along an output dim other than
    ``ch`` (a size-1 dim is fine: ``[1, N]`` read as ``(d0, d1)`` is a per-column vector).
    ``float_only``: None for integer constants."""
    arr = const_array(v)
    if arr is None or (float_only and arr.dtype.kind != "f"):
        return None
    try:
        dims = map_dims(m)
    except ValueError:
        return None
    index: list = []
    for d, s in zip(dims, arr.shape):
        if d == ch:
            index.append(slice(None))
        elif s == 1:
            index.append(0)
        else:
            return None
    vec = np.asarray(arr[tuple(index)]).reshape(-1)
    if arr.dtype.kind == "f":
        vec = vec.astype(np.float64)
    if vec.size not in (1, f):
        return None
    return np.broadcast_to(vec, (f,)).copy()


def scalar_const(v: SSAValue) -> float | None:
    """The scalar value of ``v`` if it is a scalar arith.constant or a splat dense constant."""
    op = v.owner if isinstance(v, OpResult) else None
    if not isinstance(op, arith.ConstantOp):
        return None
    val = op.value
    if isinstance(val, FloatAttr):
        return float(val.value.data)
    if isinstance(val, IntegerAttr):
        if isinstance(val.type, IntegerType) and val.type.width.data == 1:
            return float(val.value.data != 0)  # xDSL holds i1 `true` as -1
        return float(val.value.data)
    if isinstance(val, DenseIntOrFPElementsAttr):
        arr = dense_to_numpy(val)
        if arr is not None and arr.size >= 1 and np.all(arr.flat[0] == arr):
            return float(arr.flat[0])
    return None


def is_const(v: SSAValue) -> bool:
    return isinstance(v, OpResult) and isinstance(v.owner, arith.ConstantOp)


# --- IR utilities ------------------------------------------------------------------------------
def shape_of(v: SSAValue) -> tuple[int, ...] | None:
    t = v.type
    if isinstance(t, TensorType):
        return tuple(t.get_shape())
    return None


def users(v: SSAValue) -> list[Operation]:
    """Distinct ops that use ``v`` (in use order)."""
    seen: dict[int, Operation] = {}
    for u in v.uses:
        seen.setdefault(id(u.operation), u.operation)
    return list(seen.values())


def result_users(op: Operation) -> list[Operation]:
    seen: dict[int, Operation] = {}
    for r in op.results:
        for u in r.uses:
            seen.setdefault(id(u.operation), u.operation)
    return list(seen.values())


def func_bodies(module: ModuleOp) -> Iterator[Block]:
    """The entry blocks of every func.func in the module."""
    for op in module.walk():
        if isinstance(op, func.FuncOp) and op.body.blocks:
            yield op.body.blocks[0]


def graph_ops(module: ModuleOp) -> Iterator[Operation]:
    """Top-level ops of every function body (not the ops inside linalg bodies)."""
    for block in func_bodies(module):
        yield from list(block.ops)


def producer(v: SSAValue) -> Operation | None:
    return v.owner if isinstance(v, OpResult) else None


def describe_op(op: Operation) -> str:
    """``'linalg.generic' (%12) in @fn, op #7`` - a stable, human-readable position of a graph op."""
    name = ""
    if op.results:
        hint = op.results[0].name_hint
        name = f" (%{hint})" if hint else ""
    fn = op.parent_op()
    while fn is not None and not isinstance(fn, func.FuncOp):
        fn = fn.parent_op()
    where = ""
    if isinstance(fn, func.FuncOp):
        idx = next((i for i, o in enumerate(fn.body.blocks[0].ops) if o is op), None)
        where = f" in @{fn.sym_name.data}" + (f", op #{idx}" if idx is not None else "")
    return f"'{op.name}'{name}{where}"


# --- linalg structure ----------------------------------------------------------------------------
def generic_maps(op: Operation) -> list[AffineMap]:
    return [m.data for m in op.indexing_maps]  # type: ignore[attr-defined]


def iterators(op: Operation) -> list[str]:
    return [str(it.data) for it in op.iterator_types]  # type: ignore[attr-defined]


def value_index_reduction(op: Operation) -> bool:
    """A two-result max/min-with-index reduction generic (torch-mlir's ReduceMax/Min and
    ArgMax/Min form): one ``cmpf``/``cmpi`` and a ``select`` of the index, which is
    ``linalg.index`` of the reduced dimension -- or a constant once canonicalize folded the index
    of a reduced dimension of size 1."""
    if len(op.results) != 2 or iterators(op).count("reduction") != 1:
        return False
    names = [o.name for o in op.regions[0].blocks[0].ops]
    if "arith.select" not in names or names.count("arith.cmpf") + names.count("arith.cmpi") != 1:
        return False
    if "linalg.index" in names:
        return True
    ins = list(op.inputs)  # type: ignore[attr-defined]
    t = ins[0].type if len(ins) == 1 else None
    if not isinstance(t, TensorType):
        return False
    shape = t.get_shape()
    return shape[iterators(op).index("reduction")] == 1


def is_identity(m: AffineMap) -> bool:
    return (m.num_symbols == 0 and len(m.results) == m.num_dims
            and all(isinstance(e, AffineDimExpr) and e.position == i
                    for i, e in enumerate(m.results)))


def map_dims(m: AffineMap) -> list[int | None]:
    """Per result: the dim position it reads, 0-constant -> None; raises ValueError otherwise."""
    out: list[int | None] = []
    for e in m.results:
        if isinstance(e, AffineDimExpr):
            out.append(e.position)
        elif isinstance(e, AffineConstantExpr) and e.value == 0:
            out.append(None)
        else:
            raise ValueError("not a projected permutation")
    return out


def is_projection(m: AffineMap) -> bool:
    """A projected permutation, possibly with 0 constants (broadcast reads)."""
    try:
        dims = [d for d in map_dims(m) if d is not None]
    except ValueError:
        return False
    return len(dims) == len(set(dims))


def is_elementwise_generic(op: Operation) -> bool:
    """All-parallel generic whose outputs are written with identity maps and inputs read by
    projected permutations (possibly broadcasting)."""
    from xdsl.dialects.linalg.ops import GenericOp

    if not isinstance(op, GenericOp):
        return False
    if any(it != "parallel" for it in iterators(op)):
        return False
    maps = generic_maps(op)
    n_in = len(op.inputs)
    if not all(is_identity(m) for m in maps[n_in:]):
        return False
    return all(is_projection(m) for m in maps[:n_in])


def yield_values(op: Operation) -> list[SSAValue]:
    block = op.regions[0].blocks[0]
    term = block.last_op
    assert term is not None
    return list(term.operands)


def is_copy_generic(op: Operation) -> bool:
    """A generic with one input and one output whose body only yields the input element
    (a broadcast / transpose / reshape-like copy)."""
    from xdsl.dialects.linalg.ops import GenericOp

    if not isinstance(op, GenericOp) or len(op.inputs) != 1 or len(op.outputs) != 1:
        return False
    block = op.regions[0].blocks[0]
    if len(list(block.ops)) != 1:
        return False
    ys = yield_values(op)
    return len(ys) == 1 and ys[0] is block.args[0] and all(it == "parallel" for it in iterators(op))


# --- expression view of generic bodies ----------------------------------------------------------
@dataclass(frozen=True)
class E:
    """A node of a body expression. ``kind`` is ``in``/``out`` (block argument ``val`` = its index
    among inputs/outputs), ``c`` (constant ``val``), ``idx`` (linalg.index ``val``) or an op name
    without dialect (``addf``, ``exp``, ``cmpf`` with ``val`` = predicate, ...)."""

    kind: str
    args: tuple[E, ...] = ()
    val: object = None
    #: the value's MLIR type as text (``i8``, ``f32``, ...; None where not known); not compared
    ty: str | None = field(default=None, compare=False)


_CMPF = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult",
         "ule", "une", "uno", "true"]


def _int_width(t) -> int | None:
    return t.width.data if isinstance(t, IntegerType) else None


def body_exprs(op: Operation) -> list[E] | None:
    """Expressions of the values a generic yields, in terms of its block arguments (None if the
    body contains something this view does not model)."""
    block = op.regions[0].blocks[0]
    n_in = len(op.inputs)  # type: ignore[attr-defined]
    memo: dict[SSAValue, E] = {}

    def conv(v: SSAValue) -> E | None:
        if v in memo:
            return memo[v]
        if isinstance(v, BlockArgument):
            if v.block is block:
                e = E("in", (), v.index, str(v.type)) if v.index < n_in else \
                    E("out", (), v.index - n_in, str(v.type))
            else:
                return None
        else:
            o = v.owner
            c = scalar_const(v)
            if c is not None and isinstance(o, arith.ConstantOp):
                e = E("c", (), c, str(v.type))
            elif o.name == "linalg.index":
                e = E("idx", (), o.properties["dim"].value.data, "index")  # type: ignore[union-attr]
            elif o.parent_block() is not block:
                return None  # a non-constant value from outside
            else:
                kids = []
                for a in o.operands:
                    k = conv(a)
                    if k is None:
                        return None
                    kids.append(k)
                kind = o.name.split(".", 1)[1]
                val = None
                if o.name == "arith.cmpf":
                    p = o.properties.get("predicate")
                    val = _CMPF[p.value.data] if p is not None else None  # type: ignore[union-attr]
                elif o.name == "arith.cmpi":
                    p = o.properties.get("predicate")
                    val = p.value.data if p is not None else None  # type: ignore[union-attr]
                elif o.name in ("arith.extui", "arith.uitofp"):  # the unsigned source width
                    val = _int_width(o.operands[0].type)
                elif o.name == "arith.fptoui":  # the unsigned result width
                    val = _int_width(o.results[0].type)
                elif o.name.startswith("tensor."):
                    kind = "tensor." + kind
                e = E(kind, tuple(kids), val, str(v.type))
        memo[v] = e
        return e

    out = []
    try:
        for y in yield_values(op):
            e = conv(y)
            if e is None:
                return None
            out.append(e)
    finally:
        conv = None  # noqa: F841 -- its own cell: the cycle freed by reference counts
    return out


def leaves(e: E) -> Iterator[E]:
    if e.kind in ("in", "out", "c", "idx"):
        yield e
    for a in e.args:
        yield from leaves(a)


def kinds(e: E) -> set[str]:
    s = {e.kind}
    for a in e.args:
        s |= kinds(a)
    return s


def _cmp(pred: object, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    p = str(pred)
    base = p[1:] if p[0] in "ou" else p
    with np.errstate(invalid="ignore"):
        r = {"eq": a == b, "gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b,
             "ne": a != b}.get(base)
    if r is None:
        raise KeyError(p)
    return r


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


_UNARY = {
    "negf": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "absf": np.abs,
    "tanh": np.tanh, "erf": _erf, "rsqrt": lambda x: 1.0 / np.sqrt(x), "floor": np.floor,
    "ceil": np.ceil, "exp2": np.exp2, "log2": np.log2, "sin": np.sin, "cos": np.cos,
    "extf": lambda x: x, "truncf": lambda x: x, "log1p": np.log1p, "expm1": np.expm1,
    "extsi": lambda x: x, "trunci": lambda x: x,
}
_BINARY = {
    "addf": np.add, "subf": np.subtract, "mulf": np.multiply, "divf": np.divide,
    "maximumf": np.maximum, "minimumf": np.minimum, "maxnumf": np.fmax, "minnumf": np.fmin,
    "powf": np.power, "fpowi": np.power,
    # integer forms (evaluated on the sample values; used to recognize int32 epilogues)
    "addi": np.add, "subi": np.subtract, "muli": np.multiply, "maxsi": np.maximum,
    "minsi": np.minimum,
}


def evaluate(e: E, env: dict[tuple[str, object], np.ndarray]) -> np.ndarray:
    """Evaluate a float expression with numpy (float64); ``env[(kind, index)]`` binds leaves.
    Raises KeyError for anything not modelled."""
    k = e.kind
    if k in ("in", "out", "idx"):
        return env[(k, e.val)]
    if k == "c":
        return float(e.val)  # type: ignore[arg-type,return-value]  (weak scalar: keeps dtype)
    vals = [evaluate(a, env) for a in e.args]
    with np.errstate(all="ignore"):
        if k in _UNARY and len(vals) == 1:
            return _UNARY[k](vals[0])
        if k in _BINARY and len(vals) == 2:
            return _BINARY[k](vals[0], vals[1])
        if k == "cmpf":
            return _cmp(e.val, vals[0], vals[1])
        if k == "select":
            return np.where(vals[0], vals[1], vals[2])
        if k == "fma":
            return vals[0] * vals[1] + vals[2]
    raise KeyError(k)


def set_attr(op: Operation, name: str, value: Attribute) -> None:
    op.attributes[name] = value


def maps_attr(maps: Sequence[AffineMap]) -> list[AffineMapAttr]:
    return [AffineMapAttr(m) for m in maps]


def all_ops(blocks: Iterable[Block]) -> Iterator[Operation]:
    for b in blocks:
        yield from b.ops


def rewrite_each(module: ModuleOp, rewrite) -> int:
    """Apply ``rewrite(op) -> int`` (how many ops it rewrote) to every op of the module's
    function bodies (a snapshot of each block), then erase what became dead; returns the count."""
    n = 0
    for block in func_bodies(module):
        for o in list(block.ops):
            n += rewrite(o)
    if n:
        erase_dead(module)
    return n


def erase_dead(module: ModuleOp) -> int:
    """Erase unused value-semantics ops (linalg/tensor ops on tensors, arith/math constants)
    from function bodies, repeatedly; returns how many were erased. (xDSL's dce keeps linalg
    ops: they carry no purity trait.)"""
    n = 0
    for block in func_bodies(module):
        changed = True
        while changed:
            changed = False
            for op in reversed(list(block.ops)):
                if not op.results or any(r.uses for r in op.results):
                    continue
                if not all(isinstance(r.type, TensorType) for r in op.results) and \
                        op.name != "arith.constant":
                    continue
                if op.dialect_name() in ("linalg", "tensor", "arith", "math", "tm_tensor", "quant"):
                    block.erase_op(op)
                    n += 1
                    changed = True
    return n


# --- numeric recognition of unary activations ------------------------------------------------------
_XS = np.concatenate([np.linspace(-8.0, 8.0, 161), [-100.0, -30.0, 30.0, 100.0]])


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


ACTIVATIONS = {  # name -> reference definition (float64)
    "relu": lambda x: np.maximum(x, 0.0),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "gelu": _gelu,  # erf form (isa.Act.GELU)
    "gelu_tanh": _gelu_tanh,  # tanh approximation: a CVU chain, not a TCU epilogue
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}


def classify_unary(f) -> tuple[str, tuple[float, float] | None] | None:
    """Which activation the scalar function ``f`` (numpy array -> array) computes, judged on
    sample points against each definition: ``(name, None)``, ``("clamp", (lo, hi))`` or None."""
    try:
        with np.errstate(all="ignore"):
            ys = np.asarray(f(_XS.copy()), dtype=np.float64)
    except (KeyError, ValueError, TypeError):
        return None
    if ys.shape != _XS.shape or not np.all(np.isfinite(ys)):
        return None
    with np.errstate(all="ignore"):
        for name, ref in ACTIVATIONS.items():
            if np.allclose(ys, ref(_XS), rtol=1e-5, atol=1e-6):
                return name, None
    lo, hi = float(ys.min()), float(ys.max())
    # a clamp must bound something on the samples: the identity (e.g. an f32 -> f16 truncf, which
    # is exact on the samples) is no clamp to the sample range (it was fused as clamp [-100, 100])
    clamps = lo > float(_XS.min()) or hi < float(_XS.max())
    if lo < hi and clamps and np.allclose(ys, np.clip(_XS, lo, hi), rtol=1e-6, atol=1e-7):
        return "clamp", (lo, hi)
    return None


def unary_activation(op: Operation) -> tuple[str, tuple[float, float] | None, int] | None:
    """If a single-result elementwise generic computes an activation of ONE of its inputs (other
    leaves constant): ``(name, clamp bounds, input index)``."""
    if not is_elementwise_generic(op) or len(op.results) != 1:
        return None
    exprs = body_exprs(op)
    if exprs is None:
        return None
    ins = {lf.val for lf in leaves(exprs[0]) if lf.kind == "in"}
    if len(ins) != 1 or any(lf.kind in ("out", "idx") for lf in leaves(exprs[0])):
        return None
    k = ins.pop()
    got = classify_unary(lambda xs: evaluate(exprs[0], {("in", k): xs}))
    if got is None:
        return None
    return got[0], got[1], int(k)  # type: ignore[arg-type]


def next_group_id(module: ModuleOp) -> int:
    """One past the largest ``m100.group`` / ``m100.fused_into`` id in the module."""
    best = -1
    for o in module.walk():
        for k in (GROUP, FUSED_INTO):
            a = o.attributes.get(k)
            if isinstance(a, IntegerAttr):
                best = max(best, a.value.data)
    return best + 1

"""Op handlers of the numpy reference executor (:mod:`m100.frontend.reference`) for arith/math
(elementwise semantics on whole arrays), cf/func, tensor, affine.apply and scf ops. Each handler is
``(executor, op, args, env) -> list of results``; it reaches the executor only through that argument,
so this module does not import ``reference.py`` (no cycle). Split out of ``reference.py`` to keep
modules under ~30 KB."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    ShapedType,
)
from xdsl.ir import Operation
from xdsl.ir.affine import AffineBinaryOpExpr, AffineBinaryOpKind

from m100.targets.m100 import numerics
from m100.frontend.reference_common import (
    ReferenceError,
    _contig,
    _eval_expr,
    _int_width,
    _loc,
    _scalar_attr,
    dense_to_numpy,
    np_dtype,
)


# --------------------------------------------------------------------------------------------------
# scalar / elementwise semantics of arith and math (on whole arrays)
# --------------------------------------------------------------------------------------------------
def _cmpf(pred: int, a, b):
    ordered = ~(np.isnan(a) | np.isnan(b))
    with np.errstate(invalid="ignore"):
        table = {
            0: lambda: np.zeros(np.broadcast(a, b).shape, bool),
            1: lambda: ordered & (a == b),
            2: lambda: ordered & (a > b),
            3: lambda: ordered & (a >= b),
            4: lambda: ordered & (a < b),
            5: lambda: ordered & (a <= b),
            6: lambda: ordered & (a != b),
            7: lambda: ordered,
            8: lambda: ~ordered | (a == b),
            9: lambda: ~ordered | (a > b),
            10: lambda: ~ordered | (a >= b),
            11: lambda: ~ordered | (a < b),
            12: lambda: ~ordered | (a <= b),
            13: lambda: ~ordered | (a != b),
            14: lambda: ~ordered,
            15: lambda: np.ones(np.broadcast(a, b).shape, bool),
        }
        return np.asarray(table[pred]())


def _unsigned(a):
    a = np.asarray(a)
    return a.view(np.dtype(f"uint{a.dtype.itemsize * 8}")) if a.dtype.kind == "i" else a


def _cmpi(pred: int, a, b):
    a, b = np.asarray(a), np.asarray(b)
    if pred >= 6:
        a, b = _unsigned(a), _unsigned(b)
    f = [np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal,
         np.less, np.less_equal, np.greater, np.greater_equal][pred]
    return np.asarray(f(a, b))


_ERF_UFUNC = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    """Correctly rounded erf (libm's, through ``math.erf``; ~0.1 us per element)."""
    x = np.asarray(x)
    return _ERF_UFUNC(x.astype(np.float64)).astype(x.dtype)


def _fmax(a, b):  # arith.maximumf: NaN-propagating
    return np.maximum(a, b)


def _fmin(a, b):
    return np.minimum(a, b)


def _same(a, like):
    return np.asarray(a).astype(np.asarray(like).dtype, copy=False)


def _div_trunc(a, b):
    a, b = np.asarray(a), np.asarray(b)
    qa = np.abs(a) // np.where(b == 0, 1, np.abs(b))
    return (np.sign(a) * np.sign(b) * qa).astype(a.dtype)


_BINARY: dict[str, Callable] = {
    "arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply,
    "arith.divf": lambda a, b: np.divide(a, b),
    "arith.remf": np.fmod,
    "arith.maximumf": _fmax, "arith.minimumf": _fmin,
    "arith.maxnumf": np.fmax, "arith.minnumf": np.fmin,
    "arith.addi": lambda a, b: _same(np.add(a, b), a),
    "arith.subi": lambda a, b: _same(np.subtract(a, b), a),
    "arith.muli": lambda a, b: _same(np.multiply(a, b), a),
    "arith.divsi": _div_trunc,
    "arith.divui": lambda a, b: _same(_unsigned(a) // _unsigned(b), a),
    "arith.remsi": lambda a, b: _same(np.fmod(a, b), a),
    "arith.remui": lambda a, b: _same(_unsigned(a) % _unsigned(b), a),
    "arith.floordivsi": lambda a, b: _same(np.floor_divide(a, b), a),
    "arith.ceildivsi": lambda a, b: _same(-np.floor_divide(-np.asarray(a), b), a),
    "arith.maxsi": np.maximum, "arith.minsi": np.minimum,
    "arith.maxui": lambda a, b: _same(np.maximum(_unsigned(a), _unsigned(b)), a),
    "arith.minui": lambda a, b: _same(np.minimum(_unsigned(a), _unsigned(b)), a),
    "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor,
    "arith.shli": lambda a, b: _same(np.left_shift(a, b), a),
    "arith.shrsi": lambda a, b: _same(np.right_shift(a, b), a),
    "arith.shrui": lambda a, b: _same(np.right_shift(_unsigned(a), _unsigned(b)), a),
    "math.powf": np.power,
    "math.atan2": np.arctan2,
    "math.copysign": np.copysign,
}

_UNARY: dict[str, Callable] = {
    "arith.negf": np.negative,
    "math.exp": np.exp, "math.exp2": np.exp2, "math.expm1": np.expm1,
    "math.log": np.log, "math.log2": np.log2, "math.log10": np.log10, "math.log1p": np.log1p,
    "math.sqrt": np.sqrt, "math.rsqrt": lambda x: np.reciprocal(np.sqrt(x)),
    "math.tanh": np.tanh, "math.sin": np.sin, "math.cos": np.cos, "math.tan": np.tan,
    "math.sinh": np.sinh, "math.cosh": np.cosh, "math.asin": np.arcsin, "math.acos": np.arccos,
    "math.atan": np.arctan, "math.asinh": np.arcsinh, "math.acosh": np.arccosh, "math.atanh": np.arctanh,
    "math.absf": np.abs, "math.absi": np.abs, "math.floor": np.floor, "math.ceil": np.ceil,
    "math.trunc": np.trunc, "math.roundeven": np.rint,
    "math.round": lambda x: np.copysign(np.floor(np.abs(x) + np.asarray(0.5, np.asarray(x).dtype)), x),
    "math.erf": _erf, "math.cbrt": np.cbrt,
}

_REDUCE_UFUNC = {
    "arith.addf": np.add, "arith.addi": np.add, "arith.mulf": np.multiply, "arith.muli": np.multiply,
    "arith.maximumf": np.maximum, "arith.minimumf": np.minimum, "arith.maxnumf": np.fmax,
    "arith.minnumf": np.fmin, "arith.maxsi": np.maximum, "arith.minsi": np.minimum,
    "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor,
}

# ----------------------------------------------------------------------------------------------------
# op handlers
# ----------------------------------------------------------------------------------------------------
def _h_constant(ex, op, args, env):
    v = op.value
    t = op.results[0].type
    if isinstance(v, DenseIntOrFPElementsAttr):
        arr = dense_to_numpy(v)
        if isinstance(t, ShapedType):
            return [arr.reshape(tuple(t.get_shape()))]
        return [arr.reshape(())]
    if isinstance(v, (FloatAttr, IntegerAttr)):
        return [_scalar_attr(v, t)]
    raise ReferenceError(f"{_loc(op)}: unsupported constant {v}")


def _h_select(ex, op, args, env):
    c, a, b = args
    return [np.asarray(np.where(c, a, b)).astype(np_dtype(op.results[0].type), copy=False)]


def _h_fma(ex, op, args, env):
    """``math.fma``: one rounding (f32: ``numerics.fma_f32``, the CVU's fma; it was two: the f32
    product, then the sum)."""
    a, b, c = (np.asarray(x) for x in args)
    if a.dtype == np.float32:
        return [numerics.fma_f32(a, b, c)]
    return [np.asarray(a * b + c).astype(a.dtype)]


def _h_cmpf(ex, op, args, env):
    return [_cmpf(op.predicate.value.data, np.asarray(args[0]), np.asarray(args[1]))]


def _h_cmpi(ex, op, args, env):
    return [_cmpi(op.predicate.value.data, args[0], args[1])]


def _h_cast(ex, op, args, env):
    """extf/truncf/sitofp/uitofp/fptosi/fptoui/extsi/extui/trunci/index_cast(ui)/bitcast."""
    x = np.asarray(args[0])
    rt = op.results[0].type
    dt = np_dtype(rt)
    name = op.name
    if name in ("arith.extui", "arith.uitofp", "arith.index_castui"):
        if x.dtype == np.bool_:
            x = x.astype(np.uint8)
        x = _unsigned(x)
        if name == "arith.extui" and dt.kind == "i":
            return [x.astype(np.uint64).astype(dt)]
    if name == "arith.extsi" and x.dtype == np.bool_:
        return [np.where(x, -1, 0).astype(dt)]
    if name == "arith.trunci":
        w = _int_width(rt)
        if w == 1:
            return [(x & 1).astype(bool)]
        return [x.astype(np.int64).astype(dt)]
    if name in ("arith.fptosi", "arith.fptoui"):
        with np.errstate(all="ignore"):
            return [np.trunc(x).astype(dt)]
    if name == "arith.bitcast":
        return [x.view(dt)]
    if name == "arith.truncf" and isinstance(rt if not isinstance(rt, ShapedType) else rt.get_element_type(), BFloat16Type):
        u = x.astype(np.float32).view(np.uint32)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
        return [r.view(np.float32)]
    with np.errstate(all="ignore"):
        return [x.astype(dt)]


def _h_fpowi(ex, op, args, env):
    x, p = np.asarray(args[0]), np.asarray(args[1])
    if p.ndim == 0 and int(p) == 2:
        return [(x * x).astype(x.dtype)]
    return [np.power(x, p.astype(x.dtype)).astype(x.dtype)]


def _h_ipowi(ex, op, args, env):
    return [np.power(args[0], args[1]).astype(np.asarray(args[0]).dtype)]


_SCALAR_SPECIAL: dict[str, Callable] = {
    "arith.select": _h_select,
    "arith.cmpf": _h_cmpf,
    "arith.cmpi": _h_cmpi,
    "math.fpowi": _h_fpowi,
    "math.ipowi": _h_ipowi,
    "math.fma": _h_fma,
    **{k: _h_cast for k in (
        "arith.extf", "arith.truncf", "arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.fptoui",
        "arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast", "arith.index_castui",
        "arith.bitcast")},
}


def _h_assert(ex, op, args, env):
    if not np.all(args[0]):
        raise ReferenceError(f"{_loc(op)}: assertion failed: {op.msg.data}")
    return []


def _h_call(ex, op, args, env):
    callee = op.callee.root_reference.data
    fn = ex.funcs.get(callee)
    if fn is None:
        raise ReferenceError(f"{_loc(op)}: unknown callee @{callee}")
    return ex.call(fn, args)



# ---- tensor ops
def _static_or_dynamic(static_vals, dynamic_vals):
    out = []
    dyn = iter(dynamic_vals)
    for s in static_vals:
        if s == -(2**63):  # ShapedType.kDynamic
            out.append(int(next(dyn)))
        else:
            out.append(int(s))
    return out


def _h_empty(ex, op, args, env):
    t = op.results[0].type
    shape = list(t.get_shape())
    dyn = iter(args)
    shape = [int(next(dyn)) if s < 0 else s for s in shape]
    return [np.zeros(shape, dtype=np_dtype(t))]


def _slice_params(op, args, first_dynamic_index: int):
    dyn_off = [args[first_dynamic_index + i] for i in range(len(op.offsets))]
    base = first_dynamic_index + len(op.offsets)
    dyn_size = [args[base + i] for i in range(len(op.sizes))]
    base += len(op.sizes)
    dyn_str = [args[base + i] for i in range(len(op.strides))]
    offsets = _static_or_dynamic(op.static_offsets.get_values(), dyn_off)
    sizes = _static_or_dynamic(op.static_sizes.get_values(), dyn_size)
    strides = _static_or_dynamic(op.static_strides.get_values(), dyn_str)
    return offsets, sizes, strides


def _h_extract_slice(ex, op, args, env):
    src = np.asarray(args[0])
    offsets, sizes, strides = _slice_params(op, args, 1)
    sl = tuple(slice(o, o + (s - 1) * st + 1, st) for o, s, st in zip(offsets, sizes, strides))
    out = src[sl]
    rt = list(op.results[0].type.get_shape())
    if out.ndim != len(rt):  # rank-reducing: drop unit dims the result type does not have
        keep, i = [], 0
        for j, size in enumerate(out.shape):
            if i < len(rt) and (rt[i] == size or rt[i] < 0) and not (
                size == 1 and rt[i] != 1 and out.ndim - j > len(rt) - i
            ):
                keep.append(size)
                i += 1
            elif size != 1:
                raise ReferenceError(f"{_loc(op)}: cannot drop dim {j} of size {size}")
        out = out.reshape(keep)
    return [_contig(out)]


def _h_insert_slice(ex, op, args, env):
    src, dest = np.asarray(args[0]), np.array(args[1], copy=True)
    offsets, sizes, strides = _slice_params(op, args, 2)
    sl = tuple(slice(o, o + (s - 1) * st + 1, st) for o, s, st in zip(offsets, sizes, strides))
    dest[sl] = src.reshape(dest[sl].shape)
    return [dest]


def _h_reshape_like(ex, op, args, env):
    return [_contig(np.asarray(args[0])).reshape(tuple(op.results[0].type.get_shape()))]


def _h_expand_shape(ex, op, args, env):
    t = op.results[0].type
    shape = list(t.get_shape())
    if any(s < 0 for s in shape):
        static = list(op.static_output_shape.get_values())
        dyn = iter(args[1:])
        shape = [int(next(dyn)) if s < 0 else s for s in static]
    return [_contig(np.asarray(args[0])).reshape(shape)]


def _h_collapse_shape(ex, op, args, env):
    src = _contig(np.asarray(args[0]))
    groups = [list(g.get_values()) if hasattr(g, "get_values") else [a.value.data for a in g.data]
              for g in op.reassociation.data]
    shape = [int(np.prod([src.shape[i] for i in g])) for g in groups]
    return [src.reshape(shape)]


def _h_tensor_reshape(ex, op, args, env):
    t = op.results[0].type
    shape = list(t.get_shape())
    if any(s < 0 for s in shape):
        shape = [int(x) for x in np.asarray(args[1]).ravel()]
    return [_contig(np.asarray(args[0])).reshape(shape)]


def _h_concat(ex, op, args, env):
    return [np.concatenate([np.asarray(a) for a in args], axis=op.dim.value.data)]


def _h_cast_tensor(ex, op, args, env):
    return [args[0]]


def _h_pad(ex, op, args, env):
    src = np.asarray(args[0])
    n_low, n_high = len(op.low), len(op.high)
    low = _static_or_dynamic(op.static_low.get_values(), args[1 : 1 + n_low])
    high = _static_or_dynamic(op.static_high.get_values(), args[1 + n_low : 1 + n_low + n_high])
    block = op.region.blocks[0]
    yld = list(block.ops)[-1]
    pv = yld.operands[0]
    if pv in block.args:
        raise ReferenceError(f"{_loc(op)}: padding value depends on the index")
    if pv.owner is not None and isinstance(pv.owner, Operation) and pv.owner.parent_block() is block:
        local = dict(env)
        for a in block.args:
            local[a] = np.asarray(0, np.int64)
        for bop in list(block.ops)[:-1]:
            ex.exec_op(bop, local)
        value = local[pv]
    else:
        value = env[pv]
    if any(x < 0 for x in low + high):  # negative padding = cropping
        sl = tuple(slice(-lo if lo < 0 else 0, (s + hi) if hi < 0 else s) for lo, s, hi in zip(low, src.shape, high))
        src = src[sl]
        low, high = [max(0, x) for x in low], [max(0, x) for x in high]
    return [np.pad(src, list(zip(low, high)), constant_values=np.asarray(value).item()).astype(src.dtype)]


def _h_extract(ex, op, args, env):
    """Scalar indices, or (inside a vectorized linalg body) broadcastable index arrays: a gather.

    Inside a body, an out-of-range index is clipped: lowerings (e.g. torch-mlir's GridSample) compute
    the element at an out-of-range index and then select it away; its value is undefined in MLIR.
    At function level an out-of-range index is an error."""
    src = np.asarray(args[0])
    idx = [np.asarray(i, dtype=np.int64) for i in args[1:]]
    vectorized = any(i.ndim for i in idx)
    for d, i in enumerate(idx):
        if vectorized:
            idx[d] = np.clip(i, 0, src.shape[d] - 1)
        elif not 0 <= int(i) < src.shape[d]:
            raise ReferenceError(f"{_loc(op)}: index {int(i)} out of range for dim {d} of size {src.shape[d]}")
    return [np.asarray(src[tuple(idx)])]


def _h_insert(ex, op, args, env):
    val, dest = args[0], np.array(args[1], copy=True)
    dest[tuple(int(i) for i in args[2:])] = val
    return [dest]


def _h_dim(ex, op, args, env):
    return [np.asarray(np.shape(args[0])[int(args[1])], np.int64)]


def _h_from_elements(ex, op, args, env):
    t = op.results[0].type
    return [np.asarray([np.asarray(a).item() for a in args], dtype=np_dtype(t)).reshape(tuple(t.get_shape()))]


def _h_splat(ex, op, args, env):
    t = op.results[0].type
    return [np.full(tuple(t.get_shape()), np.asarray(args[0]).item(), dtype=np_dtype(t))]


def _h_affine_apply(ex, op, args, env):
    amap = op.map.data
    dims = [np.asarray(a, dtype=np.int64) for a in args[: amap.num_dims]]
    syms = [np.asarray(a, dtype=np.int64) for a in args[amap.num_dims:]]
    (expr,) = amap.results
    from xdsl.ir.affine import AffineSymExpr

    def ev(e):
        if isinstance(e, AffineSymExpr):
            return syms[e.position]
        if isinstance(e, AffineBinaryOpExpr):
            a, b = ev(e.lhs), ev(e.rhs)
            return {AffineBinaryOpKind.Add: np.add, AffineBinaryOpKind.Mul: np.multiply,
                    AffineBinaryOpKind.Mod: np.mod, AffineBinaryOpKind.FloorDiv: np.floor_divide,
                    AffineBinaryOpKind.CeilDiv: lambda x, y: -np.floor_divide(-x, y)}[e.kind](a, b)
        return _eval_expr(e, dims)

    return [np.asarray(ev(expr), dtype=np.int64)]


def _h_scf_for(ex, op, args, env):
    lb, ub, step = (int(a) for a in args[:3])
    carried = list(args[3:])
    block = op.body.blocks[0]
    for i in range(lb, ub, step):
        local = dict(env)
        local[block.args[0]] = np.asarray(i, dtype=np_dtype(block.args[0].type))
        for a, v in zip(block.args[1:], carried):
            local[a] = v
        carried = ex.run_block(block, local, "scf.yield")
    return carried


def _h_scf_if(ex, op, args, env):
    region = op.true_region if bool(np.asarray(args[0])) else op.false_region
    if not region.blocks:
        return []
    return ex.run_block(region.blocks[0], dict(env), "scf.yield")


def _h_bufferization_id(ex, op, args, env):
    return [args[0]]


"""Numpy reference executor for func + linalg/tensor/arith/math on tensors (the graph-level oracle).

``run(module, inputs, func_name=None) -> list[np.ndarray]`` executes one ``func.func`` op by op.
Nothing is interpreted per element:

* Every structured linalg op (``linalg.generic`` and every named op, which xDSL/our dialect give
  indexing maps, iterator types and a body) is executed from its *indexing maps*: each operand becomes a
  zero-copy ``as_strided`` view with one axis per loop dimension it uses (an affine result
  ``d2 * 2 + d5`` gives two view axes with strides ``2 * s`` and ``s``; that is how convolutions and
  pooling become sliding windows), then
  - a body ``acc + a * b`` (optionally with casts) is one ``np.einsum`` (matmul, batch_matmul, conv...);
  - a body ``combine(acc, f(inputs))`` with ``combine`` in add/mul/max/min/and/or/xor evaluates ``f`` on
    whole arrays and reduces with the ufunc over the reduction axes;
  - any other body with reduction loops (e.g. the max+argmax softmax generic) is evaluated vectorized
    over all parallel dims, looping only over the reduction index tuples;
  - parallel-only bodies are evaluated once on broadcast arrays.
* ``linalg.fill/copy/transpose/broadcast/reduce`` and ``tensor.*`` ops have direct numpy forms.
* Unsupported ops raise :class:`ReferenceError` naming the op and its location.

Values: tensors are ``np.ndarray`` of the element type (f32 -> float32, i1 -> bool, index -> int64;
bf16 is computed in float32); scalars are 0-d arrays. Results of float ops keep their type (float32
stays float32), so results match onnxruntime to f32 rounding (different summation order).

Layout (modules kept under ~30 KB): this module holds the executor's dispatch loop, the handler table
and the public API (``run``, ``find_func``; ``ReferenceError``, ``np_dtype``, ``dense_to_numpy`` are
re-exported); :mod:`.reference_common` the types, dense decoding, locations and affine views;
:mod:`.reference_linalg` the structured-op evaluation and linalg handlers; :mod:`.reference_ops` the
arith/math/tensor/affine/scf handlers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from xdsl.dialects.builtin import ModuleOp, ShapedType
from xdsl.ir import Attribute, Block, Operation, SSAValue

# the implementation lives in reference_common / reference_ops / reference_linalg (modules under
# ~30 KB); the names other code imports from here are re-exported
from m100.frontend.reference_common import (  # noqa: F401 - re-exported
    ReferenceError,
    _contig,
    _loc,
    dense_to_numpy,
    np_dtype,
)
from m100.frontend.reference_linalg import (
    _StructuredOps,
    _h_broadcast,
    _h_copy,
    _h_fill,
    _h_reduce,
    _h_transpose,
)
from m100.frontend.reference_ops import (
    _BINARY,
    _SCALAR_SPECIAL,
    _UNARY,
    _h_affine_apply,
    _h_assert,
    _h_bufferization_id,
    _h_call,
    _h_cast_tensor,
    _h_collapse_shape,
    _h_concat,
    _h_constant,
    _h_dim,
    _h_empty,
    _h_expand_shape,
    _h_extract,
    _h_extract_slice,
    _h_from_elements,
    _h_insert,
    _h_insert_slice,
    _h_pad,
    _h_scf_for,
    _h_scf_if,
    _h_splat,
    _h_tensor_reshape,
)

from .reference_quant import HANDLERS as _QUANT_HANDLERS  # noqa: E402
from .reference_sort import HANDLERS as _SORT_HANDLERS  # noqa: E402

__all__ = ["ReferenceError", "run", "np_dtype"]


def _int4_constant_args(fn: Operation) -> dict[int, np.ndarray]:
    """The constant W4 weights that the frontend made function arguments
    (``shape_only.lift_int4_constants``): argument index -> the DequantizeLinear value, from the
    definition: ``(q * scale[k // block, n])`` in f32 (exact), rounded once to the scale's type."""
    from m100.dialects.dense import dense_to_numpy
    from m100.frontend.shape_only import INT4_KEY
    from m100.targets.m100.numerics import round_bf16
    attrs = getattr(fn, "arg_attrs", None)
    out = {}
    for i, d in enumerate(attrs.data if attrs is not None else ()):
        a = d.data.get(INT4_KEY)
        if a is None or "q_data" not in a.data:
            continue
        q = dense_to_numpy(a.data["q_data"]).astype(np.float32)
        sc = dense_to_numpy(a.data["scale_data"])
        b = a.data["block"].value.data
        v = q * np.repeat(sc.astype(np.float32), b, axis=0)
        out[i] = v.astype(np.float16) if sc.dtype == np.float16 else round_bf16(v)
    return out


# --------------------------------------------------------------------------------------------------
# the executor
# --------------------------------------------------------------------------------------------------
class _Executor(_StructuredOps):
    def __init__(self, module: ModuleOp):
        self.module = module
        self.funcs = {op.sym_name.data: op for op in module.walk() if op.name == "func.func"}

    # ---------------------------------------------------------------- functions and blocks
    def call(self, fn: Operation, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        block = fn.body.blocks[0]
        w4 = _int4_constant_args(fn)
        if w4 and len(args) == len(block.args) - len(w4):  # the model's inputs only
            it = iter(args)
            args = [w4[i] if i in w4 else next(it) for i in range(len(block.args))]
        if len(args) != len(block.args):
            raise ReferenceError(
                f"@{fn.sym_name.data} takes {len(block.args)} inputs, {len(args)} were given"
            )
        env: dict[SSAValue, np.ndarray] = {}
        for a, v in zip(block.args, args):
            env[a] = self._coerce_input(v, a.type, fn)
        return self.run_block(block, env, "func.return")

    def _coerce_input(self, v, t: Attribute, fn) -> np.ndarray:
        arr = np.asarray(v)
        if isinstance(t, ShapedType):
            shape = tuple(t.get_shape())
            if len(shape) != arr.ndim or any(s >= 0 and s != d for s, d in zip(shape, arr.shape)):
                raise ReferenceError(
                    f"@{fn.sym_name.data}: input of shape {arr.shape} does not match {t}"
                )
        return _contig(arr.astype(np_dtype(t), copy=False))

    def run_block(self, block: Block, env: dict, terminator: str) -> list[np.ndarray]:
        for op in block.ops:
            if op.name == terminator:
                return [self.get(env, v) for v in op.operands]
            self.exec_op(op, env)
        raise ReferenceError(f"block without '{terminator}'")

    def get(self, env: dict, v: SSAValue):
        try:
            return env[v]
        except KeyError:
            raise ReferenceError(f"value {v} used before definition") from None

    def exec_op(self, op: Operation, env: dict) -> None:
        handler = _HANDLERS.get(op.name)
        if handler is None:
            if op.name in _BINARY or op.name in _UNARY or op.name in _SCALAR_SPECIAL:
                handler = _Executor._elementwise
            elif hasattr(op, "get_indexing_maps") and hasattr(op, "body"):
                handler = _Executor._structured
            else:
                raise ReferenceError(f"{_loc(op)}: op not supported by the reference executor")
        args = [self.get(env, v) for v in op.operands]
        try:
            outs = handler(self, op, args, env)
        except ReferenceError:
            raise
        except Exception as e:  # an internal failure: say which op
            raise ReferenceError(f"{_loc(op)}: reference execution failed: {type(e).__name__}: {e}") from e
        for r, v in zip(op.results, outs):
            env[r] = v

    # ---------------------------------------------------------------- arith / math on values
    def _elementwise(self, op: Operation, args, env):
        return [self.scalar_op(op, args)]

    def scalar_op(self, op: Operation, args):
        name = op.name
        if name in _BINARY:
            with np.errstate(all="ignore"):
                r = _BINARY[name](args[0], args[1])
            return np.asarray(r).astype(np_dtype(op.results[0].type), copy=False)
        if name in _UNARY:
            with np.errstate(all="ignore"):
                r = _UNARY[name](args[0])
            return np.asarray(r).astype(np_dtype(op.results[0].type), copy=False)
        return _SCALAR_SPECIAL[name](self, op, args, None)[0]


_HANDLERS: dict[str, Callable] = {
    "arith.constant": _h_constant,
    "cf.assert": _h_assert,
    "func.call": _h_call,
    "linalg.fill": _h_fill,
    "linalg.copy": _h_copy,
    "linalg.transpose": _h_transpose,
    "linalg.broadcast": _h_broadcast,
    "linalg.reduce": _h_reduce,
    "tensor.empty": _h_empty,
    "tensor.extract_slice": _h_extract_slice,
    "tensor.insert_slice": _h_insert_slice,
    "tensor.collapse_shape": _h_collapse_shape,
    "tensor.expand_shape": _h_expand_shape,
    "tensor.reshape": _h_tensor_reshape,
    "tensor.concat": _h_concat,
    "tensor.cast": _h_cast_tensor,
    "tensor.pad": _h_pad,
    "tensor.extract": _h_extract,
    "tensor.insert": _h_insert,
    "tensor.dim": _h_dim,
    "tensor.from_elements": _h_from_elements,
    "tensor.splat": _h_splat,
    "builtin.unrealized_conversion_cast": _h_bufferization_id,
    "affine.apply": _h_affine_apply,
    "scf.for": _h_scf_for,
    "scf.if": _h_scf_if,
    **_QUANT_HANDLERS,
    **_SORT_HANDLERS,
}


# ----------------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------------
def find_func(module: ModuleOp, func_name: str | None = None) -> Operation:
    """The ``func.func`` to run: by name, else the only / first public function with a body."""
    funcs = [op for op in module.walk() if op.name == "func.func" and op.body.blocks]
    if func_name is not None:
        for f in funcs:
            if f.sym_name.data == func_name:
                return f
        raise ReferenceError(f"no function @{func_name} in the module (have: "
                             f"{', '.join('@' + f.sym_name.data for f in funcs) or 'none'})")
    if not funcs:
        raise ReferenceError("the module has no func.func with a body")
    public = [f for f in funcs if f.sym_visibility is None or f.sym_visibility.data == "public"]
    return (public or funcs)[0]


def run(module: ModuleOp, inputs: Sequence[np.ndarray], func_name: str | None = None) -> list[np.ndarray]:
    """Run ``func_name`` (default: the first public function) of ``module`` on ``inputs`` with numpy."""
    fn = find_func(module, func_name)
    ex = _Executor(module)
    return [np.asarray(r) for r in ex.call(fn, list(inputs))]

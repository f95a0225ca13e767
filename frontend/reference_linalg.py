"""Structured linalg evaluation of the numpy reference executor (:mod:`m100.frontend.reference`):
``linalg.generic`` and every named op with indexing maps, executed on strided views (one ``np.einsum``
for contractions, a ufunc reduce for ``combine(acc, f(inputs))`` bodies, a loop over reduction tuples
otherwise, one broadcast evaluation for parallel-only bodies), plus the linalg ops with a direct numpy
form (fill/copy/transpose/broadcast/reduce). :class:`_StructuredOps` is a mixin of the executor: it
calls back ``self.exec_op``. Split out of ``reference.py`` to keep modules under ~30 KB."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.ir import Block, Operation

from m100.frontend.reference_common import (
    ReferenceError,
    _affine_view,
    _contig,
    _loc,
    _loop_ranges,
    _View,
    np_dtype,
)
from m100.frontend.reference_ops import _REDUCE_UFUNC


class _StructuredOps:
    """Structured-op methods of the reference executor (mixed into ``reference._Executor``)."""

    def _structured(self, op: Operation, args, env):
        maps = [m.data for m in op.get_indexing_maps().data]
        iters = [str(it.data) for it in op.get_iterator_types().data]
        iters = ["reduction" if "reduction" in it else "parallel" for it in iters]
        n_in = len(op.inputs)
        ins, outs = args[:n_in], args[n_in:]
        shapes = [np.shape(a) for a in args]
        ranges = _loop_ranges(maps, shapes, op)
        n = len(ranges)
        block = op.body.blocks[0]
        in_views = [_affine_view(_contig(a), m, ranges) for a, m in zip(ins, maps[:n_in])]
        results = [np.array(o, copy=True) for o in outs]
        out_views = [_affine_view(r, m, ranges, writeable=True) for r, m in zip(results, maps[n_in:])]
        red = [d for d in range(n) if iters[d] == "reduction"]

        if red:
            fast = self._try_contraction(op, block, in_views, out_views, results, n, env)
            if fast:
                return results
            if self._try_combiner_reduction(op, block, in_views, out_views, env, ranges, red):
                return results
            self._loop_reduction(op, block, in_views, out_views, env, ranges, red)
            return results
        # parallel only: one vectorized evaluation
        vals = self._eval_body(block, [v.full(n) for v in in_views] + [v.full(n) for v in out_views],
                               env, ranges)
        for ov, val in zip(out_views, vals):
            val = np.broadcast_to(val, tuple(ranges))
            drop = tuple(d for d in range(n) if d not in ov.dims)
            if drop:
                val = val[tuple(0 if d in drop else slice(None) for d in range(n))]
            ov.arr[...] = val
        return results

    def _eval_body(self, block: Block, arg_vals: Sequence, env: dict, ranges: Sequence[int],
                   index_offsets: dict[int, int] | None = None) -> list:
        """Evaluate a linalg body on whole arrays; returns the yielded values."""
        local = dict(env)
        n = len(ranges)
        for a, v in zip(block.args, arg_vals):
            local[a] = v
        for bop in block.ops:
            if bop.name == "linalg.yield":
                return [local[v] for v in bop.operands]
            if bop.name == "linalg.index":
                d = bop.dim.value.data
                if index_offsets is not None and d in index_offsets:
                    local[bop.results[0]] = np.asarray(index_offsets[d], dtype=np.int64)
                else:
                    shape = [1] * n
                    shape[d] = ranges[d]
                    local[bop.results[0]] = np.arange(ranges[d], dtype=np.int64).reshape(shape)
                continue
            self.exec_op(bop, local)
        raise ReferenceError("linalg body without linalg.yield")

    def _try_contraction(self, op, block, in_views, out_views, results, n, env) -> bool:
        """One output yielding ``acc + X * Y`` where X depends on one input operand only and Y on
        another (plus loop-invariant scalars): X and Y are evaluated on those operands' own views
        (casts, zero-point subtractions, scales...) and contracted with one ``np.einsum``. Covers
        matmul, batch_matmul, every conv (quantized ones too) and generic contractions."""
        if len(out_views) != 1:
            return False
        ops = list(block.ops)
        yld = ops[-1]
        n_in = len(in_views)
        args = list(block.args)
        acc = args[n_in]
        if len(yld.operands) != 1:
            return False
        add = yld.operands[0].owner
        if not isinstance(add, Operation) or add.name not in ("arith.addf", "arith.addi"):
            return False
        if acc not in add.operands:
            return False
        others = [v for v in add.operands if v is not acc]
        if len(others) != 1:
            return False
        mul = others[0].owner
        if not isinstance(mul, Operation) or mul.name not in ("arith.mulf", "arith.muli") \
                or mul.parent_block() is not block:
            return False
        scalar_args = {args[i] for i in range(n_in) if not in_views[i].dims}

        def cone(v):
            """(block ops computing v in order, the non-scalar input args it reads) or None."""
            seen, order, reads, stack = set(), [], set(), [v]
            while stack:
                x = stack.pop()
                if x is acc:
                    return None
                if x in args:
                    if x not in scalar_args:
                        reads.add(x)
                    continue
                o = x.owner
                if not isinstance(o, Operation) or o.parent_block() is not block or o in seen:
                    continue
                if o.name == "linalg.index" or o.regions:
                    return None
                seen.add(o)
                stack.extend(o.operands)
            order = [o for o in ops if o in seen]
            return order, reads

        sides = []
        for v in mul.operands:
            c = cone(v)
            if c is None or len(c[1]) != 1:
                return False
            sides.append((v, *c))
        (va, ops_a, ra), (vb, ops_b, rb) = sides
        ia, ib = args.index(next(iter(ra))), args.index(next(iter(rb)))
        if ia == ib:
            return False
        if any(o not in {add, mul, yld} and o not in ops_a and o not in ops_b for o in ops):
            return False  # something else happens in the body

        def side_value(v, side_ops, i):
            local = dict(env)
            for j, a in enumerate(args[:n_in]):
                local[a] = in_views[j].arr
            for o in side_ops:
                self.exec_op(o, local)
            return np.asarray(local[v]) if side_ops else in_views[i].arr

        xa, xb = side_value(va, ops_a, ia), side_value(vb, ops_b, ib)
        out_dt = results[0].dtype
        letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
        sub = lambda dims: "".join(letters[d] for d in dims)  # noqa: E731
        ov = out_views[0]
        acc_t = xa.dtype if xa.dtype.kind == "f" else np.int64
        prod = np.einsum(f"{sub(in_views[ia].dims)},{sub(in_views[ib].dims)}->{sub(ov.dims)}",
                         xa.astype(acc_t, copy=False), xb.astype(acc_t, copy=False), optimize=True)
        ov.arr[...] = (ov.arr + prod).astype(out_dt, copy=False)
        return True

    def _try_combiner_reduction(self, op, block, in_views, out_views, env, ranges, red) -> bool:
        """Each output yields combine(acc, f(inputs)) with f independent of every acc: reduce by ufunc."""
        ops = list(block.ops)
        yld = ops[-1]
        n_in = len(in_views)
        accs = list(block.args[n_in:])
        acc_set = set(accs)
        plan = []
        for j, y in enumerate(yld.operands):
            comb = y.owner
            if not isinstance(comb, Operation) or comb.name not in _REDUCE_UFUNC:
                return False
            if comb.operands[0] is accs[j]:
                other = comb.operands[1]
            elif comb.operands[1] is accs[j]:
                other = comb.operands[0]
            else:
                return False
            plan.append((comb, other))
        # the non-acc operand must not depend on any acc (walk its in-block producers)
        combs = {c for c, _ in plan}
        for _, other in plan:
            stack, seen = [other], set()
            while stack:
                v = stack.pop()
                if v in acc_set:
                    return False
                o = v.owner
                if isinstance(o, Operation) and o.parent_block() is block and o not in seen:
                    if o in combs:
                        return False
                    seen.add(o)
                    stack.extend(o.operands)
        # evaluate the body with acc args bound to zeros (they are unused by `other`); take `other`
        n = len(ranges)
        local = dict(env)
        for a, v in zip(block.args[:n_in], in_views):
            local[a] = v.full(n)
        for a in accs:
            local[a] = np.zeros((), np_dtype(a.type))
        for bop in ops[:-1]:
            if bop in combs:
                continue
            if bop.name == "linalg.index":
                d = bop.dim.value.data
                shape = [1] * n
                shape[d] = ranges[d]
                local[bop.results[0]] = np.arange(ranges[d], dtype=np.int64).reshape(shape)
                continue
            self.exec_op(bop, local)
        for (comb, other), ov in zip(plan, out_views):
            val = np.broadcast_to(local[other], tuple(ranges))
            axes = tuple(d for d in range(n) if d not in ov.dims)
            ufunc = _REDUCE_UFUNC[comb.name]
            dt = ov.arr.dtype
            with np.errstate(all="ignore"):
                reduced = ufunc.reduce(val, axis=axes) if axes else val
                ov.arr[...] = np.asarray(ufunc(ov.arr, reduced)).astype(dt, copy=False)
        return True

    def _loop_reduction(self, op, block, in_views, out_views, env, ranges, red) -> None:
        """General reduction body: vectorized over parallel dims, loop over reduction tuples."""
        n = len(ranges)
        par = [d for d in range(n) if d not in red]
        par_ranges = [ranges[d] if d in par else 1 for d in range(n)]
        for ov in out_views:
            if any(d in red for d in ov.dims):
                raise ReferenceError(f"{_loc(op)}: an output indexed by a reduction loop")
        for ridx in np.ndindex(*[ranges[d] for d in red]):
            fix = dict(zip(red, ridx))

            def at(v: _View) -> np.ndarray:
                sl = tuple(fix[d] if d in fix else slice(None) for d in v.dims)
                sub = v.arr[sl]
                kept = tuple(d for d in v.dims if d not in fix)
                missing = tuple(i for i in range(n) if i not in kept)
                return np.expand_dims(sub, missing) if missing else sub

            vals = self._eval_body(
                block, [at(v) for v in in_views] + [at(v) for v in out_views], env, par_ranges, fix
            )
            for ov, val in zip(out_views, vals):
                val = np.broadcast_to(val, tuple(par_ranges))
                val = val[tuple(slice(None) if d in ov.dims else 0 for d in range(n))]
                ov.arr[...] = val


# ---- linalg ops with a direct numpy form
def _h_fill(ex, op, args, env):
    val, out = args
    return [np.full(np.shape(out), val, dtype=np_dtype(op.results[0].type))]


def _h_copy(ex, op, args, env):
    return [np.array(args[0], dtype=np_dtype(op.results[0].type), copy=True)]


def _h_transpose(ex, op, args, env):
    perm = list(op.permutation.get_values())
    return [_contig(np.transpose(args[0], perm))]


def _h_broadcast(ex, op, args, env):
    x, init = np.asarray(args[0]), args[1]
    dims = list(op.dimensions.get_values())
    out_shape = np.shape(init)
    x = np.expand_dims(x, tuple(dims)) if dims else x
    return [_contig(np.broadcast_to(x, out_shape)).astype(np_dtype(op.results[0].type), copy=False)]


def _h_reduce(ex, op, args, env):
    n_in = len(op.operands) // 2  # xDSL 0.74: one input, one init
    ins, inits = args[:n_in], args[n_in:]
    dims = tuple(op.dimensions.get_values())
    block = op.region.blocks[0]
    ops = list(block.ops)
    # fast path: single input/init, body = combine(in, init)
    if n_in == 1 and len(ops) == 2 and ops[0].name in _REDUCE_UFUNC and set(ops[0].operands) == set(block.args):
        uf = _REDUCE_UFUNC[ops[0].name]
        with np.errstate(all="ignore"):
            r = uf(inits[0], uf.reduce(ins[0], axis=dims))
        return [np.asarray(r).astype(np.asarray(inits[0]).dtype)]
    # general: loop over the reduced index tuples, vectorized over the kept dims
    accs = [np.array(i, copy=True) for i in inits]
    rank = np.ndim(ins[0])
    for idx in np.ndindex(*[np.shape(ins[0])[d] for d in dims]):
        fix = dict(zip(dims, idx))
        sl = tuple(fix.get(d, slice(None)) for d in range(rank))
        vals = ex._eval_body(block, [np.asarray(i)[sl] for i in ins] + accs, env, [])
        accs = [np.asarray(v).astype(a.dtype) for v, a in zip(vals, accs)]
    return accs


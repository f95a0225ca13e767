"""Reductions and softmax along any axes: a transposing walk onto the CVU's last-axis operations.

The CVU reduces (RSUM / RMAX / RMIN, optionally after elementwise stages) and normalizes (SOFTMAX)
along the last axis of a row-major tile. A ``linalg.generic`` reduction over any set of loops (ONNX
``ReduceX`` with any ``axes``, ``keepdims`` either way) is lowered as:

1. each input permuted so that the kept (parallel) dims come first, in the order of the output,
   and the reduced dims last (a ``dtdu.copy`` transpose; none when already in that order; constant
   inputs are permuted at compile time);
2. reshaped to ``[prod(kept), prod(reduced)]`` (an aliasing reshape);
3. one CVU reduction along the last axis into ``[prod(kept), 1]``;
4. reshaped to the op's result shape (keepdims or not).

A softmax idiom along a non-last axis is ``transpose -> SOFTMAX(last) -> inverse transpose``.
Every other form (an input map that is not a permutation of the loops, inputs indexed
differently, an output map that is not a projection) raises :class:`ScheduleError`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from xdsl.ir import Operation, SSAValue

from .graph import ScheduleError
from .ir_facts import Lowering, _dtype, _shape, linear_map


@dataclass
class Walk:
    """The graph-building callbacks of :func:`~.from_ir.from_module` this module needs."""
    add_t: Callable  # (kind, unit, ins, shape, dtype, attrs, lw, ir_op, out_v=None) -> tensor name
    tname: Callable  # SSAValue -> tensor name
    const_array: Callable  # (np.ndarray, dtype) -> weight tensor name
    consts: dict


def _perm_of(m, r: int) -> list[int] | None:
    """Loop index of each result of a map that is a permutation of its ``r`` loops, else None."""
    lm = linear_map(m)
    out = []
    for coeffs, c in lm:
        if c != 0 or sum(1 for x in coeffs if x) != 1 or max(coeffs) != 1:
            return None
        out.append(coeffs.index(1))
    return out if sorted(out) == list(range(r)) else None


def reduction_layout(maps, its: list[str], n_in: int) -> tuple[list[int], list[int]]:
    """(kept loops in output order, reduced loops) of a reduction generic, or raise."""
    r = len(its)
    perms = [_perm_of(m, r) for m in maps[:n_in]]
    if any(p is None for p in perms) or any(p != perms[0] for p in perms):
        raise ScheduleError("a reduction's inputs must all be indexed by the same permutation "
                            "of its loops")
    kept = []
    for coeffs, c in linear_map(maps[n_in]):
        nz = [d for d, x in enumerate(coeffs) if x]
        if not nz and c == 0:
            continue  # keepdims: a unit result dim
        if len(nz) != 1 or coeffs[nz[0]] != 1 or c != 0 or its[nz[0]] != "parallel":
            raise ScheduleError("a reduction's output map must be a projection onto its parallel "
                                "loops")
        kept.append(nz[0])
    red = [d for d in range(r) if its[d] == "reduction"]
    if sorted(kept + red) != list(range(r)) or not red:
        raise ScheduleError("a reduction must keep every parallel loop once")
    return kept, red


def walk_inputs(w: Walk, ir_op: Operation, ins: list[SSAValue], maps, its: list[str]
                ) -> tuple[list[str], tuple[int, int], bool]:
    """Each input as a ``[prod(kept), prod(reduced)]`` tensor; (names, that shape, moved?)."""
    kept, red = reduction_layout(maps, its, len(ins))
    loop_of_dim = _perm_of(maps[0], len(its))
    dim_of_loop = {lp: d for d, lp in enumerate(loop_of_dim)}
    perm = [dim_of_loop[lp] for lp in kept + red]  # input dims in walk order
    names = []
    shp = _shape(ins[0])
    rows = math.prod(shp[p] for p in perm[:len(kept)])
    cols = math.prod(shp[p] for p in perm[len(kept):])
    flat = (rows, cols)
    moved = perm != list(range(len(perm)))
    for v in ins:
        dt = _dtype(v.type)
        if v in w.consts:
            arr = np.asarray(w.consts[v])
            names.append(w.const_array(np.ascontiguousarray(arr.transpose(perm).reshape(flat)), dt))
            continue
        t = w.tname(v)
        s = _shape(v)
        if moved:
            t = w.add_t("transpose", "dtdu.copy", [t], tuple(s[p] for p in perm), dt, {},
                        Lowering("transpose", params=dict(perm=perm)), ir_op)
        t = w.add_t("reshape", "dtdu.copy", [t], flat, dt, {}, Lowering("reshape"), ir_op)
        names.append(t)
    return names, flat, moved


def softmax_any_axis(w: Walk, ir_op: Operation, x: SSAValue, axis: int, build: Callable) -> None:
    """Softmax of ``x`` along ``axis`` (not the last): transpose the axis last, ``build(name,
    shape)`` the last-axis softmax (returns its output tensor name), transpose back into the op's
    result."""
    s = _shape(x)
    r = len(s)
    axis %= r
    perm = [d for d in range(r) if d != axis] + [axis]
    inv = [perm.index(d) for d in range(r)]
    dt = _dtype(x.type)
    ts = tuple(s[p] for p in perm)
    t = w.add_t("transpose", "dtdu.copy", [w.tname(x)], ts, dt, {},
                Lowering("transpose", params=dict(perm=perm)), ir_op)
    y = build(t, ts)
    w.add_t("transpose", "dtdu.copy", [y], s, dt, {}, Lowering("transpose", params=dict(perm=inv)),
            ir_op, ir_op.results[0])

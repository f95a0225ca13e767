"""Rotate-half read from the HBSM box of its own input (issue 13, session 18).

RoPE's ``rot(x) = [x_hi, x_lo]`` (the halves of the last dim swapped; the sign of rotate-half is
in the table, ``frontend/llm.py``'s ``PREFILL_ROPE = "rot"``) arrives here as ``tensor.concat``
of two ``tensor.extract_slice`` of ``x`` read by an elementwise generic that also reads ``x``
itself through the same indexing map. As ops of their own the slices and the concat are three
DMA copies; folded into the generic's reads by halves (``fold-slice-reads``) each half op loads
both halves of ``x`` -- ``x`` read twice. :func:`find_rotated_reads` finds the pattern before
the walk: the concat and its slices are not translated (``Builder.absorbed``), the generic's
input ``i`` becomes ``x`` again and the op records ``attrs["rot"] = {i: (k, half)}`` (input ``k``
is ``x`` read through the same map). ``kinds/cvu`` then loads ``x``'s box once per piece and
reads input ``i`` from that HBSM buffer through a walk with the halves swapped (a level of
step ``-half``: a TWU walk, no copy); ``partition.col_splits`` keeps such an op's columns whole
so that a piece holds both halves of every row.

The rotation is ``rot(x)[..., c] = x[..., (c + half) mod 2 half]``, exactly the concat's
values: the same elements reach the same CVU stage (the op's bits do not change).
"""
from __future__ import annotations

from xdsl.ir import Operation
from xdsl.ir.affine import AffineMap

from ..ir_facts import _shape

#: False: the concat and slices stay DMA copies (A/B)
ENABLED = True


def _static(op: Operation) -> tuple[list[int], list[int], list[int]] | None:
    if len(op.operands) != 1:
        return None
    return (list(op.static_offsets.get_values()),  # type: ignore[attr-defined]
            list(op.static_sizes.get_values()),  # type: ignore[attr-defined]
            list(op.static_strides.get_values()))  # type: ignore[attr-defined]


def _rotation(v) -> tuple[object, int, list[Operation]] | None:
    """``(x, half, [concat, slice_hi, slice_lo])`` when ``v`` is ``concat(x[..., half:],
    x[..., :half])`` along the last dim of ``x`` (2 half wide), each part read only there."""
    cat = v.owner
    if not isinstance(cat, Operation) or cat.name != "tensor.concat" or len(cat.operands) != 2:
        return None
    shape = _shape(v)
    if not shape or cat.dim.value.data != len(shape) - 1:  # type: ignore[attr-defined]
        return None
    parts = []
    for p in cat.operands:
        s = p.owner
        if not isinstance(s, Operation) or s.name != "tensor.extract_slice" or \
                len(list(p.uses)) != 1:
            return None
        st = _static(s)
        if st is None:
            return None
        parts.append((s, st))
    (s_hi, (o_hi, z_hi, d_hi)), (s_lo, (o_lo, z_lo, d_lo)) = parts
    x = s_hi.operands[0]
    if s_lo.operands[0] is not x:
        return None
    xs = _shape(x)
    if len(xs) != len(shape) or xs[-1] % 2 or tuple(xs) != tuple(shape):
        return None
    half = xs[-1] // 2
    lead = [0] * (len(xs) - 1)
    if d_hi != [1] * len(xs) or d_lo != [1] * len(xs) or o_hi != lead + [half] or \
            o_lo != lead + [0] or z_hi != list(xs[:-1]) + [half] or z_lo != z_hi:
        return None
    return x, half, [cat, s_hi, s_lo]


def find_rotated_reads(block) -> tuple[dict[int, dict[int, tuple[int, int]]], set[int]]:
    """``({id(generic): {input i: (input k, half)}}, ids of the ops to skip)``: elementwise
    generics reading a rotate-half concat of an input ``k`` they also read through the same
    map (the concat read by that generic alone)."""
    rot: dict[int, dict[int, tuple[int, int]]] = {}
    skip: set[int] = set()
    if not ENABLED:
        return rot, skip
    for op in block.ops:
        if op.name != "linalg.generic":
            continue
        unit = op.attributes.get("m100.unit")
        if unit is None or unit.data != "cvu.elementwise":  # type: ignore[attr-defined]
            continue
        ins = list(op.inputs)  # type: ignore[attr-defined]
        maps = [m.data for m in op.indexing_maps]  # type: ignore[attr-defined]
        for i, v in enumerate(ins):
            if len(list(v.uses)) != 1:
                continue
            r = _rotation(v)
            if r is None:
                continue
            x, half, ops = r
            # x read before, through the identity (the rotation is along the output's last
            # dim; kinds/cvu reads input i from input k's buffer, made first)
            ident = AffineMap.identity(maps[i].num_dims)
            k = next((j for j in range(i) if ins[j] is x and maps[j] == maps[i]), None)
            if k is None or maps[i] != ident or maps[len(ins)] != ident:
                continue
            rot.setdefault(id(op), {})[i] = (k, half)
            skip |= {id(o) for o in ops}
    return rot, skip


__all__ = ["ENABLED", "find_rotated_reads"]

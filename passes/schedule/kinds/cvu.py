"""CVU vector ops (elementwise/idiom pipelines, reductions, pooling): plan and emission.

A piece is a row tile (x column part) of the output; every input comes by a load (weights and
inputs not produced in the segment) or by DTDU copies from the producer pieces (read in place when
one piece on the TPB has exactly the box); one ``tpb.cvu`` pipeline instruction computes it.
"""
from __future__ import annotations

from xdsl.dialects.builtin import ArrayAttr
from xdsl.ir import SSAValue

from m100.dialects.tpb import CvuPipelineOp, StageAttr
from m100.dialects.twu import i64_array
from m100.targets.m100.isa import CvuOp, Ref, RefKind, Stage

from ..emit_core import access, ident, row_index
from ..graph import Op, ScheduleError, conv_out_hw, dtype_bytes
from ..partition import TilePlan
from ..plan import PlanPiece, conv_window, op_family, row_view


def plan_piece(bld, si: int, st, op: Op, p: PlanPiece, tplan: TilePlan, compute) -> None:
    """The plan tasks of one piece of this family, in the order :func:`emit_piece` creates its
    instructions (``compute(deps, cycles, macs)`` adds a unit instruction)."""
    g, cm = bld.g, bld.cm
    tpb, rows, cols = p.tpb, p.r1 - p.r0, p.c1 - p.c0
    family = op_family(op.unit)
    out_t = g.out(op)
    if family == "cvu":
        E = row_view(out_t.shape)[1]
        deps = []
        tile_b = rows * E * cols
        maps = op.attrs.get("maps")
        resident = op.attrs.get("resident", ())
        rot = rotated_inputs(op, p.c0, p.c1, out_t.shape)
        for i, tname in enumerate(op.inputs):
            t = g.tensors[tname]
            if i in rot:  # read from input k's box (its deps are in ``deps`` already)
                continue
            if i in resident:  # whole, once per TPB (one broadcast to the column part's TPBs)
                key = (op.name, i, "whole")
                nb = bld.s.box_bytes.get(key)
                if nb is None:
                    bshape, _ = resident_box(maps[i], out_t.shape)
                    nb = bld.s.box_bytes[key] = float(bshape[0] * bshape[1] * bshape[2] *
                                                      dtype_bytes(t.dtype))
                deps.append(bld._weight(st, op, tname, tpb, 0, 0, p.col, None, nb, True,
                                        role="bias"))
            elif t.kind == "weight" or not bld._streamed(tname):
                # the box :func:`emit_piece` loads: the dims of the piece the input's map reads
                # (a table broadcast over the rows or the heads is loaded once, not per row)
                if maps is not None and i < len(maps):
                    # per scheduler: the search builds the same pieces in many candidates
                    key = (op.name, i, p.r0, p.c0, rows, cols)
                    nb = bld.s.box_bytes.get(key)
                    if nb is None:
                        _, ishape = input_box(maps[i], out_t.shape, p.r0, p.c0, (rows, E, cols))
                        nb = bld.s.box_bytes[key] = float(ishape[0] * ishape[1] * ishape[2] *
                                                          dtype_bytes(t.dtype))
                else:
                    nb = min(float(t.nbytes), tile_b * dtype_bytes(t.dtype))
                deps.append(bld._load(op, tname, tpb, nb, "act"))
            else:
                deps += bld._act_in(si, op, tname, (p.r0, p.r1), (rows, E, cols),
                                     (p.c0, p.c1), tpb, tile_b * dtype_bytes(t.dtype))
        compute(deps, cm.piece_cycles(g, op, rows, cols), 0)
        p.out_dims = (rows, E, cols)
    elif family == "reduce":
        x_t = op.inputs[0]
        _, E, C = row_view(g.tensors[x_t].shape)
        deps = bld._act_in(si, op, x_t, (p.r0, p.r1), (rows, E, C), None, tpb,
                            rows * E * C * dtype_bytes(g.tensors[x_t].dtype))
        compute(deps, cm.piece_cycles(g, op, rows, cols), 0)
        p.out_dims = (rows, E, 1)
    elif family == "pool":
        a = op.attrs
        H, W = a["h"], a["w"]
        n0, i0, i1, _, _ = conv_window(a, p.r0, rows, 1)
        x_t = op.inputs[0]
        nb = (i1 - i0) * W * cols * dtype_bytes(g.tensors[x_t].dtype)
        if bld._streamed(x_t) and a.get("layout") != "nchw":
            deps = bld._act_in(si, op, x_t, (n0 * H + i0, n0 * H + i1), (i1 - i0, W, cols),
                                (p.c0, p.c1), tpb, nb)
        else:
            deps = [bld._load(op, x_t, tpb, nb, "act")]
        compute(deps, cm.piece_cycles(g, op, rows, cols), 0)
        p.out_dims = (rows, conv_out_hw(a)[1], cols)
    else:
        raise ScheduleError(f"op '{op.name}' ({op.unit}): no lowering family")


def rotated_inputs(op: Op, c0: int, c1: int, oshape: tuple[int, ...]) -> dict:
    """``{input i: (input k, half)}`` of an op with rotate-half reads (``Op.attrs["rot"]``,
    from_ir ``rotated``): input ``i`` is read from input ``k``'s box, which holds the piece's
    whole rows (``partition.col_splits`` keeps the columns whole; anything else would read the
    wrong half: an internal error, never a silent result)."""
    rot = op.attrs.get("rot")
    if not rot:
        return {}
    C = row_view(oshape)[2]
    if (c0, c1) != (0, C) or any(2 * h != C for _, h in rot.values()):
        raise ScheduleError(f"op '{op.name}': a rotate-half read needs pieces of whole rows "
                            f"(columns [{c0}, {c1}) of {C})")
    return rot


def rotated_access(ishape: tuple[int, int, int], half: int, flat: bool = False):
    """The walk over a ``(rows, E, 2 half)`` HBSM box that reads it with the halves of each row
    swapped: iteration ``(r, e, b, j)`` -> box ``(r, e, (1 - b) half + j)`` (a TWU level of step
    ``-half``); the CVU reads the beats as ``ishape``. ``flat``: the box is ``(rows, 1, E * 2
    half)`` (:func:`flat_access`), the same bytes: ``(r, 0, 2 half e + (1 - b) half + j)``."""
    if flat:
        return access((ishape[0], ishape[1], 2, half),
                      [((1, 0, 0, 0), 0), ((0, 0, 0, 0), 0), ((0, 2 * half, -half, 1), half)])
    return access((ishape[0], ishape[1], 2, half),
                  [((1, 0, 0, 0), 0), ((0, 1, 0, 0), 0), ((0, 0, -half, 1), half)])


def flat_access(ishape: tuple[int, int, int]):
    """The walk reading a ``(rows, 1, E * cols)`` HBSM box (rows of a kept 2-D tensor,
    ``keep.row_root``) as the piece iteration ``(rows, E, cols)``: ``(r, e, c)`` -> ``(r, 0, cols
    e + c)``, the same bytes in the same order."""
    return access(ishape, [((1, 0, 0), 0), ((0, 0, 0), 0), ((0, ishape[2], 1), 0)])


def input_box(m, oshape: tuple[int, ...], r0: int, c0: int, it: tuple[int, int, int]):
    """(walk, box shape) of a CVU input with map ``m`` (input index = M @ output index) read by
    the piece iteration ``it`` = (rows, elems, cols) that starts at row ``r0``, column ``c0`` of
    an output of shape ``oshape``: the box keeps the piece dims the map reads and is 1 in the
    others (a table broadcast over rows or heads: one copy). What :func:`emit_piece` loads and
    :func:`plan_piece` charges (one definition)."""
    out_lin = row_index(oshape, r0, c0)  # out tensor index of a piece iteration
    lin = []
    for coeffs, c in m:
        cc = [0, 0, 0]
        k0 = c
        for od, co in enumerate(coeffs):
            if co:
                oc, ok = out_lin[od]
                k0 += co * ok
                for d in range(3):
                    cc[d] += co * oc[d]
        lin.append((tuple(cc), k0))
    if not lin:  # a 0-d tensor: its one element (stored as shape [1])
        lin = [((0, 0, 0), 0)]
    used = [any(l[0][d] for l in lin) for d in range(3)]
    return lin, tuple(it[d] if used[d] else 1 for d in range(3))


def resident_box(m, oshape: tuple[int, ...]):
    """(box shape, walk) of a resident CVU input (``Op.attrs["resident"]``, a constant a few KB
    large): the box the map reads for the whole output, loaded once per TPB; a piece reads its
    part of it at :func:`resident_offsets`."""
    lin, shape = input_box(m, oshape, 0, 0, row_view(oshape))
    return shape, lin


def resident_offsets(m, oshape: tuple[int, ...], r0: int, c0: int) -> tuple[int, int, int]:
    """Where the box of the piece at row ``r0``, column ``c0`` starts in the resident box (the
    piece's rows / columns where the map reads them, 0 in a broadcast dim)."""
    lin, _ = input_box(m, oshape, 0, 0, (1, 1, 1))
    used = [any(c[d] for c, _ in lin) for d in range(3)]
    return (r0 if used[0] else 0, 0, c0 if used[2] else 0)


def emit_piece(em, si, seg, op, b, j, tpb, r0, r1, c0, c1, pieces, seg_ops, plan):
    """The instructions of one piece of this family, each taking its plan task; returns the last
    unit instruction (not yet appended) and the piece's output buffer."""
    g = em.g
    lw = em.irg.lowering[op.name]
    out_t = g.tensors[op.outputs[0]]
    rows, cols = r1 - r0, c1 - c0
    if lw.kind == "cvu":
        oshape = out_t.shape
        _, E, _ = row_view(oshape)
        it = (rows, E, cols)
        slots = {}
        in_shapes = []
        deps: list[SSAValue] = []
        resident = op.attrs.get("resident", ())
        rot = rotated_inputs(op, c0, c1, oshape)
        flat = set()  # inputs read from a kept root's rows (rows, 1, E * cols): ``flat_access``
        for i, tname in enumerate(op.inputs):
            if i in rot:  # input k's buffer, its rows' halves swapped: no load
                k, half = rot[i]
                kbuf, kacc = slots[f"in{k}"]
                if (kacc is not None and k not in flat) or in_shapes[k] != it:
                    raise ScheduleError(f"op '{op.name}': a rotate-half read of a box that is "
                                        "not the piece's")
                slots[f"in{i}"] = (kbuf, rotated_access(it, half, k in flat))
                in_shapes.append(it)
                continue
            lin, ishape = input_box(lw.in_maps[i], oshape, r0, c0, it)
            tt = g.tensors[tname]
            acc = None
            root = em.kept_root(tname, seg_ops) if tt.kind != "weight" else None
            if root is not None:  # whole rows of a kept tensor (keep.row_root): copied as
                # its rows x all its columns, read as the piece's (rows, E, cols)
                C = g.tensors[root].shape[-1]
                buf, tks = em.act_in(si, seg, op, root, (r0, r1), (rows, 1, C), lin, tpb,
                                     pieces, seg_ops, b, (0, C))
                if (c0, c1) != (0, it[2]) or it[1] * it[2] != C or \
                        [(tuple(c), k) for c, k in lw.in_maps[i]] != ident(3):
                    raise ScheduleError(f"op '{op.name}': input '{tname}' read from the kept "
                                        f"'{root}' in part of its rows")
                slots[f"in{i}"] = (buf, flat_access(it))
                flat.add(i)
                in_shapes.append(it)
                deps += tks
                continue
            if i in resident:  # loaded whole once per TPB: this piece's box of it
                buf, tok = em.weight(op, tname, tpb, 0, 0, "box", None, True, j,
                                     box=resident_box(lw.in_maps[i], oshape))
                acc = access(ishape, ident(3, resident_offsets(lw.in_maps[i], oshape, r0, c0)))
                tks = [tok]
            elif tt.kind == "weight" or not em._streamed(tname, seg_ops, pieces):
                buf, tok = em.load(tname, ishape, lin, tpb)
                tks = [tok]
            else:
                buf, tks = em.act_in(si, seg, op, tname, (r0, r1), it, lin, tpb, pieces,
                                       seg_ops, b, (c0, c1))
                ishape = it
            slots[f"in{i}"] = (buf, acc)
            in_shapes.append(ishape)
            deps += tks
        out = em.buffer("hbsm", tpb, it, out_t.dtype)
        slots["out"] = (out, None)
        params = {"in_shapes": ArrayAttr([i64_array(s) for s in in_shapes]),
                  "out_shape": i64_array(it),
                  "stages": ArrayAttr([StageAttr.from_isa(s) for s in lw.stages])}
        ins = CvuPipelineOp(tpb, slots, deps + em._take_out_wait(), params=params)
    elif lw.kind == "reduce":
        x_t = op.inputs[0]
        ishape = g.tensors[x_t].shape
        _, E, C = row_view(ishape)
        it = (rows, E, C)
        xb, deps = em.act_in(si, seg, op, x_t, (r0, r1), it, row_index(ishape, r0, 0), tpb,
                               pieces, seg_ops, b)
        oshape = (rows, E, 1)
        out = em.buffer("hbsm", tpb, oshape, out_t.dtype)
        params = {"in_shapes": ArrayAttr([i64_array(it)]), "out_shape": i64_array(oshape),
                  "stages": ArrayAttr([StageAttr.from_isa(x) for x in lw.stages])}
        ins = CvuPipelineOp(tpb, {"in0": (xb, None), "out": (out, None)},
                            deps + em._take_out_wait(), params=params)
    elif lw.kind == "pool":
        a = op.attrs
        oh, ow = conv_out_hw(a)
        sh, sw = a["stride"]
        pt, pl, pb, pr = a["pad"]
        H, W, C = a["h"], a["w"], a["c"]
        n0, q0 = divmod(r0, oh)
        q1 = q0 + rows
        top = q0 * sh - pt
        bot = (q1 - 1) * sh - pt + a["kh"]
        i0, i1 = max(0, top), min(H, bot)
        pt2, pb2 = i0 - top, bot - i1
        x_t = op.inputs[0]
        # channels [c0, c1) of the input window, as an [1, h, W, c] NHWC tile
        if a.get("layout") == "nchw":
            lin = [((0, 0, 0, 0), n0), ((0, 0, 0, 1), c0), ((0, 1, 0, 0), i0), ((0, 0, 1, 0), 0)]
        else:
            lin = [((0, 0, 0, 0), n0), ((0, 1, 0, 0), i0), ((0, 0, 1, 0), 0), ((0, 0, 0, 1), c0)]
        ishape = (1, i1 - i0, W, cols)
        if em._streamed(x_t, seg_ops, pieces) and a.get("layout") != "nchw":
            xb, deps = em.act_in(si, seg, op, x_t, (n0 * H + i0, n0 * H + i1),
                                   (i1 - i0, W, cols), lin, tpb, pieces, seg_ops, b, (c0, c1))
        else:
            xb, tok = em.load(x_t, ishape, lin, tpb)
            deps = [tok]
        ip = (a["kh"], a["kw"], sh, sw, pt2, pl, pb2, pr)
        if lw.params["kind"] == "max":
            stages = [Stage(CvuOp.MAXPOOL, (Ref(RefKind.INPUT, 0),), iparams=ip)]
        else:
            stages = [Stage(CvuOp.AVGPOOL, (Ref(RefKind.INPUT, 0),), iparams=ip + (1,)),
                      Stage(CvuOp.MUL, (Ref(RefKind.STAGE, 0),
                                        Ref(RefKind.IMM, 0, float(a["kh"] * a["kw"]))))]
        oshape = (1, rows, ow, cols)
        out = em.buffer("hbsm", tpb, (rows, ow, cols), out_t.dtype)
        params = {"in_shapes": ArrayAttr([i64_array(ishape)]), "out_shape": i64_array(oshape),
                  "stages": ArrayAttr([StageAttr.from_isa(s) for s in stages])}
        ins = CvuPipelineOp(tpb, {"in0": (xb, None), "out": (out, None)}, deps + em._take_out_wait(), params=params)
    else:
        raise ScheduleError(f"op '{op.name}' ({op.unit}): no lowering for '{lw.kind}'")
    return ins, out

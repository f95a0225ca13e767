"""TCU contractions (``tcu.matmul``, ``tcu.conv2d``): a piece's plan and emission side by side.

A piece is a row tile x column tile of the output. Its activation comes whole-K (one load shared by
the row tile's column parts -- a DRB broadcast when there are several --, or DTDU copies from the
producer pieces of a pipeline) or per K chunk; the second operand (a weight or a runtime B) is
resident (once per TPB, one DRB broadcast per column part) or streamed per K chunk; one TCU
instruction per K chunk (an ``accumulate`` chain, bias and activation on the last).
"""
from __future__ import annotations

from xdsl.dialects.builtin import ArrayAttr, StringAttr, UnitAttr
from xdsl.ir import Attribute, SSAValue

from m100.dialects.tpb import Conv2dOp, MatmulOp, StageAttr
from m100.dialects.twu import i64_array
from m100.targets.m100.isa import Act

from ..emit_core import _int, access, ident
from ..graph import Op, ScheduleError, conv_out_hw, dtype_bytes
from ..partition import TilePlan, k_part_range
from ..plan import PlanPiece, Unit, conv_window, op_family


#: issue 13, session 26 (LLaMA prefill's MLP): the first piece on each TPB of a lockstep integer
#: matmul whose activation rows come whole-K by one DRB broadcast to the row's column parts
#: (W8A8 ``up``: 147 rows x 4096 of ``xq``, 602 KB a TPB) computes in K chunks of this many
#: columns while the band arrives chunk by chunk (one broadcast per chunk into the same band
#: buffer, which the later column tiles read whole): every TPB row starts on its first chunk
#: instead of its whole band (up's rows started 22 k apart behind the 4.2 MB of bands; with
#: :data:`..build_segments.CARRY_STEPS` the 7B layer -0.51 % planned, -0.66 % simulated). An
#: i8 x i8 -> i32 chain is exact in any K order (the i32 accumulator), so the result is the
#: same bits. Whole plans only (:func:`first_k_chunk`); 0: off (every piece reads its band whole).
FIRST_K_CHUNK = 512


def first_k_chunk(op: Op, k: int, tk: int, weight_resident: bool, act_resident: bool,
                  p: PlanPiece, x_dtype: str, started: bool, gc: int, streamed: bool,
                  isolated: bool) -> int:
    """:data:`FIRST_K_CHUNK` for a piece it applies to (``PlanPiece.kfirst``, which the emitter
    reads), else 0: a plain 2-D ``tcu.matmul`` of one K part with its K whole, a streamed
    second operand broadcast to several TPB rows (a lockstep group), an ``i8`` activation
    loaded (not streamed from producer pieces) by one broadcast to several column parts
    (``gc > 1``), no int4 weight or requantized result, not a clipped causal piece, no compute
    of ``op`` on the piece's TPB yet (``started``), in a whole plan: the search's isolated
    builds (``isolated``) cost the segment as before (measured: with the chunks in the
    search's segment costs the 7B layer's gate took up's 7 x 8 tiling, +1.9 % predicted)."""
    c = FIRST_K_CHUNK
    if not c or isolated or started or streamed or weight_resident or act_resident or tk < k or \
            k <= c or k % c or op.unit != "tcu.matmul" or p.group < 0 or p.kparts != 1 or \
            p.kx or p.cfull or gc <= 1 or len(p.b_share) <= 1 or x_dtype != "i8" or \
            op.attrs.get("w4") or op.attrs.get("rq_table"):
        return 0
    return c


def _op_facts(bld, op: Op) -> tuple:
    """What :func:`plan_piece` reads of ``op`` alone: ``(op, family, x, w, rq_table, dq_table,
    bias, x's bytes per element, w's Tensor, w's bytes per element, w4, w4 scales' bytes per
    element, post_in, post_in's bytes per element, bias's bytes per element, grouped conv,
    {(rows, cols, k): piece cycles})``; the element sizes of tensors it does not have are 0."""
    g = bld.g
    family = op_family(op.unit)
    if family not in ("matmul", "conv"):
        return (op, family) + (None,) * 14 + ({},)
    x_t, w_t = op.inputs[0], op.inputs[1]
    rq_table, dq_table = op.attrs.get("rq_table"), op.attrs.get("dq_table")
    post_in = op.attrs.get("post_in")
    bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] not in (
        rq_table, dq_table, post_in) else None
    wt = g.tensors[w_t]
    w4 = op.attrs.get("w4")
    return (op, family, x_t, w_t, rq_table, dq_table, bias, dtype_bytes(g.tensors[x_t].dtype),
            wt, dtype_bytes(wt.dtype), w4, dtype_bytes(g.tensors[w4[0]].dtype) if w4 else 0,
            post_in, dtype_bytes(g.tensors[post_in].dtype) if post_in else 0,
            dtype_bytes(g.tensors[bias].dtype) if bias else 0,
            family == "conv" and op.attrs.get("groups", 1) != 1, {})


def plan_piece(bld, si: int, st, op: Op, p: PlanPiece, tplan: TilePlan, compute):
    """The plan tasks of one piece of this family, in the order :func:`emit_piece` creates its
    instructions (``compute(deps, cycles, macs)`` adds a unit instruction). A generator: it
    pauses after each K chunk but the last (a lockstep group interleaves its pieces there)."""
    g, cm = bld.g, bld.cm
    tpb, rows, cols = p.tpb, p.r1 - p.r0, p.c1 - p.c0
    # the op's facts (operands, their element sizes, its piece cycles) kept per scheduler, not
    # recomputed per piece (ResNet-50: ~220 k pieces of ~80 matmul/conv ops; test_op_facts)
    facts = bld.s.tcu_facts.get(op.name)
    if facts is None or facts[0] is not op:
        facts = bld.s.tcu_facts[op.name] = _op_facts(bld, op)
    _, family, x_t, w_t, rq_table, dq_table, bias, xb, wt, wdb, w4, sdb, post_in, pdb, bdb, \
        grouped, pcyc = facts
    if family in ("matmul", "conv"):
        conv = family == "conv"
        geo = bld.s.geo(op)
        if conv:
            a = op.attrs
            H, W, C = a["h"], a["w"], a["c"]
            wkey = (op.name, p.r0, rows)
            win = bld.s.windows.get(wkey)  # per scheduler: the same pieces in many candidates
            if win is None:
                win = bld.s.windows[wkey] = conv_window(a, p.r0, rows,
                                                        a.get("dilation", (1, 1))[0])
            n0, i0, i1, _, _ = win
            kwin = a["kh"] * a["kw"]
            kk = C
            if tplan.tk < tplan.k:
                kk = max(1, tplan.tk // kwin)
            x_rows, x_full_dims = (n0 * H + i0, n0 * H + i1), (i1 - i0, W, C)
            chunk_bytes = lambda kc: (i1 - i0) * W * kc * xb  # noqa: E731
            K, unit_k = C, kwin
            kx = K
        else:
            k = op.attrs["k"]
            kk = tplan.tk if tplan.tk < k else k
            kx = p.kx or k  # a clipped causal PV piece reduces over [0, kx) (``..causal``)
            x_rows, x_full_dims = (p.r0, p.r1), (rows, 1, kx)
            chunk_bytes = lambda kc: rows * kc * xb  # noqa: E731
            K, unit_k = k, 1
        resident = tplan.weight_resident
        streamed = bld._streamed(x_t)
        # a lockstep conv reading an activation kept in HBSM (:mod:`..keep`): each K chunk
        # (its input channels) is copied from the producer pieces instead of broadcast from memory
        # (a lockstep 2-D matmul too: ``keep._reads_kept``, its chunks rows x columns [k0, k1))
        kept_chunks = streamed and kk < K and p.group >= 0
        x_deps: list[int] = []
        kfirst = 0 if conv or bld.isolated else first_k_chunk(
            op, K, kk, tplan.weight_resident, tplan.act_resident, p, g.tensors[x_t].dtype,
            (tpb, op.name) in bld.hist, st.gc, streamed, bld.isolated)
        p.kfirst = kfirst
        if kfirst:
            kk = kfirst
        if tplan.act_resident:
            yield from _plan_act_resident(bld, si, st, op, p, tplan, x_t, w_t, bias, rq_table,
                                          xb, wt, compute)
            p.out_dims = (rows, geo.row_elems, cols)
            return
        if (streamed or kk == K) and not kept_chunks:
            rb = st.row_of(p.band) * st.gc  # the TPBs of the band's row: one slice
            row_tpbs = tuple(st.tpbs[rb:rb + st.gc])
            x_deps = bld._act_in(si, op, x_t, x_rows, x_full_dims, None, tpb,
                                  float(x_full_dims[0] * x_full_dims[1] * x_full_dims[2] * xb),
                                  row_tpbs)
        chunks = _part_chunks(list(range(0, kx, kk)), p)
        prev = -1
        for ci, k0 in enumerate(chunks):
            kc = min(kk, kx - k0)
            last = ci == len(chunks) - 1
            if kk == K:
                deps = list(x_deps)
            elif kfirst:  # the band's chunk: one broadcast to the row's column parts
                rb = st.row_of(p.band) * st.gc
                deps = [bld._band_chunk(op, x_t, x_rows, k0, tpb, tuple(st.tpbs[rb:rb + st.gc]),
                                        chunk_bytes(kc))]
            elif kept_chunks:  # one DTDU broadcast per producer piece to the column parts
                deps = list(bld._kept_chunk(si, op, x_t, ("k", x_rows, k0), x_rows,
                                            x_full_dims[:2] + (kc,), (k0, k0 + kc),
                                            p.a_share if bld._kept_bcast() else (), tpb,
                                            chunk_bytes(kc)))
            elif streamed:
                deps = list(x_deps) if ci == 0 else []
            elif p.group >= 0:  # lockstep: one broadcast to the column parts of the row tile
                deps = [bld._shared_chunk(op, x_t, ("a", x_rows, k0), p.a_share, tpb,
                                          chunk_bytes(kc), "act")]
            else:
                deps = [bld._load(op, x_t, tpb, chunk_bytes(kc), "act")]
            # the second operand (a constant, or a runtime B) takes the weight path: resident
            # -> once per TPB (one DRB broadcast per column part), streamed -> per K chunk
            # (in a lockstep group one broadcast to the rows of the column part)
            wbytes = kc * unit_k * cols * wdb
            # w4: (scale tensor, block): i4 weights dequantized on the fly
            for w_in, nb, key in ((w_t, wbytes, k0),) + (
                    ((w4[0], kc // w4[1] * cols * sdb, k0 // w4[1]),) if w4 else ()):
                if w_in == w_t and p.w_share:  # the weight group's chunk: one broadcast
                    deps.append(bld._shared_chunk(
                        op, w_in, ("wg", p.w_cols, key), p.w_share, tpb,
                        kc * (p.w_cols[1] - p.w_cols[0]) * wdb, "w"))
                elif w_in != w_t and p.w_share and scales_resident(p.b_share, tplan):
                    # all of the weight group's scales (all of K) in one broadcast before the
                    # first chunk, each TPB reading its columns of them
                    deps.append(bld._shared_chunk(
                        op, w_in, ("sg", p.w_cols), p.w_share, tpb,
                        K // w4[1] * (p.w_cols[1] - p.w_cols[0]) * sdb, "w"))
                elif w_in != w_t and scales_resident(p.b_share, tplan):
                    # all of the column part's scales in one load before the first chunk
                    deps.append(bld._weight(st, op, w_in, tpb, p.c0, p.c1, p.col, None,
                                             K // w4[1] * cols * sdb, True))
                elif not resident and p.group >= 0:
                    deps.append(bld._shared_chunk(op, w_in, ("w", p.c0, p.c1, key), p.b_share,
                                                  tpb, nb, "w"))
                else:
                    wc1 = p.c1
                    if resident and (p.cfull or p.kx):  # a clipped causal piece (``..causal``):
                        # the resident operand is loaded for the whole tile (once per TPB)
                        wc1 = p.cfull or p.c1
                        nb = (K if kk == K else kc) * unit_k * (wc1 - p.c0) * wdb
                    deps.append(bld._weight(st, op, w_in, tpb, p.c0, wc1, p.col,
                                             None if kk == K else key, nb, resident))
            if ci > 0:
                deps.append(prev)
            if last and bias and p.kparts == 1:  # a K part: the reduction adds the bias
                # the bias is resident even where the weight streams: a few hundred bytes per
                # column tile, loaded once per TPB (one broadcast per column part) instead of
                # one DMA -- a whole DDR latency -- per piece
                deps.append(bld._weight(st, op, bias, tpb, p.c0, p.c1, p.col, None,
                                         cols * bdb, True,
                                         role="bias"))
            if last and rq_table and p.kparts == 1:  # per-channel (multiplier, shift) pairs, staged like the bias
                deps.append(bld._weight(st, op, rq_table, tpb, p.c0, p.c1, p.col, None,
                                         cols * 8, resident, role="bias"))
            if last and dq_table:  # per-channel f32 dequantization scales: resident like a bias
                deps.append(bld._weight(st, op, dq_table, tpb, p.c0, p.c1, p.col, None,
                                         cols * 4, True, role="bias"))
            if last and post_in:  # the post stages' operand: this piece's [rows, cols] box
                pnb = float(rows * cols * pdb)
                if bld._streamed(post_in):  # kept in HBSM (:mod:`..keep`): in place or copied
                    deps += bld._act_in(si, op, post_in, (p.r0, p.r1), (rows, 1, cols),
                                        (p.c0, p.c1), tpb, pnb)
                else:
                    deps.append(bld._load(op, post_in, tpb, pnb, "act",
                                          box=(p.r0, p.r1, p.c0, p.c1)))
            kpg = kc * unit_k if not grouped else geo.k  # K per group
            macs = rows * geo.row_elems * cols * kpg
            cyc = pcyc.get((rows, cols, kpg))
            if cyc is None:
                cyc = pcyc[(rows, cols, kpg)] = cm.piece_cycles(g, op, rows, cols, kpg)
            prev = compute(deps, cyc, macs)
            if not last:
                yield  # a lockstep group goes on with the next piece's chunk
        p.out_dims = (rows, geo.row_elems, cols)
    else:
        raise ScheduleError(f"op '{op.name}' ({op.unit}): no lowering family")


def _plan_act_resident(bld, si: int, st, op: Op, p: PlanPiece, tplan: TilePlan, x_t: str,
                       w_t: str, bias, rq_table, xb: int, wt, compute):
    """A piece of a resident-activation matmul (``TilePlan.act_resident``): per K chunk B's
    column tile chunk (one DRB broadcast to the TPB rows of its column part) and one TCU
    instruction (an ``accumulate`` chain). Before the first instruction, the band rows (whole
    K, one broadcast to the band's column parts, loaded by the band's first piece and kept),
    each step taken by every piece of the lockstep group before the next: the first group's
    column tiles go ahead of the big band loads on the DMA engines, and all band loads ahead
    of the first stores."""
    if rq_table or op.attrs.get("dq_table"):
        raise ScheduleError(f"internal: op '{op.name}': a re/dequantized matmul has no "
                            "resident-activation tiling")
    g, cm = bld.g, bld.cm
    tpb, rows, cols = p.tpb, p.r1 - p.r0, p.c1 - p.c0
    k = op.attrs["k"]
    kk = min(tplan.tk, k)
    chunks = list(range(0, k, kk))
    prev = -1
    for ci, k0 in enumerate(chunks):
        kc = min(kk, k - k0)
        last = ci == len(chunks) - 1
        deps = [bld._shared_chunk(op, w_t, ("w", p.c0, p.c1, k0), p.b_share, tpb,
                                  kc * cols * dtype_bytes(wt.dtype), "w")]
        if ci == 0:
            yield
            row_tpbs = tuple(st.tpbs[st.row_of(p.band) * st.gc + jj] for jj in range(st.gc))
            deps += bld._act_in(si, op, x_t, (p.r0, p.r1), (rows, 1, k), None, tpb,
                                float(rows * k * xb), row_tpbs)
            yield
        else:
            deps.append(prev)
        if last and bias:
            deps.append(bld._weight(st, op, bias, tpb, p.c0, p.c1, p.col, None,
                                    cols * dtype_bytes(g.tensors[bias].dtype), False,
                                    role="bias"))
        prev = compute(deps, cm.piece_cycles(g, op, rows, cols, kc), rows * cols * kc)
        if not last:
            yield


def emit_piece(em, si, seg, op, b, j, tpb, r0, r1, c0, c1, pieces, seg_ops, plan):
    """The instructions of one piece of this family, each taking its plan task; returns the last
    unit instruction (not yet appended) and the piece's output buffer."""
    g = em.g
    pp = em.cur_pp
    lw = em.irg.lowering[op.name]
    out_t = g.tensors[op.outputs[0]]
    rows, cols = r1 - r0, c1 - c0
    unit = Unit.of_op(op.unit).value
    if lw.kind == "matmul" and plan is not None and plan.act_resident:
        # the plan's order (:func:`_plan_act_resident`): B's first column tile chunk, the
        # group's other pieces, the band rows (kept: one load per band), the group's other
        # pieces, then per K chunk B's chunk and one instruction of the accumulate chain
        a_t, w_t = op.inputs[0], op.inputs[1]
        k = op.attrs["k"]
        tk = min(plan.tk, k)
        out = em.buffer("hbsm", tpb, (rows, 1, cols), out_t.dtype)
        chunks = list(range(0, k, tk))
        prev = None
        for ci, k0 in enumerate(chunks):
            kc = min(tk, k - k0)
            last = ci == len(chunks) - 1
            w_buf, wt = _weight_in(em, pp, op, w_t, tpb, c0, c1,
                                   None if tk == k else (0, k0, kc), False, j)
            deps = [wt]
            if ci == 0:
                yield
                a_full, a_deps = em.act_in(si, seg, op, a_t, (r0, r1), (rows, 1, k),
                                           [((1, 0, 0), r0), ((0, 0, 1), 0)], tpb, pieces,
                                           seg_ops, b, shared=True)
                deps += a_deps
                yield
            a_slot = (a_full, None) if tk == k else \
                (a_full, access((rows, kc), [((1, 0), 0), ((0, 0), 0), ((0, 1), k0)]))
            slots = {"a": a_slot, "b": (w_buf, None), "c": (out, None)}
            params = {"m": _int(rows), "n": _int(cols), "k": _int(kc)}
            ins, prev = _chain_step(em, op, lw, MatmulOp, tpb, unit, (c0, c1), False, j, last,
                                    prev, slots, deps, params, bias_resident=False)
            if not last:
                yield
    elif lw.kind == "matmul":
        a_t, w_t = op.inputs[0], op.inputs[1]
        k = op.attrs["k"]
        tk = plan.tk if plan is not None and plan.tk < k else k
        kx = pp.kx or k  # a clipped causal PV piece reduces over [0, kx) (``..causal``)
        resident = plan is None or plan.weight_resident
        streamed = em._streamed(a_t, seg_ops, pieces)
        # per K chunk from kept pieces (a lockstep 2-D matmul: the plan's ``kept_chunks``)
        kept_chunks = streamed and tk < k and pp.group >= 0
        kfirst = pp.kfirst  # the plan's (``first_k_chunk``)
        if kfirst:
            tk = kfirst
        if (streamed or tk == k) and not kept_chunks:
            a_full, a_deps = em.act_in(si, seg, op, a_t, (r0, r1), (rows, 1, kx),
                                         [((1, 0, 0), r0), ((0, 0, 1), 0)], tpb, pieces,
                                         seg_ops, b, shared=True)
        out = em.buffer("hbsm", tpb, (rows, 1, cols), "f32" if pp.kparts > 1 else out_t.dtype)
        # a rounded (f16) result cut along K: the chunks accumulate in f32, the last one adds
        # that partial sum (``acc``) and rounds once into ``out``
        # (a dequantized one: the i32 accumulator, converted and scaled once by the last chunk)
        acc_buf = em.buffer("hbsm", tpb, (rows, 1, cols), "i32" if lw.dequant else "f32") \
            if ("store" in op.epilogue or lw.dequant) and tk < k and pp.kparts == 1 else None
        chunks = _part_chunks(list(range(0, kx, tk)), pp)
        prev: SSAValue | None = None
        for ci, k0 in enumerate(chunks):
            kc = min(tk, kx - k0)
            last = ci == len(chunks) - 1
            if tk == k:
                a_slot, deps = (a_full, None), list(a_deps)
            elif kfirst:  # the plan's broadcast of the band's chunk into the band buffer
                a_full, ats = em.band_chunk(op, a_t, (r0, r1), k, k0, kc, tpb)
                a_slot = (a_full, access((rows, kc), [((1, 0), 0), ((0, 0), 0), ((0, 1), k0)]))
                deps = list(ats)
            elif kept_chunks:  # one DTDU broadcast per producer piece to the column parts
                abuf, ats = em.kept_chunk(si, seg, op, a_t, ("k", (r0, r1), k0), (r0, r1),
                                          (rows, 1, kc), [((1, 0, 0), r0), ((0, 0, 1), k0)],
                                          tpb, pieces, seg_ops, b, (k0, k0 + kc),
                                          pp.a_share if em.plan.kept_bcast else ())
                a_slot, deps = (abuf, None), list(ats)
            elif streamed:
                a_slot = (a_full, access((rows, kc), [((1, 0), 0), ((0, 0), 0), ((0, 1), k0)]))
                deps = list(a_deps) if ci == 0 else []
            elif pp.group >= 0:  # lockstep: the plan's broadcast to the row tile's TPBs
                abuf, at = em.shared_chunk(a_t, ("a", (r0, r1), k0), pp.a_share, tpb,
                                           (rows, kc), [((1, 0), r0), ((0, 1), k0)])
                a_slot, deps = (abuf, None), [at]
            else:
                abuf, at = em.load(a_t, (rows, kc), [((1, 0), r0), ((0, 1), k0)], tpb)
                a_slot, deps = (abuf, None), [at]
            # a constant or a runtime B: resident -> once per TPB (broadcast per column
            # part), streamed -> per K chunk (lockstep: broadcast to the column part's rows)
            if pp.w_share:  # this TPB's columns of its weight group's broadcast chunk
                gc0, gc1 = pp.w_cols
                bshape, lin = em.weight_box(w_t, gc0, gc1, "w", (0, k0, kc))
                w_buf, wt = em.shared_chunk(w_t, ("wg", pp.w_cols, k0), pp.w_share, tpb,
                                            bshape, lin)
                w_acc = access((kc, cols), [((1, 0), 0), ((0, 1), c0 - gc0)])
            elif pp.cfull or pp.kx:  # a clipped causal piece (``..causal``): a resident
                # operand whole (the tile's columns, all of K) read in its [kc, cols] corner,
                # a streamed one as the box the piece reads
                kbox = None if tk == k else (0, k0, kc)
                if not resident and kbox is None:
                    kbox = (0, 0, kc)
                w_buf, wt = _weight_in(em, pp, op, w_t, tpb, c0, (pp.cfull or c1) if resident
                                       else c1, kbox, resident, j)
                w_acc = access((kc, cols), [((1, 0), 0), ((0, 1), 0)]) if resident else None
            elif kfirst:  # the chunk into the first tile's whole-K weight buffer
                bshape, lin = em.weight_box(w_t, c0, c1, "w", (0, k0, kc))
                w_buf, wt = em.shared_chunk(w_t, ("w", c0, c1, (0, k0, kc)), pp.b_share, tpb,
                                            bshape, lin, into=(("w", c0, c1), (k, cols), access(
                                                (kc, cols), [((1, 0), k0), ((0, 1), 0)])))
                w_acc = access((kc, cols), [((1, 0), k0), ((0, 1), 0)])
            else:
                w_buf, wt = _weight_in(em, pp, op, w_t, tpb, c0, c1,
                                       None if tk == k else (0, k0, kc), resident, j)
                w_acc = None
            deps.append(wt)
            slots = {"a": a_slot, "b": (w_buf, w_acc),
                     "c": (out if last or acc_buf is None else acc_buf, None)}
            if acc_buf is not None and last:
                slots["acc"] = (acc_buf, None)
            params: dict[str, Attribute] = {"m": _int(rows),
                                            "n": _int(cols),
                                            "k": _int(kc)}
            w4 = op.attrs.get("w4")
            if w4:  # the scale rows of this K chunk, moved as the weight is; dequantized on the fly
                s_t, blk = w4
                if k0 % blk or kc % blk:
                    raise ScheduleError(f"op '{op.name}': K chunk [{k0}, {k0 + kc}) cuts a "
                                        f"dequantization block of {blk}")
                if plan is not None and pp.w_share and scales_resident(pp.b_share, plan):
                    # the weight group's scales, one broadcast: this chunk's rows of its columns
                    gc0, gc1 = pp.w_cols
                    bshape, lin = em.weight_box(s_t, gc0, gc1, "w", None)
                    s_buf, s_tok = em.shared_chunk(s_t, ("sg", pp.w_cols), pp.w_share, tpb,
                                                   bshape, lin)
                    s_acc = access((kc // blk, cols), [((1, 0), k0 // blk), ((0, 1), c0 - gc0)])
                elif plan is not None and scales_resident(pp.b_share, plan):
                    # loaded once: this chunk's rows of them
                    s_buf, s_tok = em.weight(op, s_t, tpb, c0, c1, "w", None, True, j)
                    s_acc = access((kc // blk, cols), [((1, 0), k0 // blk), ((0, 1), 0)])
                else:
                    s_buf, s_tok = _weight_in(em, pp, op, s_t, tpb, c0, c1,
                                              None if tk == k else (0, k0 // blk, kc // blk),
                                              resident, j)
                    s_acc = None
                deps.append(s_tok)
                slots["scale"] = (s_buf, s_acc)
                params["block"] = _int(blk)
            ins, prev = _chain_step(em, op, lw, MatmulOp, tpb, unit, (c0, c1), resident, j, last,
                                    prev if ci > 0 else None, slots, deps, params,
                                    epilogue=pp.kparts == 1, rows=(r0, r1),
                                    kept=(si, seg, pieces, seg_ops, b))
            if not last:
                yield
    elif lw.kind == "conv":
        a = op.attrs
        x_t, w_t = op.inputs[0], op.inputs[1]
        oh, ow = conv_out_hw(a)
        sh, sw = a["stride"]
        dh, dw = a["dilation"]
        pt, pl, pb, pr = a["pad"]
        H, W, C = a["h"], a["w"], a["c"]
        n0, q0 = divmod(r0, oh)
        q1 = q0 + rows
        top = q0 * sh - pt
        bot = (q1 - 1) * sh - pt + dh * (a["kh"] - 1) + 1
        i0, i1 = max(0, top), min(H, bot)
        pt2, pb2 = i0 - top, bot - i1
        kwin = a["kh"] * a["kw"]
        ck = C
        groups = a.get("groups", 1)
        if plan is not None and plan.tk < plan.k:
            if groups > 1:
                raise ScheduleError(f"op '{op.name}': a grouped conv can not be cut along K")
            ck = max(1, plan.tk // kwin)
        resident = plan is None or plan.weight_resident
        streamed = em._streamed(x_t, seg_ops, pieces)
        x_lin = [((0, 0, 0), n0), ((1, 0, 0), i0), ((0, 1, 0), 0), ((0, 0, 1), 0)]
        kept_chunks = streamed and ck < C and pp.group >= 0  # per K chunk from kept pieces
        if (streamed or ck == C) and not kept_chunks:
            x_full, x_deps = em.act_in(si, seg, op, x_t, (n0 * H + i0, n0 * H + i1),
                                         (i1 - i0, W, C), x_lin, tpb, pieces, seg_ops, b,
                                         shared=True)
        out = em.buffer("hbsm", tpb, (rows, ow, cols), "f32" if pp.kparts > 1 else out_t.dtype)
        chunks = _part_chunks(list(range(0, C, ck)), pp)
        prev = None
        for ci, k0 in enumerate(chunks):
            kc = min(ck, C - k0)
            last = ci == len(chunks) - 1
            if ck == C and groups > 1 and (c1 - c0) < a["f"]:
                # a column part of a grouped conv reads the input channels of its groups only
                fg, cg = a["f"] // groups, C // groups
                if c0 % fg or c1 % fg:
                    raise ScheduleError(f"op '{op.name}': column part [{c0}, {c1}) cuts a group")
                x_slot = (x_full, access((i1 - i0, W, (c1 - c0) // fg * cg),
                                         ident(3, (0, 0, c0 // fg * cg))))
                deps = list(x_deps)
            elif ck == C:
                x_slot, deps = (x_full, None), list(x_deps)
            elif kept_chunks:  # one DTDU broadcast per producer piece to the column parts
                lin = [((0, 0, 0), n0), ((1, 0, 0), i0), ((0, 1, 0), 0), ((0, 0, 1), k0)]
                x_rows = (n0 * H + i0, n0 * H + i1)
                xb, xts = em.kept_chunk(si, seg, op, x_t, ("k", x_rows, k0), x_rows,
                                        (i1 - i0, W, kc), lin, tpb, pieces, seg_ops, b,
                                        (k0, k0 + kc), pp.a_share if em.plan.kept_bcast else ())
                x_slot, deps = (xb, None), list(xts)
            elif streamed:
                x_slot = (x_full, access((i1 - i0, W, kc), ident(3, (0, 0, k0))))
                deps = list(x_deps) if ci == 0 else []
            else:
                lin = [((0, 0, 0), n0), ((1, 0, 0), i0), ((0, 1, 0), 0), ((0, 0, 1), k0)]
                if pp.group >= 0:  # lockstep: the plan's broadcast to the row tile's TPBs
                    xb, xt = em.shared_chunk(x_t, ("a", (n0 * H + i0, n0 * H + i1), k0),
                                             pp.a_share, tpb, (i1 - i0, W, kc), lin)
                else:
                    xb, xt = em.load(x_t, (i1 - i0, W, kc), lin, tpb)
                x_slot, deps = (xb, None), [xt]
            w_buf, wt = _weight_in(em, pp, op, w_t, tpb, c0, c1,
                                   None if ck == C else (2, k0, kc), resident, j)
            deps.append(wt)
            slots = {"x": x_slot, "w": (w_buf, None), "y": (out, None)}
            g_part = groups * cols // a["f"]  # the groups of this column part
            params = {"n": _int(1), "h": _int(i1 - i0), "width": _int(W),
                      "c": _int(kc if groups == 1 else C // groups * g_part),
                      "f": _int(cols), "kh": _int(a["kh"]), "kw": _int(a["kw"])}
            if g_part > 1:
                params["groups"] = _int(g_part)
            if (sh, sw) != (1, 1):
                params["stride"] = i64_array([sh, sw])
            if (pt2, pl, pb2, pr) != (0, 0, 0, 0):
                params["pad"] = i64_array([pt2, pl, pb2, pr])
            if (dh, dw) != (1, 1):
                params["dilation"] = i64_array([dh, dw])
            ins, prev = _chain_step(em, op, lw, Conv2dOp, tpb, unit, (c0, c1), resident, j, last,
                                    prev if ci > 0 else None, slots, deps, params,
                                    epilogue=pp.kparts == 1)
            if not last:
                yield
    else:
        raise ScheduleError(f"op '{op.name}' ({op.unit}): no lowering for '{lw.kind}'")
    return ins, out


def _part_chunks(chunks: list[int], p: PlanPiece) -> list[int]:
    """The K chunks a piece computes: all, or its K part's contiguous run (``StageCfg.ks``)."""
    if p.kparts <= 1:
        return chunks
    a, b = k_part_range(len(chunks), p.kparts, p.kpart)
    return chunks[a:b]


def scales_resident(b_share, plan: TilePlan) -> bool:
    """Are the int4 scales of a piece loaded once, whole K, while its weight streams in K
    chunks? Yes when K is chunked, the piece's tile spans its whole column part (one resident
    scale buffer per TPB: ``partition.tile_piece`` budgets exactly that) and its weight chunks go
    to its TPB alone (``b_share``: the rows of its column part in a lockstep group): one DMA per
    TPB instead of one per chunk (each DDR transfer costs ``dma_setup_cycles + ddr_latency`` of
    its in-order engine; the scales are 1/32 of the int4 bytes)."""
    return len(b_share) <= 1 and plan.tk < plan.k and plan.tc >= plan.cols


def _weight_in(em, pp, op, w_t, tpb, c0, c1, k, resident, j):
    """The second operand's columns [c0, c1) (K chunk ``k``) on ``tpb``, as the plan moves it."""
    if not resident and pp.group >= 0:
        bshape, lin = em.weight_box(w_t, c0, c1, "w", k)
        return em.shared_chunk(w_t, ("w", c0, c1, k), pp.b_share, tpb, bshape, lin)
    return em.weight(op, w_t, tpb, c0, c1, "w", k, resident, j)


def _chain_step(em, op, lw, cls, tpb, unit, cols, resident, j, last, prev, slots, deps, params,
                epilogue: bool = True, bias_resident: bool = True,
                rows: tuple[int, int] | None = None, kept: tuple | None = None):
    """One TCU instruction of a K chain (matmul or conv): it accumulates onto ``prev`` (the chunk
    before, None for the first); the last chunk carries the bias and the activation (unless
    ``epilogue`` is False: a K part's partial sum, the reduction applies them) and is returned
    for the caller to emit, the others are emitted here. Returns (instruction, new prev)."""
    if prev is not None:
        params["accumulate"] = UnitAttr()
        deps.append(prev)
    if lw.requant is not None and (prev is not None or not last):
        # the tiler keeps K whole for these (partition.tile_piece): a requantized chunk could not
        # be accumulated onto
        raise ScheduleError(f"op '{op.name}': a requantized contraction can not be split along K")
    if ("store" in op.epilogue or lw.dequant) and (prev is not None or not last) and \
            "acc" not in slots and not (not last and cls is MatmulOp):
        raise ScheduleError(f"op '{op.name}': a rounded (f16) or dequantized contraction split "
                            "along K needs its f32 (i32) accumulator")
    if lw.dequant and not epilogue:
        raise ScheduleError(f"internal: op '{op.name}': a dequantized contraction split over "
                            "TPBs")
    if last and epilogue:
        if lw.bias:
            # resident (``plan_piece``), except in a resident-activation matmul, whose plan
            # (:func:`_plan_act_resident`) loads it per piece
            bb, bt = em.weight(op, lw.bias, tpb, cols[0], cols[1], "bias", resident=bias_resident,
                               j=j)
            slots["bias"] = (bb, None)
            deps.append(bt)
        if lw.requant is not None:
            rq = lw.requant
            params["requant"] = i64_array([rq["mult"][0], rq["shift"][0], rq["zp"], rq["qmin"],
                                           rq["qmax"]])
            if lw.requant_table:  # [2, F] in memory, walked as [cols, 2] (multiplier, shift)
                tb, tt = em.weight(op, lw.requant_table, tpb, cols[0], cols[1], "w",
                                   resident=resident, j=j)
                n = cols[1] - cols[0]
                slots["per_channel"] = (tb, access((n, 2), [((0, 1), 0), ((1, 0), 0)]))
                deps.append(tt)
        if lw.dequant:  # per-channel f32 scales [F]: this tile's columns, resident like a bias
            db, dt = em.weight(op, lw.dequant, tpb, cols[0], cols[1], "bias", resident=True, j=j)
            slots["dequant"] = (db, None)
            deps.append(dt)
        if lw.post:  # CVU stages after the dequantization (``from_ir.tcu_post``)
            params["post"] = ArrayAttr([StageAttr.from_isa(st) for st in lw.post])
            if lw.post_in:  # their operand: this piece's [rows, cols] box (the plan's)
                if rows is None:
                    raise ScheduleError(f"internal: op '{op.name}': post_in without rows")
                r0, r1 = rows
                if kept is not None and em._streamed(lw.post_in, kept[3], kept[2]):
                    # kept in HBSM (:mod:`..keep`): the producer's tile in place, or copied
                    si, seg, pieces, seg_ops, band = kept
                    pb, pts = em.act_in(si, seg, op, lw.post_in, (r0, r1),
                                        (r1 - r0, 1, cols[1] - cols[0]),
                                        [((1, 0, 0), r0), ((0, 0, 1), cols[0])], tpb, pieces,
                                        seg_ops, band, cols=cols)
                    deps += pts
                else:
                    pb, pt = em.load(lw.post_in, (r1 - r0, cols[1] - cols[0]),
                                     [((1, 0), r0), ((0, 1), cols[0])], tpb,
                                     box=(r0, r1, cols[0], cols[1]))
                    deps.append(pt)
                slots["post_in"] = (pb, None)
        if lw.act is not Act.NONE:
            params["act"] = StringAttr(lw.act.name.lower())
    ins = cls(tpb, slots, deps + em._take_out_wait(), params=params)
    if not last:
        em._emit(em._take(unit, tpb), ins)
        em._computed(tpb, op.name, ins.done)
        prev = ins.done
    return ins, prev

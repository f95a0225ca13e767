"""Emitter: the plan's segments and pieces -> instructions (loads, broadcasts, copies, stores).

:class:`UnitEmitter` walks the plan's pieces, emits the operand transfers every op family shares
(memory loads, shared row tiles, resident weights and their DRB broadcasts, DTDU copies from
producer pieces, stores) and hands the unit instructions of a piece to its op family
(:mod:`.kinds`), using the bookkeeping of :class:`.emit_core.EmitterCore`.
"""
from __future__ import annotations

from xdsl.ir import SSAValue

from m100.dialects.tpb import BroadcastOp, CopyOp, DmaOp
from m100.targets.m100.isa_base import mask_of

from .emit_core import EmitterCore, Lin, Piece, _int, access, ident, row_index
from .graph import ScheduleError, concat_names, conv_out_hw
from .build_segments import carry_share
from .list_schedule import _overlapping, boxed_store
from .kinds import FAMILIES
from .plan import STORE_LATER, Unit, op_family
from .row_buckets import rows_over
from .segment import SegmentCfg, StageCfg


def _piece_boxes(src, a0: int, a1: int, k0: int, k1: int, col_base: int):
    """(piece, source access, destination access) of every producer piece in ``src`` that meets
    rows [a0, a1) x columns [k0, k1): the overlap box, read at its place in the piece and written
    at its place in a buffer whose rows start at a0 and columns at ``col_base``."""
    for q in src:
        a, e = max(a0, q.r0), min(a1, q.r1)
        qc0, qc1 = max(k0, q.c0), min(k1, q.c1)
        if e <= a or qc1 <= qc0:
            continue
        qe = q.out.type.dims  # type: ignore[attr-defined]
        box = (e - a, qe[1], qc1 - qc0)
        yield (q, access(box, ident(3, (a - q.r0, 0, qc0 - q.c0))),
               access(box, ident(3, (a - a0, 0, qc0 - col_base))))


class UnitEmitter(EmitterCore):
    """Per-op and per-unit-kind emission of the emitter (see :mod:`.emit`)."""

    # ---------------------------------------------------------------- compute segments
    def segment(self, si: int, seg: SegmentCfg) -> None:
        """The pieces of segment ``si`` in the plan's order, each plan task one instruction."""
        pieces: dict[str, list[Piece]] = {}
        seg_ops = set(seg.ops)
        stage_of = {st.op: st for st in seg.stages}
        plist = self.plan.pieces[si]
        i = 0
        carry: list = []
        bounds = []
        while i < len(plist):  # a lockstep group: consecutive pieces with one group id
            e = i + 1
            while e < len(plist) and plist[i].group >= 0 and plist[e].group == plist[i].group:
                e += 1
            bounds.append((i, e))
            i = e
        # late stores (the plan's ``late``, ``build_segments.PlanBuilder._late_ok``): the segment
        # before's last group stores after this one's steps; this one's, after the next one's
        late_in, self.late_items = self.late_items, None
        held = si in self.plan.late
        reads = self.plan.late_reads.get(si)  # (``PlanBuilder._late_reads``)
        # a segment built piece by piece (no lockstep group: ``PlanBuilder._late_wave``) holds
        # every piece's store; a lockstep one its last group's
        wave = held and bool(plist) and all(pp.group < 0 for pp in plist)
        parked: list = []
        for gi, (i, e) in enumerate(bounds):
            self.gcache = {}
            self.late_pause = ((held or reads is not None) and (wave or gi == len(bounds) - 1)) \
                or (si in self.plan.carry and gi < len(bounds) - 1)
            got = self._run_group(plist[i:e], si, seg, stage_of, pieces, seg_ops,
                                  [] if wave else carry, late_in if gi == 0 else None)
            if wave:
                parked += got
            else:
                carry = got
            self.late_pause = False
        if late_in is not None and not bounds:
            raise AssertionError(f"emitter: late stores into segment {si} without pieces")
        if held:
            self.late_items = (parked if wave else carry, stage_of, self.plan.late[si])
        elif reads is not None:  # built at the ends of later segments (:meth:`late_reads_end`)
            at = {id(pp): k for k, pp in enumerate(plist)}
            self.pend[si] = ({at[id(it[0])]: it for it in carry}, reads, stage_of,
                             self.by_op[seg.stages[0].op].outputs[0])
        else:
            self._resume(carry, stage_of)
        for name in seg_ops & self.plan.kept:  # read by later segments from the HBSM
            # a K split's reduced tiles (:meth:`_reduce_piece`), else the op's pieces
            self.kept_pieces[name] = self.reduced.pop(name, None) or pieces.get(name, [])

    def late_reads_end(self, j: int) -> None:
        """The late stores due at the end of segment ``j`` (the plan's ``late_reads``, in its
        order; the views of their tensor share its writer list: ``kinds.movement.emit_op``)."""
        for si in list(self.pend):
            items, reads, stage_of, _ = self.pend[si]
            ix = reads.get(j)
            if not ix:
                continue
            self._resume([items.pop(i) for i in ix], stage_of)
            if not items:
                del self.pend[si]

    def _producer_pieces(self, tensor: str, seg_ops: set[str], pieces):
        """The pieces of ``tensor``'s producer that a consumer copies from: of this segment, or
        of an earlier one whose output the plan keeps in HBSM (:mod:`.keep`); else None."""
        prod = self.producers.get(tensor)
        if prod is None:
            return None
        if prod.name in seg_ops:
            return pieces.get(prod.name)
        return self.kept_pieces.get(prod.name)

    def _run_group(self, group, si, seg, stage_of, pieces, seg_ops, carry=None,
                   late=None) -> list:
        """Emit the pieces of a lockstep group K chunk by K chunk, round robin, exactly as the
        timeline built them (each piece with its own plan-task queue and token context); the
        stores of ``carry`` (the group before, paused at ``STORE_LATER``) after this group's
        first step, those of ``late`` (the segment before's last group: items, their stage
        map, how many per step) after each step, as the timeline does. Returns this group's
        paused pieces."""
        live = []
        for pp in group:
            live.append([pp, self._piece_steps(pp, si, seg, stage_of[pp.op], pieces, seg_ops),
                         None])
        parked: list = []
        items, late_of, per = late if late is not None else ([], None, 0)
        cper = carry_share(len(carry), si in self.plan.carry) if carry else 0
        while live:
            nxt = []
            for item in live:
                if self._step(item, stage_of) is STORE_LATER:
                    parked.append(item)
                elif item[1] is not None:
                    nxt.append(item)
            if carry:
                self._resume(carry[:cper], stage_of)
                carry = carry[cper:]
            if items:
                self._resume(items[:per], late_of)
                items = items[per:]
            live = nxt
        if carry:
            self._resume(carry, stage_of)
        if items:
            self._resume(items, late_of)
        return parked

    def _step(self, item: list, stage_of):
        """Advance one piece's generator to its next pause (``item[1]`` = None once done)."""
        pp, gen, ctx = item
        self.cur_stage, self.cur_pp = stage_of[pp.op], pp
        if ctx is not None:
            self.cur, self.out_wait, self._queue, self._piece_desc = ctx
        try:
            r = next(gen)
            item[2] = (self.cur, self.out_wait, self._queue, self._piece_desc)
        except StopIteration:
            item[1] = r = None
        return r

    def _resume(self, items: list, stage_of) -> None:
        for item in items:
            while item[1] is not None:
                self._step(item, stage_of)

    def _piece_steps(self, pp, si, seg, st, pieces, seg_ops):
        op = self.by_op[pp.op]
        if pp.reduce:
            self._reduce_piece(pp, op, pieces)
            return
        self._begin(pp)
        p = yield from self.piece_steps(si, seg, st, op, pp.band, pp.col, pp.tpb, pp.r0, pp.r1,
                                        pp.c0, pp.c1, pieces, seg_ops,
                                        self.plan.plans.get(op.name))
        pieces.setdefault(op.name, []).append(p)
        if pp.store:
            plan = self.plan.plans.get(op.name)
            if (plan is not None and plan.act_resident) or self.late_pause:
                yield STORE_LATER
            self.store(op, p)
        self._end()

    def _reduce_piece(self, pp, op, pieces) -> None:
        """A K-split reduction (the plan's reduction piece): DTDU copies of the partial sums of
        parts 1.. into fresh buffers of part 0's TPB, the bias, one CVU pipeline adding them
        (+ bias, ReLU) into the output tile, its store."""
        from m100.dialects.tpb import CvuPipelineOp, StageAttr
        from m100.dialects.twu import i64_array
        from m100.targets.m100.isa import CvuOp, Ref, RefKind, Stage
        from xdsl.dialects.builtin import ArrayAttr
        from .segment import ksplit_bias
        self._begin(pp)
        root = pp.tpb
        key = f"{op.name}/reduce"
        self.cur = (root, key)
        back = self.out_readers.setdefault((root, key), [])
        self.out_wait = list(back[-2]) if len(back) >= 2 else []
        by = {(q.tpb, q.r0, q.c0): q for q in pieces.get(op.name, [])}
        parts = [by[(t, pp.r0, pp.c0)] for t in pp.reduce]
        dims = tuple(parts[0].out.type.dims)  # type: ignore[attr-defined]
        bufs, deps = [parts[0].out], [parts[0].done]
        for q in parts[1:]:
            buf = self.buffer("hbsm", root, dims, "f32")
            cp = CopyOp(q.tpb, {"src": (q.out, None), "dst": (buf, None)},
                        [q.done] + self._slot_deps(root, key) + self._bar(root))
            self._emit(self._take("dtdu", q.tpb, (root,)), cp)
            q.readers.append(cp.done)
            self._touch(root, cp.done)
            self._touch(q.tpb, cp.done)
            bufs.append(buf)
            deps.append(cp.done)
        shapes = [dims] * len(bufs)
        stages = [Stage(CvuOp.ADD, (Ref(RefKind.INPUT, 0), Ref(RefKind.INPUT, 1)))]
        for i in range(2, len(bufs)):
            stages.append(Stage(CvuOp.ADD, (Ref(RefKind.STAGE, len(stages) - 1),
                                            Ref(RefKind.INPUT, i))))
        bias = ksplit_bias(op)
        if bias is not None:
            bb, bt = self.weight(op, bias, root, pp.c0, pp.c1, "bias", resident=True, j=pp.col)
            stages.append(Stage(CvuOp.ADD, (Ref(RefKind.STAGE, len(stages) - 1),
                                            Ref(RefKind.INPUT, len(bufs)))))
            bufs.append(bb)
            shapes.append((1, 1, pp.c1 - pp.c0))
            deps.append(bt)
        if "relu" in op.epilogue:
            stages.append(Stage(CvuOp.RELU, (Ref(RefKind.STAGE, len(stages) - 1),)))
        out = self.buffer("hbsm", root, dims, self.g.tensors[op.outputs[0]].dtype)
        slots = {f"in{i}": (b, None) for i, b in enumerate(bufs)}
        slots["out"] = (out, None)
        params = {"in_shapes": ArrayAttr([i64_array(x) for x in shapes]),
                  "out_shape": i64_array(dims),
                  "stages": ArrayAttr([StageAttr.from_isa(x) for x in stages])}
        ins = CvuPipelineOp(root, slots, deps + self._take_out_wait(), params=params)
        self._emit(self._take("cvu", root), ins)
        self._computed(root, key, ins.done)
        parts[0].readers.append(ins.done)
        self.cur = None
        pc = Piece(op.name, pp.band, pp.col, root, pp.r0, pp.r1, pp.c0, pp.c1, out, ins.done)
        back.append(pc.readers)
        if op.name in self.plan.kept:
            self.reduced.setdefault(op.name, []).append(pc)
        if pp.store:
            self.store(op, pc)
        self._end()

    def shared_chunk(self, tensor: str, key: tuple, tpbs: tuple[int, ...], tpb: int,
                     bshape: tuple[int, ...], lin: Lin,
                     into: tuple | None = None) -> tuple[SSAValue, SSAValue]:
        """A K chunk of a lockstep group read by ``tpbs`` (the plan's ``a_share`` / ``b_share``):
        one DRB broadcast into a buffer of each (one ``m100.bcast`` id, hence one HBSM offset),
        made by the first piece that needs it; read by only ``tpb``: one load. ``into``:
        ``(tile key, tile shape, access)``: the chunk is written at ``access`` into one buffer
        of ``tile shape`` per TPB that all the tile's chunks fill (made by its first chunk: a
        K-chunked first tile, ``kinds.tcu.first_k_chunk``; its buffer is the tile's)."""
        k = (tensor, key, tpb)
        if k in self.gcache:
            return self.gcache[k]
        wbar = key[0] in ("w", "wg", "sg")  # a weight chunk (or a weight group's scales) may
        # be prefetched (``Plan.prefetch``); a run-time B chunk too (``act``: the plan's role w)
        act = key[0] == "w"
        if len(tpbs) <= 1:
            r = self.gcache[k] = self.load(tensor, bshape, lin, tpb, wbar=wbar, act=act)
            return r
        opname = self.cur[1]
        t = self._take("dma", -1, tuple(tpbs))
        dst_acc = None
        if into is None:
            bufs = self._bcast_buffers(tensor, tpbs, bshape)
        else:
            tiles = self.__dict__.setdefault("_tile_bufs", {})
            tk = (tensor, into[0], tuple(tpbs))
            if tk not in tiles:
                tiles[tk] = self._bcast_buffers(tensor, tpbs, into[1])
            bufs, dst_acc = tiles[tk], into[2]
        deps = self.token_of(tensor) + [d for x in tpbs
                                        for d in (self._wbar(x, tensor, t.id, act) if wbar
                                                  else self._bar(x))
                                        + self._slot_deps(x, opname)]
        d = DmaOp(t.engine, {"src": self.source(tensor, bshape, lin),
                             "dst": (bufs[tpbs[0]], dst_acc)}, deps,
                  params={"tpb_mask": _int(t.tpb_mask)})
        self._emit(t, d)
        for x in tpbs:
            self.gcache[(tensor, key, x)] = (bufs[x], d.done)
        return self.gcache[k]

    def weight_box(self, tensor: str, c0: int, c1: int, kind: str,
                   k: tuple[int, int, int] | None) -> tuple[tuple[int, ...], Lin]:
        """Buffer shape and memory access of columns [c0, c1) of a weight (K chunk ``k``)."""
        shape = self.g.tensors[tensor].shape
        if kind == "bias":
            return (c1 - c0,), [((1,), c0)]
        nd = len(shape)
        bl = list(shape[:-1]) + [c1 - c0]
        offs = [0] * (nd - 1) + [c0]
        if k is not None:
            bl[k[0]] = k[2]
            offs[k[0]] = k[1]
        return tuple(bl), ident(nd, tuple(offs))

    def wrote(self, tensor: str, tok: SSAValue) -> None:
        """A store of ``tensor`` (``tok``): its writer, and of the in-place concats it is a part
        of emitted before it -- a late store (``PlanBuilder._late_wave``) passes over a concat
        whose parts are all written in place, as the plan's ``ListScheduler._wrote``; a concat
        emitted after it copies its parts' writers (``kinds.movement.emit_op``), its views share
        its list."""
        self.writers.setdefault(tensor, []).append(tok)
        for c in concat_names(self.g, tensor):
            ws = self.writers.get(c)
            if ws is not None:
                ws.append(tok)

    def store(self, op, p: Piece) -> None:
        out_t = op.outputs[0]
        shape = self.g.tensors[out_t].shape
        bshape = p.out.type.dims  # type: ignore[attr-defined]
        if out_t in self.g.wmap:  # into another tensor's layout (``OpGraph.wmap``)
            root, strides, off = self.g.wmap[out_t]
            lin = row_index(shape, p.r0, p.c0)
            nd = len(lin[0][0])
            flat = [(tuple(sum(s * c[k] for s, (c, _) in zip(strides, lin)) for k in range(nd)),
                     off + sum(s * k0 for s, (_, k0) in zip(strides, lin)))]
            mem = self.alias(root, (self.g.tensors[root].numel,))
            tok = self.dma(p.out, None, mem, access(bshape, flat), [p.done])
            self.wrote(out_t, tok)
            p.readers.append(tok)
            self._touch(p.tpb, tok)
            return
        if out_t in self.g.strided:  # columns of a 2-D root (``OpGraph.strided``)
            root, (ro, co) = self.g.strided[out_t]
            mem = self.memory(root)
            lin = row_index(self.g.tensors[root].shape, p.r0 + ro, p.c0 + co)
            tok = self.dma(p.out, None, mem, access(bshape, lin), [p.done])
            self.wrote(out_t, tok)
            p.readers.append(tok)
            self._touch(p.tpb, tok)
            return
        mem = self.memory(out_t)
        if op.unit == "cvu.pool":
            lin = self.pool_out_index(op, p.r0, p.c0)
        elif op.unit == "cvu.reduction" and not op.attrs.get("keep", True):
            lin = row_index(self.g.tensors[op.inputs[0]].shape, p.r0, 0)[:-1]
        else:
            lin = row_index(shape, p.r0, p.c0)
        tok = self.dma(p.out, None, mem, access(bshape, lin), [p.done])
        self.wrote(out_t, tok)
        if boxed_store(self.g, op):  # (the plan's ``wboxes``)
            self.wboxes.setdefault(out_t, []).append(
                ((p.r0, p.r0 + bshape[0], p.c0, p.c0 + bshape[-1]), tok))
        p.readers.append(tok)
        self._touch(p.tpb, tok)

    def load(self, tensor: str, bshape: tuple[int, ...], lin: Lin, tpb: int,
             slot: bool = True, wbar: bool = False,
             box: tuple[int, int, int, int] | None = None,
             act: bool = False) -> tuple[SSAValue, SSAValue]:
        """A fresh HBSM buffer of ``bshape`` on ``tpb`` filled from memory through ``lin``
        (``wbar``: a weight, which may be prefetched across segments -- ``act``: a run-time B
        operand too, ``_wbar``; ``box``: rows x cols of a 2-D tensor, which waits only for the
        stores that wrote it when the plan's does)."""
        mem, acc = self.source(tensor, bshape, lin)
        buf = self.buffer("hbsm", tpb, bshape, self.g.tensors[tensor].dtype)
        bs = self.wboxes.get(tensor) if box is not None else None
        over = _overlapping(bs, box) if bs and len(bs) == len(self.writers.get(tensor, ())) \
            else None
        deps = (self.token_of(tensor) if over is None else list(over)) + \
            (self._wbar(tpb, tensor, act=act) if wbar else self._bar(tpb))
        if slot and self.cur is not None:
            deps = deps + self._slot_deps(*self.cur)
        tok = self.dma(mem, acc, buf, None, deps, tpb)
        return buf, tok

    def weight(self, op, tensor: str, tpb: int, c0: int, c1: int, kind: str,
               k: tuple[int, int, int] | None = None, resident: bool = True, j: int = 0,
               box: tuple | None = None) -> tuple[SSAValue, SSAValue]:
        """Columns [c0, c1) of a weight (``k``: (axis, start, size) of a reduction chunk) in the
        HBSM of ``tpb``; resident weights are loaded once per TPB and reused. ``box``: the
        buffer shape and memory walk instead (a resident CVU input, ``kinds/cvu``)."""
        key = (op.name, tpb, c0, c1, tensor, k)
        if key in self.weights:
            return self.weights[key]
        st = getattr(self, "cur_stage", None)
        if resident and st is not None and st.gr > 1:
            # one DRB broadcast to every TPB of this column part that computes a band
            rows = sorted({st.row_of(b) for b in range(st.bands)})
            tpbs = [st.tpbs[r * st.gc + j] for r in rows]
            if tpb in tpbs and len(tpbs) > 1:
                self._want_tpb = tpb
                return self._broadcast_weight(op, tensor, tpbs, c0, c1, kind, k, j, box,
                                              act=kind == "w")
        # the last dim: output columns
        bshape, lin = box or self.weight_box(tensor, c0, c1, kind, k)
        r = self.load(tensor, bshape, lin, tpb, slot=not resident, wbar=True, act=kind == "w")
        if resident:
            self.weights[key] = r
        return r

    def _bcast_buffers(self, tensor: str, tpbs, bshape) -> dict:
        """One HBSM buffer of ``bshape`` per TPB of ``tpbs`` for a DRB broadcast of ``tensor``'s
        box: all carry the same new ``m100.bcast`` id, so that hbsm-allocate gives them one
        offset (a broadcast writes the same addresses on every TPB)."""
        self.n_bcast = getattr(self, "n_bcast", 0) + 1
        gid = _int(self.n_bcast)
        dtype = self.g.tensors[tensor].dtype
        bufs = {}
        for x in tpbs:
            b = self.buffer("hbsm", x, bshape, dtype)
            b.owner.attributes["m100.bcast"] = gid
            bufs[x] = b
        return bufs

    def _broadcast_weight(self, op, tensor: str, tpbs: list[int], c0: int, c1: int, kind: str,
                          k, j: int, box: tuple | None = None, act: bool = False
                          ) -> tuple[SSAValue, SSAValue]:
        """Columns [c0, c1) of a resident weight written into the HBSM of every TPB of ``tpbs`` by
        one DMA over the DRB (``tpb_mask``); the receiving buffers carry ``m100.bcast`` so that
        hbsm-allocate gives them one offset (a broadcast writes the same addresses everywhere)."""
        bshape, lin = box or self.weight_box(tensor, c0, c1, kind, k)
        bufs = self._bcast_buffers(tensor, tpbs, bshape)
        src = self.source(tensor, bshape, lin)  # (a runtime B may be a strided view)
        deps = self.token_of(tensor) + [d for t in tpbs for d in self._wbar(t, tensor, act=act)]
        mask = mask_of(*tpbs)
        t = self._take("dma", -1, tuple(tpbs))
        if t.tpb_mask != mask:
            raise AssertionError(f"emitter: broadcast to mask {mask}, plan task {t.id} {t.tpb_mask}")
        d = DmaOp(t.engine, {"src": src, "dst": (bufs[tpbs[0]], None)}, deps,
                  params={"tpb_mask": _int(mask)})
        self._emit(t, d)
        for t in tpbs:
            self.weights[(op.name, t, c0, c1, tensor, k)] = (bufs[t], d.done)
        return self.weights[(op.name, self._want_tpb, c0, c1, tensor, k)]

    def act_in(self, si, seg, op, tensor: str, rows: tuple[int, int], bshape: tuple[int, ...],
               lin_mem: Lin, tpb: int, pieces, seg_ops, band: int,
               cols: tuple[int, int] | None = None, shared: bool = False
               ) -> tuple[SSAValue, list[SSAValue]]:
        """The input rows [rows) of ``tensor`` on ``tpb``: streamed from producer pieces of this
        segment, or loaded from memory through ``lin_mem``."""
        src = self._producer_pieces(tensor, seg_ops, pieces)
        if src is not None:
            a0, a1 = rows
            k0, k1 = cols if cols is not None else (0, bshape[-1])
            over = [q for q in rows_over(self._row_ix, src, a0, a1)
                    if max(a0, q.r0) < min(a1, q.r1) and max(k0, q.c0) < min(k1, q.c1)]
            if len(over) == 1 and over[0].tpb == tpb and (over[0].r0, over[0].r1) == (a0, a1) \
                    and (over[0].c0, over[0].c1) == (k0, k1) and \
                    tuple(over[0].out.type.dims) == tuple(bshape):  # type: ignore[attr-defined]
                return over[0].out, [over[0].done]  # same TPB, same box: read it in place
            buf = self.buffer("hbsm", tpb, bshape, self.g.tensors[tensor].dtype)
            toks = []
            # (the pieces of ``over`` are those of ``src`` that ``_piece_boxes`` keeps, in order)
            for q, src_acc, dst_acc in _piece_boxes(over, a0, a1, k0, k1,
                                                    k0 if cols is not None else 0):
                cp = CopyOp(q.tpb, {"src": (q.out, src_acc), "dst": (buf, dst_acc)},
                            [q.done] + (self._slot_deps(*self.cur) if self.cur else [])
                            + self._bar(tpb))
                self._emit(self._take("dtdu", q.tpb, (tpb,)), cp)
                q.readers.append(cp.done)
                self._touch(tpb, cp.done)
                self._touch(q.tpb, cp.done)
                toks.append(cp.done)
            if not toks:
                raise ScheduleError(f"internal: no producer piece of '{tensor}' covers rows {rows}")
            return buf, toks
        if shared:  # one load (or DRB broadcast, as the plan says) read by several pieces
            return self._shared_load(op, tensor, rows, bshape, lin_mem, tpb)
        buf, tok = self.load(tensor, bshape, lin_mem, tpb)
        return buf, [tok]

    def kept_chunk(self, si, seg, op, tensor: str, key: tuple, rows: tuple[int, int],
                   bshape: tuple[int, ...], lin_mem: Lin, tpb: int, pieces, seg_ops, band: int,
                   cols: tuple[int, int], tpbs: tuple[int, ...]
                   ) -> tuple[SSAValue, list[SSAValue]]:
        """A K chunk (rows x channels ``cols``) of a kept activation read by the TPBs ``tpbs``
        of a lockstep group (the plan's ``a_share``): per producer piece that holds part of it
        one ``tpb.broadcast`` from its HBSM into a buffer of each (one ``m100.bcast`` id, hence
        one HBSM offset: a DTDU broadcast writes the same addresses on every TPB of its mask),
        made by the first piece that needs it (``build_transfers.Transfers._kept_chunk``); read by
        only ``tpb``: copies (:meth:`act_in`)."""
        if len(tpbs) <= 1:
            return self.act_in(si, seg, op, tensor, rows, bshape, lin_mem, tpb, pieces, seg_ops,
                               band, cols=cols)
        k = (tensor, key, tpb)
        if k in self.gcache:
            return self.gcache[k]
        src = self._producer_pieces(tensor, seg_ops, pieces)
        if src is None:
            raise ScheduleError(f"internal: '{tensor}' has no kept producer pieces")
        a0, a1 = rows
        k0, k1 = cols
        bufs = self._bcast_buffers(tensor, tpbs, bshape)
        mask = mask_of(*tpbs)
        toks = []
        near = rows_over(self._row_ix, src, a0, a1)
        for q, src_acc, dst_acc in _piece_boxes(near, a0, a1, k0, k1, k0):
            deps = [q.done] + [d for x in tpbs for d in self._bar(x) + self._slot_deps(x, op.name)] \
                + self._drb_deps()
            bc = BroadcastOp(q.tpb, {"src": (q.out, src_acc), "dst": (bufs[tpbs[0]], dst_acc)},
                             deps, params={"tpb_mask": _int(mask)})
            self._emit(self._take("dtdu", q.tpb, tuple(tpbs)), bc)
            q.readers.append(bc.done)
            for x in set(tpbs) | {q.tpb}:
                self._touch(x, bc.done)
            toks.append(bc.done)
        if not toks:
            raise ScheduleError(f"internal: no producer piece of '{tensor}' covers rows {rows}")
        for x in tpbs:
            self.gcache[(tensor, key, x)] = (bufs[x], toks)
        return self.gcache[k]

    def _shared_load(self, op, tensor: str, rows: tuple[int, int], bshape: tuple[int, ...],
                     lin: Lin, tpb: int) -> tuple[SSAValue, list[SSAValue]]:
        """A whole-K input row tile that every column part / column tile of the row reads: loaded
        once per TPB, or sent once over the DRB to the TPBs the plan task names (``tpb_mask``;
        the receiving buffers share one ``m100.bcast`` id, hence one HBSM offset)."""
        cache = self.__dict__.setdefault("_act_cache", {})
        key = (op.name, tensor, tpb, rows)
        if key in cache:
            buf, tok = cache[key]
            return buf, list(tok) if type(tok) is tuple else [tok]  # (:meth:`band_chunk`)
        t = self.plan.tasks[self._queue[-1]] if self._queue else None
        if t is None or not t.tpb_mask:
            buf, tok = self.load(tensor, bshape, lin, tpb)
            cache[key] = (buf, tok)
            return buf, [tok]
        tpbs = list(t.dst_tpbs)
        self._take("dma", -1, tuple(tpbs))
        bufs = self._bcast_buffers(tensor, tpbs, bshape)
        deps = self.token_of(tensor) + [d for x in tpbs for d in self._bar(x) + self._slot_deps(x, op.name)]
        d = DmaOp(t.engine, {"src": self.source(tensor, bshape, lin),
                             "dst": (bufs[tpbs[0]], None)}, deps,
                  params={"tpb_mask": _int(t.tpb_mask)})
        self._emit(t, d)
        for x in tpbs:
            cache[(op.name, tensor, x, rows)] = (bufs[x], d.done)
        return bufs[tpb], [d.done]

    def band_chunk(self, op, tensor: str, rows: tuple[int, int], k: int, k0: int, kc: int,
                   tpb: int) -> tuple[SSAValue, list[SSAValue]]:
        """Columns [k0, k0 + kc) of the whole-K rows [rows) of 2-D ``tensor`` sent over the DRB
        to the TPBs the plan task names (``Transfers._band_chunk``) into one band buffer of
        ``(rows, 1, k)`` each (one ``m100.bcast`` id, made by the first chunk), at its columns
        [k0, k0 + kc); the later pieces of those TPBs read the band whole (:meth:`_shared_load`:
        all its chunks)."""
        cache = self.__dict__.setdefault("_act_cache", {})
        ck = (op.name, tensor, tpb, rows, k0)
        if ck in cache:
            buf, tok = cache[ck]
            return buf, [tok]
        t = self.plan.tasks[self._queue[-1]] if self._queue else None
        if t is None or not t.tpb_mask:
            raise AssertionError(f"emitter: {self._piece_desc}: a band chunk of '{tensor}' "
                                 "is a DRB broadcast in the plan")
        tpbs = list(t.dst_tpbs)
        self._take("dma", -1, tuple(tpbs))
        bands = self.__dict__.setdefault("_band_bufs", {})
        bk = (op.name, tensor, rows, tuple(tpbs))
        if k0 == 0:
            bands[bk] = self._bcast_buffers(tensor, tpbs, (rows[1] - rows[0], 1, k))
        bufs = bands[bk]
        n = rows[1] - rows[0]
        deps = self.token_of(tensor) + [d for x in tpbs
                                        for d in self._bar(x) + self._slot_deps(x, op.name)]
        src = self.source(tensor, (n, 1, kc), [((1, 0, 0), rows[0]), ((0, 0, 1), k0)])
        d = DmaOp(t.engine, {"src": src, "dst": (bufs[tpbs[0]],
                                                 access((n, 1, kc), ident(3, (0, 0, k0))))},
                  deps, params={"tpb_mask": _int(t.tpb_mask)})
        self._emit(t, d)
        for x in tpbs:
            cache[(op.name, tensor, x, rows, k0)] = (bufs[x], d.done)
            whole = cache.get((op.name, tensor, x, rows))
            cache[(op.name, tensor, x, rows)] = (bufs[x], (whole[1] if whole else ()) + (d.done,))
        return bufs[tpb], [d.done]

    def pool_out_index(self, op, r0: int, c0: int = 0) -> Lin:
        a = op.attrs
        oh, _ = conv_out_hw(a)
        n0, h0 = divmod(r0, oh)
        # buffer iteration [rows, ow, c] (the row-standard piece layout)
        if a.get("layout") == "nchw":
            return [((0, 0, 0), n0), ((0, 0, 1), c0), ((1, 0, 0), h0), ((0, 1, 0), 0)]
        return [((0, 0, 0), n0), ((1, 0, 0), h0), ((0, 1, 0), 0), ((0, 0, 1), c0)]

    def piece_steps(self, si, seg, st: StageCfg, op, b, j, tpb, r0, r1, c0, c1, pieces, seg_ops,
                    plan=None):
        """The instructions of one piece (a generator pausing after each K chunk but the last,
        like the timeline's; returns the :class:`Piece`)."""
        self.cur = (tpb, op.name)
        back = self.out_readers.get((tpb, op.name), [])
        self.out_wait = list(back[-2]) if len(back) >= 2 else []
        unit = Unit.of_op(op.unit).value
        res = FAMILIES[op_family(op.unit)].emit_piece(
            self, si, seg, op, b, j, tpb, r0, r1, c0, c1, pieces, seg_ops, plan)
        if not isinstance(res, tuple):
            res = yield from res
        ins, out = res
        # the output slot two pieces back must have been read (stored / copied) before reuse
        back = self.out_readers.setdefault((tpb, op.name), [])
        self._emit(self._take(unit, tpb), ins)
        self._computed(tpb, op.name, ins.done)
        self.cur = None
        pc = Piece(op.name, b, j, tpb, r0, r1, c0, c1, out, ins.done)
        back.append(pc.readers)
        return pc

    def _streamed(self, tensor: str, seg_ops: set[str], pieces) -> bool:
        return self._producer_pieces(tensor, seg_ops, pieces) is not None

    def kept_root(self, tensor: str, seg_ops: set[str]) -> str | None:
        """The kept tensor (of an earlier segment) whose bytes ``tensor`` is as whole rows
        (``keep.row_root``: RoPE's ``[T, n, hd]`` view of a kept projection), else None: the
        plan builder's ``Transfers._kept_root``."""
        from .keep import row_root
        prod = self.producers.get(tensor)
        if prod is None or prod.name not in self.g.view_ops or not self.kept_pieces:
            return None
        root = row_root(self.g, tensor)
        rp = self.producers.get(root) if root is not None else None
        if rp is None or rp.name in seg_ops or rp.name not in self.kept_pieces:
            return None
        return root

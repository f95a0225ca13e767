"""Emitter: per-op and per-unit-kind emission (data-movement DMAs, segments, pieces).

Split out of :mod:`.emit` (size rule): :class:`UnitEmitter` turns the placement's segments, stages
and bands into loads, weight DMAs/broadcasts, DTDU copies, ``tpb.matmul`` / ``tpb.conv2d`` /
``tpb.cvu`` instructions and stores, using the bookkeeping of :class:`.emit_core.EmitterCore`.
"""
from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, StringAttr, UnitAttr
from xdsl.ir import Attribute, SSAValue

from m100.dialects.tpb import Conv2dOp, CvuPipelineOp, CopyOp, DmaOp, MatmulOp, SegmentOp, StageAttr
from m100.dialects.twu import i64_array
from m100.targets.m100.isa import Act, CvuOp, Ref, RefKind, Stage

from .emit_core import (_CM, _NP, EmitterCore, Lin, Piece, _int, access, ident, row_index,
                        row_view)
from .graph import ScheduleError, conv_out_hw
from .plan import Unit
from .timeline import SegmentCfg, StageCfg


class UnitEmitter(EmitterCore):
    """Per-op and per-unit-kind emission of the emitter (see :mod:`.emit`)."""

    # ---------------------------------------------------------------- data movement ops
    def dma_op(self, op) -> None:
        lw = self.irg.lowering[op.name]
        src_t = op.inputs[0]
        src = self.memory(src_t)
        s_shape = self.g.tensors[src_t].shape
        out_t = op.outputs[0]
        o_shape = self.g.tensors[out_t].shape
        dst = self.memory(out_t)
        deps = self.token_of(src_t)
        if lw.kind == "transpose":
            perm = lw.params["perm"]
            # iterate the output; source index perm[k] = d_k
            lin = [None] * len(s_shape)
            for k, p in enumerate(perm):
                lin[p] = (tuple(1 if d == k else 0 for d in range(len(o_shape))), 0)
            tok = self.dma(src, access(o_shape, lin), dst, None, deps)
        elif lw.kind == "broadcast":
            dims = set(lw.params["dims"])
            kept = [d for d in range(len(o_shape)) if d not in dims]
            lin = [(tuple(1 if d == kept[j] else 0 for d in range(len(o_shape))), 0)
                   for j in range(len(s_shape))]
            tok = self.dma(src, access(o_shape, lin), dst, None, deps)
        elif lw.kind == "pad":
            lo = lw.params["low"]
            val = lw.params["value"]
            t = self.g.tensors[out_t]
            arr = np.full(o_shape, val, dtype=_NP[t.dtype])
            sp, addr = self.mem_addr[out_t]
            self.head.append(SegmentOp(f"{out_t}.pad", sp, addr, arr.tobytes()))
            tok = self.dma(src, None, dst, access(s_shape, ident(len(s_shape), tuple(lo))), deps)
        elif lw.kind == "gcopy":  # a copy generic: the input's indexing map over the output
            tok = self.dma(src, access(o_shape, lw.params["map"]), dst, None, deps)
        elif lw.kind == "concat":
            dim = lw.params["dim"]
            off = 0
            toks = []
            for tn in op.inputs:
                sh = self.g.tensors[tn].shape
                offs = tuple(off if d == dim else 0 for d in range(len(sh)))
                toks.append(self.dma(self.memory(tn), None, dst, access(sh, ident(len(sh), offs)),
                                     self.token_of(tn)))
                off += sh[dim]
            self.writers[out_t] = toks
            return
        elif lw.kind == "slice":
            offs, sizes, strides = lw.params["offsets"], lw.params["sizes"], lw.params["strides"]
            # iterate the result; dims of size 1 that the result dropped are fixed offsets
            kept = [d for d in range(len(sizes))]
            if len(o_shape) != len(sizes):
                kept = [d for d in range(len(sizes)) if sizes[d] != 1]
                if len(kept) != len(o_shape):
                    raise ScheduleError(f"op '{op.name}': unsupported rank-reducing slice")
            lin = []
            for d in range(len(sizes)):
                if d in kept:
                    k = kept.index(d)
                    lin.append((tuple(strides[d] if q == k else 0 for q in range(len(o_shape))),
                                offs[d]))
                else:
                    lin.append((tuple(0 for _ in o_shape), offs[d]))
            tok = self.dma(src, access(o_shape, lin), dst, None, deps)
        elif lw.kind == "reshape":
            tok = self.dma(src, None, self.alias(out_t, s_shape), None, deps)
        else:
            raise ScheduleError(f"op '{op.name}': no DMA lowering for '{lw.kind}'")
        self.writers[out_t] = [tok]

    # ---------------------------------------------------------------- compute segments
    def segment(self, si: int, seg: SegmentCfg) -> None:
        """The pieces of segment ``si`` in the plan's order, each plan task one instruction."""
        pieces: dict[str, list[Piece]] = {}
        seg_ops = set(seg.ops)
        stage_of = {st.op: st for st in seg.stages}
        for pp in self.plan.pieces[si]:
            st = stage_of[pp.op]
            op = self.by_op[pp.op]
            self.cur_stage = st
            self._begin(pp)
            p = self.piece(si, seg, st, op, pp.band, pp.col, pp.tpb, pp.r0, pp.r1, pp.c0, pp.c1,
                           pieces, seg_ops, self.plan.plans.get(op.name))
            pieces.setdefault(op.name, []).append(p)
            if pp.store:
                self.store(op, p)
            self._end()

    def store(self, op, p: Piece) -> None:
        out_t = op.outputs[0]
        mem = self.memory(out_t)
        shape = self.g.tensors[out_t].shape
        bshape = p.out.type.dims  # type: ignore[attr-defined]
        if op.unit == "cvu.pool":
            lin = self.pool_out_index(op, p.r0, p.c0)
        elif op.unit == "cvu.reduction" and not op.attrs.get("keep", True):
            lin = row_index(self.g.tensors[op.inputs[0]].shape, p.r0, 0)[:-1]
        else:
            lin = row_index(shape, p.r0, p.c0)
        tok = self.dma(p.out, None, mem, access(bshape, lin), [p.done])
        self.writers.setdefault(out_t, []).append(tok)
        p.readers.append(tok)
        self._touch(p.tpb, tok)

    def load(self, tensor: str, bshape: tuple[int, ...], lin: Lin, tpb: int,
             slot: bool = True) -> tuple[SSAValue, SSAValue]:
        """A fresh HBSM buffer of ``bshape`` on ``tpb`` filled from memory through ``lin``."""
        mem = self.memory(tensor)
        buf = self.buffer("hbsm", tpb, bshape, self.g.tensors[tensor].dtype)
        deps = self.token_of(tensor) + self._bar(tpb)
        if slot and self.cur is not None:
            deps = deps + self._slot_deps(*self.cur)
        tok = self.dma(mem, access(bshape, lin), buf, None, deps, tpb)
        return buf, tok

    def weight(self, op, tensor: str, tpb: int, c0: int, c1: int, kind: str,
               k: tuple[int, int, int] | None = None, resident: bool = True, j: int = 0
               ) -> tuple[SSAValue, SSAValue]:
        """Columns [c0, c1) of a weight (``k``: (axis, start, size) of a reduction chunk) in the
        HBSM of ``tpb``; resident weights are loaded once per TPB and reused."""
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
                return self._broadcast_weight(op, tensor, tpbs, c0, c1, kind, k, j)
        shape = self.g.tensors[tensor].shape
        if kind == "bias":
            bshape, lin = (c1 - c0,), [((1,), c0)]
        else:  # the last dim is the output column
            nd = len(shape)
            bshape = list(shape[:-1]) + [c1 - c0]
            offs = [0] * (nd - 1) + [c0]
            if k is not None:
                bshape[k[0]] = k[2]
                offs[k[0]] = k[1]
            bshape = tuple(bshape)
            lin = ident(nd, tuple(offs))
        r = self.load(tensor, bshape, lin, tpb, slot=not resident)
        if resident:
            self.weights[key] = r
        return r

    def _broadcast_weight(self, op, tensor: str, tpbs: list[int], c0: int, c1: int, kind: str,
                          k, j: int) -> tuple[SSAValue, SSAValue]:
        """Columns [c0, c1) of a resident weight written into the HBSM of every TPB of ``tpbs`` by
        one DMA over the DRB (``tpb_mask``); the receiving buffers carry ``m100.bcast`` so that
        hbsm-allocate gives them one offset (a broadcast writes the same addresses everywhere)."""
        shape = self.g.tensors[tensor].shape
        if kind == "bias":
            bshape, lin = (c1 - c0,), [((1,), c0)]
        else:
            nd = len(shape)
            bl = list(shape[:-1]) + [c1 - c0]
            offs = [0] * (nd - 1) + [c0]
            if k is not None:
                bl[k[0]] = k[2]
                offs[k[0]] = k[1]
            bshape, lin = tuple(bl), ident(nd, tuple(offs))
        self.n_bcast = getattr(self, "n_bcast", 0) + 1
        gid = _int(self.n_bcast)
        dtype = self.g.tensors[tensor].dtype
        bufs = {}
        for t in tpbs:
            b = self.buffer("hbsm", t, bshape, dtype)
            b.owner.attributes["m100.bcast"] = gid
            bufs[t] = b
        mem = self.memory(tensor)
        deps = self.token_of(tensor) + [d for t in tpbs for d in self._bar(t)]
        mask = 0
        for t in tpbs:
            mask |= 1 << t
        t = self._take("dma", -1, tuple(tpbs))
        if t.tpb_mask != mask:
            raise AssertionError(f"emitter: broadcast to mask {mask}, plan task {t.id} {t.tpb_mask}")
        d = DmaOp(t.engine, {"src": (mem, access(bshape, lin)), "dst": (bufs[tpbs[0]], None)}, deps,
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
        prod = self.producers.get(tensor)
        if prod is not None and prod.name in seg_ops and prod.name in pieces:
            a0, a1 = rows
            k0, k1 = cols if cols is not None else (0, bshape[-1])
            over = [q for q in pieces[prod.name] if max(a0, q.r0) < min(a1, q.r1)
                    and max(k0, q.c0) < min(k1, q.c1)]
            if len(over) == 1 and over[0].tpb == tpb and (over[0].r0, over[0].r1) == (a0, a1) \
                    and (over[0].c0, over[0].c1) == (k0, k1) and \
                    tuple(over[0].out.type.dims) == tuple(bshape):  # type: ignore[attr-defined]
                return over[0].out, [over[0].done]  # same TPB, same box: read it in place
            buf = self.buffer("hbsm", tpb, bshape, self.g.tensors[tensor].dtype)
            toks = []
            for q in pieces[prod.name]:
                a, e = max(a0, q.r0), min(a1, q.r1)
                qc0, qc1 = max(k0, q.c0), min(k1, q.c1)
                if e <= a or qc1 <= qc0:
                    continue
                qe = q.out.type.dims  # type: ignore[attr-defined]
                box = (e - a, qe[1], qc1 - qc0)
                src_acc = access(box, ident(3, (a - q.r0, 0, qc0 - q.c0)))
                dst_acc = access(box, ident(3, (a - a0, 0, qc0 - (k0 if cols is not None else 0))))
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

    def _shared_load(self, op, tensor: str, rows: tuple[int, int], bshape: tuple[int, ...],
                     lin: Lin, tpb: int) -> tuple[SSAValue, list[SSAValue]]:
        """A whole-K input row tile that every column part / column tile of the row reads: loaded
        once per TPB, or sent once over the DRB to the TPBs the plan task names (``tpb_mask``;
        the receiving buffers share one ``m100.bcast`` id, hence one HBSM offset)."""
        cache = self.__dict__.setdefault("_act_cache", {})
        key = (op.name, tensor, tpb, rows)
        if key in cache:
            buf, tok = cache[key]
            return buf, [tok]
        t = self.plan.tasks[self._queue[-1]] if self._queue else None
        if t is None or not t.tpb_mask:
            buf, tok = self.load(tensor, bshape, lin, tpb)
            cache[key] = (buf, tok)
            return buf, [tok]
        tpbs = list(t.dst_tpbs)
        self._take("dma", -1, tuple(tpbs))
        self.n_bcast = getattr(self, "n_bcast", 0) + 1
        gid = _int(self.n_bcast)
        dtype = self.g.tensors[tensor].dtype
        bufs = {}
        for x in tpbs:
            b = self.buffer("hbsm", x, bshape, dtype)
            b.owner.attributes["m100.bcast"] = gid
            bufs[x] = b
        deps = self.token_of(tensor) + [d for x in tpbs for d in self._bar(x) + self._slot_deps(x, op.name)]
        d = DmaOp(t.engine, {"src": (self.memory(tensor), access(bshape, lin)),
                             "dst": (bufs[tpbs[0]], None)}, deps,
                  params={"tpb_mask": _int(t.tpb_mask)})
        self._emit(t, d)
        for x in tpbs:
            cache[(op.name, tensor, x, rows)] = (bufs[x], d.done)
        return bufs[tpb], [d.done]

    def pool_out_index(self, op, r0: int, c0: int = 0) -> Lin:
        a = op.attrs
        oh, _ = conv_out_hw(a)
        n0, h0 = divmod(r0, oh)
        # buffer iteration [rows, ow, c] (the row-standard piece layout)
        if a.get("layout") == "nchw":
            return [((0, 0, 0), n0), ((0, 0, 1), c0), ((1, 0, 0), h0), ((0, 1, 0), 0)]
        return [((0, 0, 0), n0), ((1, 0, 0), h0), ((0, 1, 0), 0), ((0, 0, 1), c0)]

    def piece(self, si, seg, st: StageCfg, op, b, j, tpb, r0, r1, c0, c1, pieces, seg_ops,
              plan=None) -> Piece:
        g = self.g
        lw = self.irg.lowering[op.name]
        out_t = g.tensors[op.outputs[0]]
        rows = r1 - r0
        self.cur = (tpb, op.name)
        back = self.out_readers.get((tpb, op.name), [])
        self.out_wait = list(back[-2]) if len(back) >= 2 else []
        cols = c1 - c0
        unit = Unit.of_op(op.unit).value
        if lw.kind == "matmul":
            a_t, w_t = op.inputs[0], op.inputs[1]
            k = op.attrs["k"]
            tk = plan.tk if plan is not None and plan.tk < k else k
            resident = plan is None or plan.weight_resident
            streamed = self._streamed(a_t, seg_ops, pieces)
            if streamed or tk == k:
                a_full, a_deps = self.act_in(si, seg, op, a_t, (r0, r1), (rows, 1, k),
                                             [((1, 0, 0), r0), ((0, 0, 1), 0)], tpb, pieces,
                                             seg_ops, b, shared=True)
            out = self.buffer("hbsm", tpb, (rows, 1, cols), out_t.dtype)
            chunks = list(range(0, k, tk))
            prev: SSAValue | None = None
            for ci, k0 in enumerate(chunks):
                kc = min(tk, k - k0)
                last = ci == len(chunks) - 1
                if tk == k:
                    a_slot, deps = (a_full, None), list(a_deps)
                elif streamed:
                    a_slot = (a_full, access((rows, kc), [((1, 0), 0), ((0, 0), 0), ((0, 1), k0)]))
                    deps = list(a_deps) if ci == 0 else []
                else:
                    abuf, at = self.load(a_t, (rows, kc), [((1, 0), r0), ((0, 1), k0)], tpb)
                    a_slot, deps = (abuf, None), [at]
                # a constant or a runtime B: resident -> once per TPB (broadcast per column
                # part), streamed -> per K chunk, as the plan says
                w_buf, wt = self.weight(op, w_t, tpb, c0, c1, "w",
                                        None if tk == k else (0, k0, kc), resident, j)
                deps.append(wt)
                slots = {"a": a_slot, "b": (w_buf, None), "c": (out, None)}
                params: dict[str, Attribute] = {"m": _int(rows),
                                                "n": _int(cols),
                                                "k": _int(kc)}
                if ci > 0 and prev is not None:
                    params["accumulate"] = UnitAttr()
                    deps.append(prev)
                if last:
                    if lw.bias:
                        bb, bt = self.weight(op, lw.bias, tpb, c0, c1, "bias", resident=resident, j=j)
                        slots["bias"] = (bb, None)
                        deps.append(bt)
                    if lw.act is not Act.NONE:
                        params["act"] = StringAttr(lw.act.name.lower())
                ins = MatmulOp(tpb, slots, deps + self._take_out_wait(), params=params)
                if not last:
                    self._emit(self._take(unit, tpb), ins)
                    self._computed(tpb, op.name, ins.done)
                    prev = ins.done
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
            if plan is not None and plan.tk < plan.k:
                ck = max(1, plan.tk // kwin)
            resident = plan is None or plan.weight_resident
            streamed = self._streamed(x_t, seg_ops, pieces)
            x_lin = [((0, 0, 0), n0), ((1, 0, 0), i0), ((0, 1, 0), 0), ((0, 0, 1), 0)]
            if streamed or ck == C:
                x_full, x_deps = self.act_in(si, seg, op, x_t, (n0 * H + i0, n0 * H + i1),
                                             (i1 - i0, W, C), x_lin, tpb, pieces, seg_ops, b,
                                             shared=True)
            out = self.buffer("hbsm", tpb, (rows, ow, cols), out_t.dtype)
            chunks = list(range(0, C, ck))
            prev = None
            for ci, k0 in enumerate(chunks):
                kc = min(ck, C - k0)
                last = ci == len(chunks) - 1
                if ck == C:
                    x_slot, deps = (x_full, None), list(x_deps)
                elif streamed:
                    x_slot = (x_full, access((i1 - i0, W, kc), ident(3, (0, 0, k0))))
                    deps = list(x_deps) if ci == 0 else []
                else:
                    xb, xt = self.load(x_t, (i1 - i0, W, kc),
                                       [((0, 0, 0), n0), ((1, 0, 0), i0), ((0, 1, 0), 0),
                                        ((0, 0, 1), k0)], tpb)
                    x_slot, deps = (xb, None), [xt]
                w_buf, wt = self.weight(op, w_t, tpb, c0, c1, "w",
                                        None if ck == C else (2, k0, kc), resident, j)
                deps.append(wt)
                slots = {"x": x_slot, "w": (w_buf, None), "y": (out, None)}
                params = {"n": _int(1), "h": _int(i1 - i0), "width": _int(W), "c": _int(kc),
                          "f": _int(cols), "kh": _int(a["kh"]), "kw": _int(a["kw"])}
                if (sh, sw) != (1, 1):
                    params["stride"] = i64_array([sh, sw])
                if (pt2, pl, pb2, pr) != (0, 0, 0, 0):
                    params["pad"] = i64_array([pt2, pl, pb2, pr])
                if (dh, dw) != (1, 1):
                    params["dilation"] = i64_array([dh, dw])
                if ci > 0 and prev is not None:
                    params["accumulate"] = UnitAttr()
                    deps.append(prev)
                if last:
                    if lw.bias:
                        bb, bt = self.weight(op, lw.bias, tpb, c0, c1, "bias", resident=resident, j=j)
                        slots["bias"] = (bb, None)
                        deps.append(bt)
                    if lw.act is not Act.NONE:
                        params["act"] = StringAttr(lw.act.name.lower())
                ins = Conv2dOp(tpb, slots, deps + self._take_out_wait(), params=params)
                if not last:
                    self._emit(self._take(unit, tpb), ins)
                    self._computed(tpb, op.name, ins.done)
                    prev = ins.done
        elif lw.kind == "cvu":
            oshape = out_t.shape
            _, E, _ = row_view(oshape)
            it = (rows, E, cols)
            out_lin = row_index(oshape, r0, c0)  # out tensor index of a piece iteration
            slots = {}
            in_shapes = []
            deps: list[SSAValue] = []
            for i, tname in enumerate(op.inputs):
                m = lw.in_maps[i]
                # compose: input index = M @ out_index, out_index = out_lin(d)
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
                ishape = tuple(it[d] if used[d] else 1 for d in range(3))
                tt = g.tensors[tname]
                if tt.kind == "weight" or not self._streamed(tname, seg_ops, pieces):
                    buf, tok = self.load(tname, ishape, lin, tpb)
                    tks = [tok]
                else:
                    buf, tks = self.act_in(si, seg, op, tname, (r0, r1), it, lin, tpb, pieces,
                                           seg_ops, b, (c0, c1))
                    ishape = it
                slots[f"in{i}"] = (buf, None)
                in_shapes.append(ishape)
                deps += tks
            out = self.buffer("hbsm", tpb, it, out_t.dtype)
            slots["out"] = (out, None)
            params = {"in_shapes": ArrayAttr([i64_array(s) for s in in_shapes]),
                      "out_shape": i64_array(it),
                      "stages": ArrayAttr([StageAttr.from_isa(s) for s in lw.stages])}
            ins = CvuPipelineOp(tpb, slots, deps + self._take_out_wait(), params=params)
        elif lw.kind == "reduce":
            x_t = op.inputs[0]
            ishape = g.tensors[x_t].shape
            _, E, C = row_view(ishape)
            it = (rows, E, C)
            xb, deps = self.act_in(si, seg, op, x_t, (r0, r1), it, row_index(ishape, r0, 0), tpb,
                                   pieces, seg_ops, b)
            oshape = (rows, E, 1)
            out = self.buffer("hbsm", tpb, oshape, out_t.dtype)
            params = {"in_shapes": ArrayAttr([i64_array(it)]), "out_shape": i64_array(oshape),
                      "stages": ArrayAttr([StageAttr.from_isa(x) for x in lw.stages])}
            ins = CvuPipelineOp(tpb, {"in0": (xb, None), "out": (out, None)},
                                deps + self._take_out_wait(), params=params)
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
            if self._streamed(x_t, seg_ops, pieces) and a.get("layout") != "nchw":
                xb, deps = self.act_in(si, seg, op, x_t, (n0 * H + i0, n0 * H + i1),
                                       (i1 - i0, W, cols), lin, tpb, pieces, seg_ops, b, (c0, c1))
            else:
                xb, tok = self.load(x_t, ishape, lin, tpb)
                deps = [tok]
            ip = (a["kh"], a["kw"], sh, sw, pt2, pl, pb2, pr)
            if lw.params["kind"] == "max":
                stages = [Stage(CvuOp.MAXPOOL, (Ref(RefKind.INPUT, 0),), iparams=ip)]
            else:
                stages = [Stage(CvuOp.AVGPOOL, (Ref(RefKind.INPUT, 0),), iparams=ip + (1,)),
                          Stage(CvuOp.MUL, (Ref(RefKind.STAGE, 0),
                                            Ref(RefKind.IMM, 0, float(a["kh"] * a["kw"]))))]
            oshape = (1, rows, ow, cols)
            out = self.buffer("hbsm", tpb, (rows, ow, cols), out_t.dtype)
            params = {"in_shapes": ArrayAttr([i64_array(ishape)]), "out_shape": i64_array(oshape),
                      "stages": ArrayAttr([StageAttr.from_isa(s) for s in stages])}
            ins = CvuPipelineOp(tpb, {"in0": (xb, None), "out": (out, None)}, deps + self._take_out_wait(), params=params)
        else:
            raise ScheduleError(f"op '{op.name}' ({op.unit}): no lowering for '{lw.kind}'")
        # the output slot two pieces back must have been read (stored / copied) before reuse
        back = self.out_readers.setdefault((tpb, op.name), [])
        self._emit(self._take(unit, tpb), ins)
        self._computed(tpb, op.name, ins.done)
        self.cur = None
        pc = Piece(op.name, b, j, tpb, r0, r1, c0, c1, out, ins.done)
        back.append(pc.readers)
        return pc

    def _streamed(self, tensor: str, seg_ops: set[str], pieces) -> bool:
        prod = self.producers.get(tensor)
        return prod is not None and prod.name in seg_ops and prod.name in pieces

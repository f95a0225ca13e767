"""The plan builder's operand transfers: DMA loads, DRB broadcasts, resident and streamed weights,
shared K chunks of a lockstep group and DTDU copies from producer pieces (an activation read in
place when one piece on the TPB has exactly the box). One task per instruction the emitter creates
(:mod:`.emit_units` translates them 1:1)."""

from __future__ import annotations

from . import row_buckets
from .graph import Op, ScheduleError, dtype_bytes
from .keep import row_root
from .list_schedule import ListScheduler
from .plan import PlanPiece
from .segment import StageCfg, memory_of


def _overlap_bytes(over, a0: int, a1: int, k0: int, k1: int, dt: int):
    """(piece, bytes) of each producer piece's overlap with rows [a0, a1) x columns [k0, k1)."""
    for q in over:
        rows = min(a1, q.r1) - max(a0, q.r0)
        cols = min(k1, q.c1) - max(k0, q.c0)
        yield q, float(rows * q.out_dims[1] * cols * dt)


class Transfers(ListScheduler):
    """Operand transfers of the piece being built (``self.piece``)."""

    def _streamed(self, tensor: str) -> bool:
        prod = self.s.producers.get(tensor)
        if prod is not None and prod.name in self.g.view_ops and self.tl.kept:
            return self._kept_root(tensor) is not None
        return prod is not None and prod.name in self.by_op and (
            prod.name in self.seg_ops or prod.name in self.tl.kept)

    def _kept_root(self, tensor: str) -> str | None:
        """The kept tensor whose bytes ``tensor`` is as whole rows (``keep.row_root``: RoPE's
        ``[T, n, hd]`` view of a kept projection), else None."""
        root = row_root(self.g, tensor)
        prod = self.s.producers.get(root) if root is not None else None
        if prod is None or prod.name not in self.tl.kept or prod.name not in self.by_op or \
                prod.name in self.seg_ops:
            return None
        return root

    def _load(self, op: Op, tensor: str, tpb: int, nbytes: float, role: str,
              slot: bool = True, box: tuple[int, int, int, int] | None = None) -> int:
        """A DMA from memory into a fresh HBSM buffer of ``tpb`` (``box``: rows x cols of a 2-D
        tensor, which waits only for the stores that wrote it when it can: ``_box_deps``)."""
        weight = self.g.tensors[tensor].kind == "weight"
        src = "ddr" if weight else memory_of(self.cm, self.g, tensor)
        mem = self._box_deps(tensor, box) if box is not None else None
        if mem is None:  # :meth:`_mem_deps`
            deps = [self.written[tensor]] if tensor in self.written and not self.isolated else []
        else:
            deps = list(mem)
        p = self.piece
        # :meth:`_wbar` (a constant weight's prefetch or tail barrier) only for weights, the
        # others' barrier and :meth:`_slot_deps` written out (the same deps in the same order)
        if self._pf_ok(tensor, role):
            deps.extend(self._wbar(tpb, tensor, role))
        elif tpb in self.barrier:
            deps.append(self.barrier[tpb])
        if slot and self.cur:
            h = self.hist.get(self.cur)
            if h is not None and len(h) >= 2:
                deps.append(h[-2])
        # positional fields (``PlanTask``'s order, :data:`.plan.TASK_FIELDS`): keyword arguments
        # cost ~2 us more per task
        return self.task("dma-in", "dma", -1, op.name, tensor, nbytes,
                         self.cm.dma_cycles(nbytes, src), deps, p.segment, p.band, p.col,
                         (tpb,), src, "hbsm", -1, 0, role)

    def _shared_chunk(self, op: Op, tensor: str, key: tuple, tpbs: tuple[int, ...], tpb: int,
                      nbytes: float, role: str) -> int:
        """One K chunk of a lockstep group that several of its TPBs read (``tpbs``): one DRB
        broadcast into a fresh buffer of each, made by the first piece that needs it (the others
        of the group read it); a chunk only ``tpb`` reads is one load."""
        k = (op.name, tensor, key, tpb)
        if k not in self.gcache:
            if len(tpbs) > 1:
                t = self._broadcast(op, tensor, tpbs, nbytes, role)
            else:
                t = self._load(op, tensor, tpb, nbytes, role)
            for x in tpbs or (tpb,):
                self.gcache[(op.name, tensor, key, x)] = t
        return self.gcache[k]

    def _broadcast(self, op: Op, tensor: str, tpbs: tuple[int, ...], nbytes: float,
                   role: str = "act") -> int:
        """One DRB broadcast of an input tile into a fresh buffer of every TPB of ``tpbs``; it
        waits for the slot it refills on each of them (double buffering)."""
        src = memory_of(self.cm, self.g, tensor)
        deps = self._mem_deps(tensor)
        # per TPB :meth:`_wbar` (weights only: the weight test once) or the TPB's barrier, and
        # the slot it refills, written out
        hist, barrier, name = self.hist, self.barrier, op.name
        weight = self._pf_ok(tensor, role)
        for x in tpbs:
            if weight:
                deps.extend(self._wbar(x, tensor, role))
            elif x in barrier:
                deps.append(barrier[x])
            h = hist.get((x, name))
            if h is not None and len(h) >= 2:
                deps.append(h[-2])
        return self.task("dma-in", "dma", -1, op.name, tensor, nbytes,
                         self.cm.dma_cycles(nbytes, src, broadcast=True), deps,
                         self.piece.segment, self.piece.band, -1, tpbs, src, "hbsm", -1, 0, role)

    def _weight(self, st: StageCfg, op: Op, tensor: str, tpb: int, c0: int, c1: int, j: int,
                k0: int | None, nbytes: float, resident: bool, role: str = "w") -> int:
        """Columns [c0, c1) of a weight or runtime B operand (K chunk at ``k0``) in the HBSM of
        ``tpb``: resident ones are loaded once per TPB -- by one DRB broadcast to every TPB of the column part
        that computes a band -- streamed ones per instruction."""
        key = (op.name, tpb, c0, c1, tensor, k0)
        if key in self.wcache:
            return self.wcache[key]
        if resident and st.gr > 1:
            rows = sorted({st.row_of(b) for b in range(st.bands)})
            tpbs = tuple(st.tpbs[r * st.gc + j] for r in rows)
            if tpb in tpbs and len(tpbs) > 1:
                deps = self._mem_deps(tensor) + [d for t in tpbs
                                                 for d in self._wbar(t, tensor, role)]
                src = "ddr" if self.g.tensors[tensor].kind == "weight" else \
                    memory_of(self.cm, self.g, tensor)
                t = self.task("dma-in", "dma", -1, op.name, tensor, nbytes,
                              self.cm.dma_cycles(nbytes, src, broadcast=True), deps,
                              self.piece.segment, self.piece.band, j, tpbs, src, "hbsm", -1, 0,
                              role)
                for x in tpbs:
                    self.wcache[(op.name, x, c0, c1, tensor, k0)] = t
                return t
        t = self._load(op, tensor, tpb, nbytes, role, slot=not resident)
        if resident:
            self.wcache[key] = t
        return t

    def _act_in(self, si: int, op: Op, tensor: str, rows: tuple[int, int],
                bshape: tuple[int, int, int], cols: tuple[int, int] | None, tpb: int,
                nbytes: float, row_tpbs: tuple[int, ...] = ()) -> list[int]:
        """Rows [rows) of ``tensor`` on ``tpb``: copies from the producer pieces of this segment
        (read in place when one piece on this TPB has exactly that box), or one load. With
        ``row_tpbs`` (a whole-K row tile, the same for every column part and column tile) the load
        is shared: one DRB broadcast to ``row_tpbs`` (or one load) that all those pieces read."""
        prod = self.s.producers.get(tensor)
        if prod is not None and prod.name in self.g.view_ops and self.tl.kept:
            root = self._kept_root(tensor)
            if root is not None:  # whole rows of the kept root: its rows x all its columns
                C = self.g.tensors[root].shape[-1]
                if (cols is not None and cols != (0, bshape[-1])) or \
                        bshape[1] * bshape[2] != C:
                    raise ScheduleError(f"internal: '{tensor}' read from the kept '{root}' "
                                        f"in part of its rows ({bshape}, columns {cols})")
                tensor, prod, bshape, cols = root, self.s.producers[root], (bshape[0], 1, C), \
                    (0, C)
        if not (prod is not None and prod.name in self.by_op and (
                prod.name in self.seg_ops or prod.name in self.tl.kept)):
            if not row_tpbs:
                return [self._load(op, tensor, tpb, nbytes, "act")]
            key = (op.name, tensor, tpb, rows)
            if key not in self.acache:
                if len(row_tpbs) > 1:
                    t = self._broadcast(op, tensor, row_tpbs, nbytes)
                else:
                    t = self._load(op, tensor, tpb, nbytes, "act")
                for x in row_tpbs:
                    self.acache[(op.name, tensor, x, rows)] = t
            t = self.acache[key]
            return list(t) if type(t) is tuple else [t]  # (the chunks of :meth:`_band_chunk`)
        a0, a1 = rows
        k0, k1 = cols if cols is not None else (0, bshape[-1])
        over, nbs = self._over(prod.name, tensor, a0, a1, k0, k1)
        if len(over) == 1 and over[0].tpb == tpb and (over[0].r0, over[0].r1) == (a0, a1) and \
                (over[0].c0, over[0].c1) == (k0, k1) and over[0].out_dims == tuple(bshape):
            return [over[0].compute]  # same TPB, same box: read in place
        out = []
        self.fill_gap = prod.name not in self.seg_ops
        # the slot and barrier waits are the same for every copy of this operand (adding a
        # copy changes neither the piece's slot history nor the TPB's barrier)
        waits = self._slot_deps() + self._bar(tpb)
        band, mesh, readers, dst = self.piece.band, self.cm.mesh_cycles, self.readers, (tpb,)
        task, pname = self.task, prod.name
        touch = None if self.search_only else self._touch  # a search build touches nothing
        for q, nb in zip(over, nbs):  # one copy per producer piece
            c = task("copy", "dtdu", q.tpb, pname, tensor, nb, mesh(nb, q.tpb, tpb),
                     [q.compute] + waits, si, band, q.col, dst, "hbsm", "hbsm", -1, 0, "act")
            if q.segment == si:  # a kept piece of an earlier segment: not recorded (readers)
                readers[q.compute].append(c)
            if touch is not None:
                touch(tpb, c)
                touch(q.tpb, c)
            out.append(c)
        self.fill_gap = False
        if not out:
            raise ScheduleError(f"internal: no producer piece of '{tensor}' covers rows {rows}")
        return out

    def _band_chunk(self, op: Op, tensor: str, rows: tuple[int, int], k0: int, tpb: int,
                    row_tpbs: tuple[int, ...], nbytes: float) -> int:
        """Columns [k0, k0 + chunk) of the whole-K rows [rows) of ``tensor``: one DRB broadcast
        to ``row_tpbs`` (the row's column parts) into the band buffer, made by the first piece
        that needs it (``kinds.tcu.first_k_chunk``); the band (what :meth:`_act_in` gives the
        later pieces of those TPBs) is all its chunks."""
        key = (op.name, tensor, tpb, rows, k0)
        if key not in self.acache:
            t = self._broadcast(op, tensor, row_tpbs, nbytes)
            for x in row_tpbs:
                self.acache[(op.name, tensor, x, rows, k0)] = t
                self.acache[(op.name, tensor, x, rows)] = \
                    self.acache.get((op.name, tensor, x, rows), ()) + (t,)
        return self.acache[key]

    def _over(self, pname: str, tensor: str, a0: int, a1: int, k0: int, k1: int
              ) -> tuple[list[PlanPiece], list[float]]:
        """The pieces of ``pname`` built so far that overlap rows [a0, a1) x columns [k0, k1) of
        its output ``tensor``, in build order, and the bytes of each overlap
        (:func:`_overlap_bytes`). Memoized per segment (``ocache``) while ``by_op[pname]`` has
        the same length: its pieces are only appended, so the answer is the same (the column
        parts and column tiles of a row tile all ask for the same rows: ~37 % of the calls on
        ResNet-18 224)."""
        n = len(self.by_op[pname])
        key = (pname, tensor, a0, a1, k0, k1)
        hit = self.ocache.get(key)
        if hit is not None and hit[0] == n:
            return hit[1], hit[2]
        # ``max(a0, q.r0) < min(a1, q.r1) and max(k0, q.c0) < min(k1, q.c1)`` by comparisons
        over = [q for q in self._pieces_over(pname, a0, a1)
                if a0 < q.r1 and q.r0 < a1 and a0 < a1 and q.r0 < q.r1 and
                k0 < q.c1 and q.c0 < k1 and k0 < k1 and q.c0 < q.c1]
        dt = dtype_bytes(self.g.tensors[tensor].dtype)
        nbs = [nb for _, nb in _overlap_bytes(over, a0, a1, k0, k1, dt)]
        self.ocache[key] = (n, over, nbs)
        return over, nbs

    def _kept_chunk(self, si: int, op: Op, tensor: str, key: tuple, rows: tuple[int, int],
                    bshape: tuple[int, int, int], cols: tuple[int, int], tpbs: tuple[int, ...],
                    tpb: int, nbytes: float) -> list[int]:
        """One K chunk (rows x channels ``cols``) of a kept activation that the TPBs ``tpbs`` of a
        lockstep group all read (``PlanPiece.a_share``: the column parts of one K part): per
        producer piece that holds part of it, one DTDU broadcast from its HBSM into a fresh
        buffer of every TPB of ``tpbs`` (one ``dtdu.broadcast`` over the DRB instead of one
        mesh copy per column part, each sender's DTDU serving them one after the other), made
        by the first piece that needs it; the others read it. Read by ``tpb`` alone: copies."""
        if len(tpbs) <= 1:
            return self._act_in(si, op, tensor, rows, bshape, cols, tpb, nbytes)
        k = (op.name, tensor, key, tpb)
        if k in self.gcache:
            return self.gcache[k]
        prod = self.s.producers[tensor]
        a0, a1 = rows
        k0, k1 = cols
        over, nbs = self._over(prod.name, tensor, a0, a1, k0, k1)
        if not over:
            raise ScheduleError(f"internal: no producer piece of '{tensor}' covers rows {rows}")
        out = []
        self.fill_gap = prod.name not in self.seg_ops
        # per receiving TPB its barrier and the slot it refills: the same for every producer
        # piece's broadcast (adding a copy changes neither the pieces' slot histories nor the
        # TPBs' barriers)
        waits: list[int] = []
        hist, barrier = self.hist, self.barrier
        for x in tpbs:
            if x in barrier:
                waits.append(barrier[x])
            h = hist.get((x, op.name))
            if h is not None and len(h) >= 2:
                waits.append(h[-2])
        for q, nb in zip(over, nbs):
            c = self.task("copy", "dtdu", q.tpb, prod.name, tensor, nb,
                          self.cm.dtdu_broadcast_cycles(nb, q.tpb, tpbs), [q.compute] + waits,
                          si, self.piece.band, q.col, tpbs, "hbsm", "hbsm", -1, 0, "act")
            if q.segment == si:  # a kept piece of an earlier segment: not recorded (readers)
                self.readers[q.compute].append(c)
            for x in tpbs:  # (``_touch`` of one task on one TPB twice: the same state)
                self._touch(x, c)
            if q.tpb not in tpbs:
                self._touch(q.tpb, c)
            out.append(c)
        self.fill_gap = False
        for x in tpbs:
            self.gcache[(op.name, tensor, key, x)] = out
        return out

    def _pieces_over(self, op: str, a0: int, a1: int) -> list[PlanPiece]:
        """The pieces of ``op`` built so far (``by_op``) that may overlap rows [a0, a1), in build
        order: a row-bucket index over ``by_op[op]``, extended with the pieces added since the
        last call (a superset: the caller tests the exact overlap)."""
        qs = self.by_op[op]
        ix = self.row_index.get(op)
        if ix is None:
            ix = self.row_index[op] = row_buckets.new_index(qs)
        if ix[0] < len(qs):
            if type(ix) is tuple:  # shared with a checkpoint (``resume.copy_state``): copied
                ix = self.row_index[op] = [ix[0], ix[1],  # before it grows
                                           {bk: list(v) for bk, v in ix[2].items()}]
            row_buckets.grow(ix, qs)
        return row_buckets.over(ix, qs, a0, a1)

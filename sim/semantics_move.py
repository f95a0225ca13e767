"""Data movement and CSU routine semantics: DTDU copy / fill / broadcast, DMA (bytes, optionally
broadcast over a TPB mask), CSU gather / scatter / topk / argmax / memcpy."""

from __future__ import annotations

import math

import numpy as np

from m100.targets.m100 import numerics
from m100.targets.m100.isa import (Broadcast, Copy, CsuCall, Dma, Fill, Routine, Space,
                                   Walk, tpbs_of)

from . import twu
from .memory import _SAME
from .semantics_base import Access, Exec, PendingWrite, SimError, _block, _tpb_of, walk_offsets


# ----------------------------------------------------------------------------------------------
# DTDU, DMA
# ----------------------------------------------------------------------------------------------
def _chunk(w: Walk, tpb: int, blocks: int, b: int) -> Access:
    return _block(w, tpb, blocks, b)


def _view_geo(levels: tuple, sz: int) -> tuple:
    """(elements, injective, lowest byte, end byte, first byte, counts, byte strides) of a box
    walk of these levels and ``sz``-byte elements, relative to its base (``twu.box``,
    ``Walk.injective``, ``Walk.num_elements``: functions of the levels alone)."""
    lo, hi, counts, steps = twu._box(levels)
    # (Walk.num_elements is the product of the levels' counts; Walk.injective's own function
    # reads the levels only: called on them without a probe walk, whose two cached properties
    # took a lock each -- ~6 of ~16 us a geometry, 1 261 geometries in a first ResNet-50 run)
    return (math.prod([lv.count for lv in levels]), _INJECTIVE(_Levels(levels)), lo * sz,
            (hi + 1) * sz, sum(lv.initial for lv in levels) * sz, counts,
            tuple(st * sz for st in steps))


class _Levels:
    """What ``Walk.injective``'s function reads of a walk: its levels."""
    __slots__ = ("levels",)

    def __init__(self, levels: tuple):
        self.levels = levels


_INJECTIVE = Walk.injective.func  # (functools.cached_property's function)


class _Values:
    """The pending writes of a same-type copy (:meth:`CopyExec._views`): ``data`` (flat,
    walk order) into each destination view of ``dsts``."""
    __slots__ = ("dsts", "data")

    def __init__(self, dsts, data):
        self.dsts, self.data = dsts, data


#: What :meth:`CopyExec.run_free` returns when it wrote the destinations itself: nothing left
#: for ``apply``.
_WRITTEN = _Values((), None)

#: :func:`_aligned` by its arguments (a few hundred geometries per program).
_ALIGN: dict = {}


def _aligned(sc: tuple, ss: tuple, dc: tuple, ds: tuple, sz: int) -> tuple | None:
    """(counts, source strides, destination strides): one shape in which both box views --
    source counts ``sc`` / byte strides ``ss``, destination ``dc`` / ``ds``, ``sz``-byte
    elements, the same element count -- are views (numpy's reshape without a copy), so that
    element ``i`` of either in C order is element ``i`` of its walk; None when neither takes the
    other's shape without a copy."""
    key = (sc, ss, dc, ds, sz)
    got = _ALIGN.get(key, False)
    if got is False:
        if len(_ALIGN) >= 1 << 14:  # (a process running many programs)
            _ALIGN.clear()
        got = _ALIGN[key] = _align(sc, ss, dc, ds, sz)
    return got


def _align(sc: tuple, ss: tuple, dc: tuple, ds: tuple, sz: int) -> tuple | None:
    if sc == dc:
        return sc, ss, ds
    # stride-only arrays over one element (never read: a reshape only looks at the strides)
    one = np.zeros(1, dtype=np.dtype((np.void, sz)))
    src = np.lib.stride_tricks.as_strided(one, sc, ss)
    dst = np.lib.stride_tricks.as_strided(one, dc, ds)
    try:
        return sc, ss, np.reshape(dst, sc, copy=False).strides
    except ValueError:
        pass
    try:
        return dc, np.reshape(src, dc, copy=False).strides, ds
    except ValueError:
        return None


def _fusion(parts: list, sz: int) -> tuple | None:
    """How :meth:`CopyExec.run_free` writes each destination of a view spec's ``parts``
    (source first) straight from the source: per destination :func:`_aligned`'s (counts,
    source strides, destination strides); None when a destination's bytes may meet the
    source's in one space (the copy must read all before it writes) or a pair has no common
    shape (``run`` / ``apply`` then, as always). Spaces as ``Memory.space`` keys them: an
    HBSM per TPB, every other space one."""
    ssp, stpb, slo, send, _, sc, ss = parts[0]
    plan = []
    pdc = pds = al = None  # (a broadcast's destinations share one geometry: its tuples)
    for sp, tpb, lo, end, _, dc, ds in parts[1:]:
        if sp == ssp and (tpb == stpb or sp is not Space.HBSM) and lo < send and slo < end:
            return None
        if dc is not pdc or ds is not pds:
            al = (sc, ss, ds) if sc == dc else _aligned(sc, ss, dc, ds, sz)
            if al is None:
                return None
            pdc, pds = dc, ds
        plan.append(al)
    return tuple(plan)


def _tpb_range(ws: list) -> tuple | None:
    """(first TPB, step, count) when the accesses' TPBs are ``t0, t0 + step, ...`` (step >= 1),
    else None."""
    t0, step = ws[0].tpb, ws[1].tpb - ws[0].tpb
    if step < 1 or [a.tpb for a in ws] != list(range(t0, t0 + step * len(ws), step)):
        return None
    return t0, step, len(ws)


#: :func:`_tpbs` by mask (a program has a few hundred masks).
_TPBS: dict = {}


def _tpbs(mask: int) -> tuple:
    """``tpbs_of(mask)`` as a tuple, kept per mask: a broadcast's or DMA's ``writes`` list one
    access per TPB of its mask, and ``tpbs_of`` tests every bit up to the highest (~2.7 us for a
    56-TPB mask; 4 574 calls in a first functional ResNet-50 run, ~0.012 CPU-s)."""
    got = _TPBS.get(mask)
    if got is None:
        if len(_TPBS) >= 1 << 14:  # (a process running many programs)
            _TPBS.clear()
        got = _TPBS[mask] = tuple(tpbs_of(mask))
    return got


class CopyExec(Exec):
    inst: Copy

    def reads(self, b):
        return [_chunk(self.inst.src, self.inst.tpb, self.blocks, b)]

    def writes(self, b):
        d = self.inst.dst
        return [_chunk(d, d.tpb, self.blocks, b)]

    def _view_spec(self, b: int, reads=None, writes=None) -> tuple | None:
        """Block ``b`` as views of the memory, when its source and destinations are affine boxes
        of one element type whose values are their bytes (``memory._SAME``), every destination
        injective: (value type, [(space, TPB, lowest byte, end byte, first byte, counts, byte
        strides)] source first); else None (the general path). A function of the (immutable)
        instruction and ``b``, kept on it per :data:`~m100.sim.twu.STRIDED`. ``reads`` /
        ``writes``: ``self.reads(b)`` / ``self.writes(b)`` when the caller has them.

        ``read_walk`` reads such a source as a copy of its box view (or a view of its bytes),
        ``write_walk`` stores values of the same type into the box view without a conversion:
        the view copy writes exactly the values the general path writes."""
        strided = twu.STRIDED
        got = self.inst.__dict__.get("_sim_views")
        if got is None or got[0] is not strided:
            got = (strided, {})
            object.__setattr__(self.inst, "_sim_views", got)
        spec = got[1].get(b, False)
        if spec is False:
            spec = got[1][b] = self._make_view_spec(b, reads, writes) if strided else None
        return spec

    def _make_view_spec(self, b: int, reads=None, writes=None) -> tuple | None:
        r = (self.reads(b) if reads is None else reads)[0]
        ws = self.writes(b) if writes is None else writes
        dt = r.walk.dtype
        vt = _SAME.get(dt)
        if vt is None or r.offsets is not None:
            return None
        sz = vt.itemsize
        geo: dict = {}  # per walk object (a broadcast's destinations share one)

        def geo_of(w: Walk):
            g = geo.get(id(w))
            if g is None:
                # (elements, injective, lowest byte, end byte, first byte, counts, byte
                # strides) relative to the base: a function of the levels and sz alone
                n, inj, lo, end, first, counts, strides = twu.per_levels("view", w.levels,
                                                                         _view_geo, sz)
                base = w.base
                g = geo[id(w)] = (n, inj, (base + lo, base + end, base + first, counts, strides))
            return g

        n = geo_of(r.walk)[0]
        if not n:
            return None
        out = [(r.walk.space, r.tpb) + geo_of(r.walk)[2]]
        pw = None  # (a broadcast's destinations: one walk, several TPBs)
        walks = 0
        for a in ws:
            w = a.walk
            if a.offsets is not None:
                return None
            if w is not pw:
                if w.dtype is not dt:
                    return None
                wn, inj, g = geo_of(w)
                if not inj or wn != n:
                    return None
                pw, wsp = w, w.space
                walks += 1
            out.append((wsp, a.tpb) + g)
        plan = _fusion(out, sz)
        return vt, out, plan, _tpb_range(ws) if plan is not None and walks == 1 \
            and wsp is Space.HBSM and len(ws) > 1 else None

    def _views(self, b: int) -> list[np.ndarray] | None:
        """The views of :meth:`_view_spec` in this run's memory (source first); None when a
        space is not mapped whole or an access is outside it (the general path then runs, and
        names the error)."""
        spec = self._view_spec(b) if self.mem is not None else None
        if spec is None:
            return None
        vt, parts = spec[0], spec[1]
        views = []
        space_of = self.mem.space
        for sp, tpb, lo, end, first, counts, strides in parts:
            space = space_of(sp, tpb)
            if not space.whole or lo < 0 or end > space.size:
                return None
            # (shape, dtype, buffer, offset, strides positionally: ndarray's keyword
            # parsing cost more than the view itself)
            views.append(np.ndarray(counts, vt, space.buf, first, strides))
        return views

    def run(self, b):
        views = self._views(b)
        if views is not None:
            return _Values(views[1:], views[0].flatten())
        v = self.read(self.reads(b)[0])
        return [PendingWrite(a, v) for a in self.writes(b)]

    def run_free(self, b):
        """``run(b)`` and its ``apply`` at once, for a schedule no other block's access meets
        between the two (``Exec.run_free``): each destination view is assigned from the source
        view (one copy, not the source's flat copy and then the stores), in one shape both take
        without a copy (:func:`_fusion`) -- element ``i`` of the walks to element ``i``, the
        same stores of the same values as ``apply`` of ``run``'s values. Where the spec has no
        such plan (a destination meets the source, no common shape, no views): ``run``."""
        spec = self._view_spec(b) if self.mem is not None else None
        plan = spec[2] if spec is not None else None
        if plan is None:
            return self.run(b)
        vt, parts, _, tpbs = spec
        space_of = self.mem.space
        if tpbs is not None:  # every destination one walk in HBSMs of a TPB range
            group = self.mem.group
            t0, step, k = tpbs
            sp, stpb, slo, send, sfirst, _, _ = parts[0]
            _, _, lo, end, first, _, _ = parts[1]
            if group and lo >= 0 and end <= group.size and t0 + step * (k - 1) < group.count:
                space = space_of(sp, stpb)
                if space.whole and slo >= 0 and send <= space.size:
                    counts, ss, ds = plan[0]
                    # the destinations as one view with a TPB axis (HbsmGroup), assigned from
                    # the source broadcast over it: the stores of the loop below, at once
                    np.ndarray((k,) + counts, vt, group.buf, t0 * group.size + first,
                               (step * group.size,) + ds)[...] = \
                        np.ndarray(counts, vt, space.buf, sfirst, ss)
                    return _WRITTEN
        bufs = []
        for sp, tpb, lo, end, _, _, _ in parts:
            space = space_of(sp, tpb)
            if not space.whole or lo < 0 or end > space.size:
                return self.run(b)  # (the general path names the error)
            bufs.append(space.buf)
        sbuf, sfirst = bufs[0], parts[0][4]
        src = pal = None
        for al, buf, part in zip(plan, bufs[1:], parts[1:]):
            counts, ss, ds = al
            if al is not pal:  # (a broadcast's destinations share one plan entry: one view)
                src, pal = np.ndarray(counts, vt, sbuf, sfirst, ss), al
            # (shape, dtype, buffer, offset, strides positionally, as _views)
            np.ndarray(counts, vt, buf, part[4], ds)[...] = src
        return _WRITTEN

    def apply(self, writes):
        if writes.__class__ is _Values:
            data = writes.data
            for view in writes.dsts:
                view[...] = data.reshape(view.shape)
            return
        super().apply(writes)


class FillExec(Exec):
    inst: Fill

    def reads(self, b):
        return []

    def writes(self, b):
        return [_chunk(self.inst.dst, self.inst.tpb, self.blocks, b)]

    def run(self, b):
        a = self.writes(b)[0]
        n = a.size
        return [PendingWrite(a, np.full(n, self.inst.value, dtype=np.float64))]


class BroadcastExec(CopyExec):
    inst: Broadcast

    def writes(self, b):
        d = self.inst.dst
        a = _chunk(d, d.tpb, self.blocks, b)  # the same chunk of the walk in every TPB
        return [Access(a.walk, t, a.offsets) for t in _tpbs(self.inst.tpb_mask)]


class DmaExec(CopyExec):
    inst: Dma

    def reads(self, b):
        s = self.inst.src
        return [_chunk(s, _tpb_of(s), self.blocks, b)]

    def writes(self, b):
        i = self.inst
        d = i.dst
        if i.tpb_mask:  # the same chunk of the walk in every TPB
            a = _chunk(d, _tpb_of(d), self.blocks, b)
            return [Access(a.walk, t, a.offsets) for t in _tpbs(i.tpb_mask)]
        return [_chunk(d, _tpb_of(d), self.blocks, b)]
# ----------------------------------------------------------------------------------------------
# CSU routines
# ----------------------------------------------------------------------------------------------
class CsuExec(Exec):
    inst: CsuCall

    def _acc(self, k: int, offsets=None) -> Access:
        w = self.inst.operands[k]
        return Access(w, _tpb_of(w), offsets)

    def _indices(self, k: int, limit: int) -> np.ndarray:
        idx = self.read(self._acc(k)).astype(np.int64)
        bad = (idx < 0) | (idx >= limit)
        if bad.any():
            j = int(np.argmax(bad))
            raise SimError(f"csu.call {self.inst.routine.name.lower()} on TPB {self.inst.tpb}: "
                           f"index {int(idx[j])} at position {j} is outside [0, {limit})")
        return idx

    def _rows_of(self, k: int, idx: np.ndarray, d: int) -> Access:
        off = walk_offsets(self.inst.operands[k]).reshape(-1, d)[idx].reshape(-1)
        return Access(self.inst.operands[k], _tpb_of(self.inst.operands[k]), off)

    def _io(self) -> tuple[list[Access], list[Access]]:
        i, p = self.inst, self.inst.params
        r = i.routine
        if r is Routine.GATHER:
            v, d, n = p
            idx = self._indices(1, v) if self.mem is not None else np.zeros(n, np.int64)
            return [self._rows_of(0, idx, d), self._acc(1)], [self._acc(2)]
        if r is Routine.SCATTER:
            v, d, n = p
            idx = self._indices(1, v) if self.mem is not None else np.zeros(n, np.int64)
            return [self._acc(0), self._acc(1)], [self._rows_of(2, np.unique(idx), d)]
        if r is Routine.TOPK:
            return [self._acc(0)], [self._acc(1), self._acc(2)]
        return [self._acc(0)], [self._acc(1)]

    def reads(self, b):
        return self._io()[0]

    def writes(self, b):
        return self._io()[1]

    def run(self, b):
        i, p = self.inst, self.inst.params
        r = i.routine
        if r is Routine.GATHER:
            v, d, n = p
            idx = self._indices(1, v)
            table = self.read(self._acc(0)).reshape(v, d)
            return [PendingWrite(self._acc(2), table[idx])]
        if r is Routine.SCATTER:
            v, d, n = p
            idx = self._indices(1, v)
            upd = self.read(self._acc(0)).reshape(n, d)
            # duplicates: the last update of a row wins
            rev_u, rev_first = np.unique(idx[::-1], return_index=True)
            last = n - 1 - rev_first
            return [PendingWrite(self._rows_of(2, rev_u, d), upd[last])]
        if r is Routine.TOPK:
            rr, ln, k = p[:3]
            largest = p[3] if len(p) > 3 else 1
            x = self.read(self._acc(0)).astype(np.float64).reshape(rr, ln)
            key = -x if largest else x
            order = np.argsort(key, axis=1, kind="stable")[:, :k]
            vals = np.take_along_axis(x, order, axis=1)
            return [PendingWrite(self._acc(1), vals), PendingWrite(self._acc(2), order)]
        if r is Routine.ARGMAX:
            rr, ln = p[:2]
            largest = p[2] if len(p) > 2 else 1
            last = len(p) > 3 and p[3] != 0
            x = self.read(self._acc(0)).astype(np.float64).reshape(rr, ln)
            key = x if largest else -x
            if last:  # the last extreme: the first one of the reversed row
                return [PendingWrite(self._acc(1), ln - 1 - np.argmax(key[:, ::-1], axis=1))]
            return [PendingWrite(self._acc(1), np.argmax(key, axis=1))]
        src = self.read(self._acc(0))  # MEMCPY (GSDU): converts like dtdu.copy
        return [PendingWrite(self._acc(1), src)]

    def byte_count(self) -> int:
        return sum(numerics.byte_size(w.dtype, w.num_elements) for w in self.inst.operands)

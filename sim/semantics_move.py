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


#: :func:`_pair` by (id(source levels), id(destination levels), element bytes): (source levels,
#: destination levels, result) -- the entry holds both tuples, so their ids name no other
#: objects while it is there (a decoded program's walks with equal levels share one tuple).
_PAIRS: dict = {}


def _pair(sl: tuple, dl: tuple, sz: int) -> tuple | None:
    """What a copy's view spec takes from its source's and destination's levels and the element
    size alone: (source lowest byte, end byte, first byte, destination lowest, end, first --
    relative to each walk's base -- and :func:`_aligned`'s (counts, source strides, destination
    strides)); None when the spec has no plan at any bases: no elements, a destination not
    injective or of another element count, no common shape (``_make_view_spec``'s and
    :func:`_fusion`'s tests on the same :func:`_view_geo` tuples). Kept per pair of levels tuples
    while :data:`~m100.sim.twu.GEOMETRY` is on."""
    if twu.GEOMETRY:
        key = (id(sl), id(dl), sz)
        got = _PAIRS.get(key)
        if got is not None and got[0] is sl and got[1] is dl:
            return got[2]
    sn, _, slo, send, sfirst, sc, ss = twu.per_levels("view", sl, _view_geo, sz)
    dn, inj, dlo, dend, dfirst, dc, ds = twu.per_levels("view", dl, _view_geo, sz)
    out = None
    if sn and inj and dn == sn:
        al = (sc, ss, ds) if sc == dc else _aligned(sc, ss, dc, ds, sz)
        if al is not None:
            out = (slo, send, sfirst, dlo, dend, dfirst, al)
    if twu.GEOMETRY:
        if len(_PAIRS) >= 1 << 14:  # (a process running many programs)
            _PAIRS.clear()
        _PAIRS[key] = (sl, dl, out)
    return out


#: :func:`_tpb_step` by the TPBs tuple's identity (one tuple per mask: :func:`_tpbs`).
_STEPS: dict = {}


def _tpb_step(tpbs: tuple) -> tuple | None:
    """(first TPB, step, count) when ``tpbs`` are ``t0, t0 + step, ...`` (step >= 1, two or
    more), else None (:func:`_tpb_range` of accesses in those TPBs)."""
    got = _STEPS.get(id(tpbs))
    if got is not None and got[0] is tpbs:
        return got[1]
    out = None
    if len(tpbs) > 1:
        t0, step = tpbs[0], tpbs[1] - tpbs[0]
        if step >= 1 and tpbs == tuple(range(t0, t0 + step * len(tpbs), step)):
            out = t0, step, len(tpbs)
    if len(_STEPS) >= 1 << 14:
        _STEPS.clear()
    _STEPS[id(tpbs)] = (tpbs, out)
    return out


def _make_op(ends: tuple | None) -> tuple | None:
    """A one-block copy's stores as one assignment between two views (what ``run_free`` makes of
    its view spec, without the spec): ``ends`` is ``CopyExec._ends()`` (source walk, its TPB,
    destination walk, the destinations' TPBs). (value type, counts, source space, TPB, lowest
    byte, end byte, first byte, byte strides, destination space, TPB, lowest, end, first, byte
    strides, TPB range) -- the TPB range (first, step, count) for one HBSM walk in TPBs ``t0,
    t0 + step, ...``, its TPB None; None for one destination. None when the view spec has no
    plan (``_make_view_spec`` / :func:`_fusion`: not a same-type copy of its bytes, no common
    shape, a destination meeting the source) or is not of these two forms (no destination,
    several outside HBSM, TPBs not a range): ``run_free`` takes the spec's path then. The same
    tuples as the spec's parts and plan (:func:`_view_geo` by :func:`_pair`), the same overlap
    test as :func:`_fusion`."""
    if ends is None:
        return None
    sw, stpb, dw, tpbs = ends
    dt = sw.dtype
    vt = _SAME.get(dt)
    if vt is None or dw.dtype is not dt or not tpbs:
        return None
    t = _pair(sw.levels, dw.levels, vt.itemsize)
    if t is None:
        return None
    slo, send, sfirst, dlo, dend, dfirst, (counts, ss, ds) = t
    sb, db = sw.base, dw.base
    slo, send, sfirst, dlo, dend, dfirst = \
        sb + slo, sb + send, sb + sfirst, db + dlo, db + dend, db + dfirst
    ssp, dsp = sw.space, dw.space
    if len(tpbs) == 1:
        dtpb = tpbs[0]
        if dsp == ssp and (dtpb == stpb or dsp is not Space.HBSM) and dlo < send and slo < dend:
            return None
        return vt, counts, ssp, stpb, slo, send, sfirst, ss, dsp, dtpb, dlo, dend, dfirst, ds, \
            None
    rng = _tpb_step(tpbs) if dsp is Space.HBSM else None
    if rng is None or (dsp == ssp and stpb in tpbs and dlo < send and slo < dend):
        return None
    return vt, counts, ssp, stpb, slo, send, sfirst, ss, dsp, None, dlo, dend, dfirst, ds, rng


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

    def _ends(self) -> tuple | None:
        """(source walk, its TPB, destination walk, the destinations' TPBs) of a one-block copy:
        the walks ``reads(0)`` / ``writes(0)`` access whole (``_block`` of one block is the walk
        itself); None for several blocks."""
        if self.blocks != 1:
            return None
        i = self.inst
        return i.src, i.tpb, i.dst, (i.dst.tpb,)

    def _op(self) -> tuple | None:
        """:func:`_make_op` of this executor, kept on the (immutable) instruction per
        :data:`~m100.sim.twu.STRIDED` (``_sim_op``)."""
        got = self.inst.__dict__.get("_sim_op")
        if got is None or got[0] is not twu.STRIDED:
            got = (twu.STRIDED, _make_op(self._ends()) if twu.STRIDED else None)
            object.__setattr__(self.inst, "_sim_op", got)
        return got[1]

    def _derive_views(self, b: int, reads=None, writes=None) -> None:
        """What a first run's pre-pass (``engine_checks.Checks._derive_blocks``) makes for block
        ``b`` before the loop: the copy's op (:func:`_make_op`) when it has one, else its view
        spec (:meth:`_view_spec`, ``reads`` / ``writes`` as there) -- what ``run_free`` reads."""
        if self._op() is None:
            self._view_spec(b, reads, writes)

    def run_free(self, b):
        """``run(b)`` and its ``apply`` at once, for a schedule no other block's access meets
        between the two (``Exec.run_free``): each destination view is assigned from the source
        view (one copy, not the source's flat copy and then the stores), in one shape both take
        without a copy -- element ``i`` of the walks to element ``i``, the same stores of the
        same values as ``apply`` of ``run``'s values. A one-block copy with an op
        (:func:`_make_op`: one destination, or one HBSM walk in a TPB range written as one view
        with a TPB axis) makes the two views from it; any other block, or a memory in which the
        op's spaces are not mapped whole or its bytes lie outside them, takes the view spec's
        path (:meth:`_run_free_spec`), which makes the same stores where it can and else runs
        ``run``."""
        op = self.inst.__dict__.get("_sim_op")
        op = op[1] if op is not None and op[0] is twu.STRIDED else self._op()
        mem = self.mem
        if op is not None and mem is not None:
            vt, counts, ssp, stpb, slo, send, sfirst, ss, dsp, dtpb, dlo, dend, dfirst, ds, \
                tpbs = op
            space_of = mem.space
            if tpbs is None:
                src = space_of(ssp, stpb)
                if src.whole and slo >= 0 and send <= src.size:
                    dst = space_of(dsp, dtpb)
                    if dst.whole and dlo >= 0 and dend <= dst.size:
                        # (shape, dtype, buffer, offset, strides positionally, as _views)
                        np.ndarray(counts, vt, dst.buf, dfirst, ds)[...] = \
                            np.ndarray(counts, vt, src.buf, sfirst, ss)
                        return _WRITTEN
            else:
                group = mem.group
                t0, step, k = tpbs
                if group and dlo >= 0 and dend <= group.size and t0 + step * (k - 1) < group.count:
                    src = space_of(ssp, stpb)
                    if src.whole and slo >= 0 and send <= src.size:
                        np.ndarray((k,) + counts, vt, group.buf, t0 * group.size + dfirst,
                                   (step * group.size,) + ds)[...] = \
                            np.ndarray(counts, vt, src.buf, sfirst, ss)
                        return _WRITTEN
        return self._run_free_spec(b)

    def _run_free_spec(self, b):
        """:meth:`run_free` by the view spec: each destination view assigned from the source
        view in one shape both take without a copy (:func:`_fusion`); destinations that are one
        HBSM walk in a TPB range as one view with a TPB axis (``HbsmGroup``). Where the spec has
        no such plan (a destination meets the source, no common shape, no views): ``run``."""
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

    def _ends(self):
        if self.blocks != 1:
            return None
        i = self.inst
        return i.src, i.tpb, i.dst, _tpbs(i.tpb_mask)

    def writes(self, b):
        d = self.inst.dst
        a = _chunk(d, d.tpb, self.blocks, b)  # the same chunk of the walk in every TPB
        return [Access(a.walk, t, a.offsets) for t in _tpbs(self.inst.tpb_mask)]


class DmaExec(CopyExec):
    inst: Dma

    def _ends(self):
        if self.blocks != 1:
            return None
        i = self.inst
        s, d = i.src, i.dst
        return s, _tpb_of(s), d, _tpbs(i.tpb_mask) if i.tpb_mask else (_tpb_of(d),)

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

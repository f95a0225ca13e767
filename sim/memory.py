"""Simulator state for data: DDR, CCB SRAM and the HBSM of every TPB.

Every space is one flat byte array (:class:`FlatBytes`) over an anonymous memory mapping that
reserves nothing: the kernel backs a page only when it is first written, and unwritten bytes read
as zero, so a 64 GiB DDR or 56 x 2 MiB of HBSM cost only what a program touches. Where the
process may not map that much address space (``ulimit -v``), a space's mapping covers the bytes
accessed so far and grows. Reads and writes
of a walk are one slice (contiguous walks), one strided numpy view of the values (affine boxes,
:mod:`m100.sim.twu`), or a gather/scatter over element byte addresses (anything else); never a
Python loop per element.
"""

from __future__ import annotations

import bisect
import mmap
import platform
import sys

import numpy as np

from m100.targets.m100 import numerics
from m100.targets.m100.isa import DType, Space, Walk, space_size
from m100.targets.m100.machine import Machine

from . import mempool, race_batch, twu
from .twu import box, contiguous_start, element_offsets

#: Element types whose value type is their little-endian storage (on a little-endian host): their
#: bytes and values are views of each other.
_SAME = {dt: numerics.value_dtype(dt) for dt in (DType.I8, DType.I32, DType.F16, DType.F32,
                                                  DType.I16)} \
    if sys.byteorder == "little" else {}

# Linux's MAP_NORESERVE (Python < 3.12 has no constant): no swap is reserved for the mapping, so
# a space of any size maps at once and costs the pages written. 0 elsewhere (lazy anyway).
_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0) or (
    0x4000 if sys.platform.startswith("linux") and platform.machine() in (
        "x86_64", "AMD64", "i386", "i686", "aarch64", "arm64") or
    platform.machine().startswith("arm") and sys.platform.startswith("linux") else 0)


def _from_bytes(raw: np.ndarray, dt: DType) -> np.ndarray:
    """``numerics.from_bytes`` without its copy: every caller here passes a fresh buffer of its
    own (a range read, a gather or a compacted strided view), so the values may be a view of it."""
    t = _SAME.get(dt)
    if t is not None and raw.flags.c_contiguous and raw.size % t.itemsize == 0:
        return raw.reshape(-1).view(t)
    return numerics.from_bytes(raw, dt)


def _to_bytes(values: np.ndarray, dt: DType) -> np.ndarray:
    """``numerics.to_bytes`` without its second copy (the bytes are copied into memory at once)."""
    t = _SAME.get(dt)
    if t is not None:
        v = np.asarray(values).reshape(-1)
        if v.dtype != t:  # (values of the storage type convert to themselves: no copy)
            v = numerics.convert(v, dt)
        v = np.ascontiguousarray(v)
        if v.dtype == t:
            return v.view(np.uint8)
    return numerics.to_bytes(values, dt)


#: Map every space whole when the process may (False: every space on demand; tests compare).
WHOLE = True
#: Every TPB's HBSM in one mapping (:class:`HbsmGroup`; False: one mapping per TPB, tests
#: compare): a broadcast's or DMA's destinations in TPBs of an arithmetic progression are then
#: one strided view (``CopyExec.run_free``).
HBSM_GROUP = True
#: The granule of a space mapped on demand (:class:`FlatBytes`, regions start and end on it).
GROW_MIN = 1 << 20


def _anonymous(size: int) -> np.ndarray:
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | _NORESERVE)
    return np.frombuffer(m, dtype=np.uint8)  # (the array keeps the mapping alive)


class FlatBytes:
    """A byte array of ``size`` bytes, zero until written, backed on demand.

    The whole space is one mapping (``buf``, ``whole``) when the process may map it (it reserves
    nothing). When it may not -- an address-space limit (``ulimit -v``) below a 64 GiB DDR -- or
    with ``whole=False``, the space is a set of disjoint *regions*, each one mapping of whole
    ``GROW_MIN`` granules: an access inside a region uses it, an access reaching past one maps a
    region covering the access and every region it touches (their bytes copied), at least twice
    the size of the largest. Every access goes through :meth:`locate` (the array holding
    ``[lo, hi)`` and the address of its first byte), so both ways read and write the same bytes,
    and a program touching a few far-apart ranges of a DDR maps about what it touches."""

    #: The :class:`HbsmGroup` whose mapping ``buf`` is a part of (None: ``buf`` is its own).
    group = None

    def __init__(self, size: int, whole: bool = True):
        self.size = size
        self.whole = False
        self._lo: list[int] = []  # regions: sorted starts, ends, arrays
        self._hi: list[int] = []
        self._buf: list[np.ndarray] = []
        if whole:
            try:
                self.buf = mempool.take(size, _anonymous)
                self.whole = True
                return
            except (OSError, ValueError, OverflowError):  # e.g. ENOMEM under ulimit -v
                pass
        self.buf = None

    @classmethod
    def part(cls, group: HbsmGroup, tpb: int) -> FlatBytes:
        """TPB ``tpb``'s HBSM: bytes ``[tpb * size, (tpb + 1) * size)`` of ``group``'s mapping
        (whole; it holds the group, which gives the mapping back to the pool when it goes)."""
        fb = cls.__new__(cls)
        fb.size = group.size
        fb._lo, fb._hi, fb._buf = [], [], []
        fb.buf = group.buf[tpb * group.size:(tpb + 1) * group.size]  # (set before group: the
        fb.whole = True  # part's slice goes first as it goes, so the group finds its mapping
        fb.group = group  # unviewed: mempool.give)
        return fb

    def __del__(self) -> None:
        # the mapping goes back to the pool (sim/mempool.py; zeroed when taken again). (At the
        # interpreter's exit the module may be gone: the mapping is then simply unmapped.) A
        # part of a group's mapping goes back with the group.
        if getattr(self, "whole", False) and self.group is None and mempool is not None:
            mempool.give(self.buf)

    @property
    def mapped(self) -> int:
        """Bytes of address space mapped for this space."""
        return self.size if self.whole else sum(self._hi) - sum(self._lo)

    def locate(self, lo: int, hi: int) -> tuple[np.ndarray, int]:
        """(array, address of its byte 0) holding bytes [lo, hi) of the space (within its size)."""
        if self.whole:
            return self.buf, 0
        k = bisect.bisect_right(self._lo, lo) - 1
        if k >= 0 and hi <= self._hi[k]:
            return self._buf[k], self._lo[k]
        return self._map_region(lo, hi)

    def _map_region(self, lo: int, hi: int) -> tuple[np.ndarray, int]:
        g = GROW_MIN
        new_lo, new_hi = lo // g * g, min(self.size, -(-max(hi, lo + 1) // g) * g)
        touched = [i for i in range(len(self._lo)) if self._lo[i] <= new_hi
                   and self._hi[i] >= new_lo]  # overlapping or adjacent regions merge
        if touched:
            new_lo = min(new_lo, self._lo[touched[0]])
            new_hi = max(new_hi, self._hi[touched[-1]])
            want = 2 * max(self._hi[i] - self._lo[i] for i in touched)
            if new_hi - new_lo < want:  # grow geometrically: up first, then down
                new_hi = min(self.size, new_lo + want)
                new_lo = max(0, min(new_lo, new_hi - want))
            later = [i for i in range(len(self._lo)) if self._lo[i] <= new_hi
                     and self._hi[i] >= new_lo]
            touched = later
            new_lo = min(new_lo, self._lo[touched[0]])
            new_hi = max(new_hi, self._hi[touched[-1]])
        try:
            buf = _anonymous(new_hi - new_lo)
        except (OSError, ValueError, OverflowError) as e:
            raise MemoryError(f"the simulated memory cannot map {new_hi - new_lo} more bytes "
                              f"({e}); the process's address-space limit (ulimit -v) is too low "
                              "for the bytes this program touches") from None
        for i in touched:  # old views keep the old mappings alive
            buf[self._lo[i] - new_lo:self._hi[i] - new_lo] = self._buf[i]
        for i in reversed(touched):
            del self._lo[i], self._hi[i], self._buf[i]
        k = bisect.bisect_left(self._lo, new_lo)
        self._lo.insert(k, new_lo)
        self._hi.insert(k, new_hi)
        self._buf.insert(k, buf)
        return buf, new_lo

    def _bounds(self, lo: int, hi: int) -> None:
        if lo < 0 or hi > self.size:
            raise IndexError(f"bytes [{lo}, {hi}) outside a space of {self.size} bytes")

    def read_range(self, lo: int, hi: int) -> np.ndarray:
        """A copy of bytes [lo, hi)."""
        return self.view_range(lo, hi).copy()

    def view_range(self, lo: int, hi: int) -> np.ndarray:
        """Bytes [lo, hi) as a view (valid until the next write)."""
        self._bounds(lo, hi)
        if self.whole:
            return self.buf[lo:hi]
        buf, at = self.locate(lo, hi)
        return buf[lo - at:hi - at]

    def write_range(self, lo: int, data: np.ndarray) -> None:
        self._bounds(lo, lo + data.size)
        if self.whole:
            self.buf[lo:lo + data.size] = data
            return
        buf, at = self.locate(lo, lo + data.size)
        buf[lo - at:lo - at + data.size] = data

    def _part(self, addrs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(array, ``addrs`` relative to it) of a space mapped on demand."""
        if not addrs.size:
            return np.zeros(0, dtype=np.uint8), addrs
        lo, hi = int(addrs.min()), int(addrs.max()) + 1
        self._bounds(lo, hi)
        buf, at = self.locate(lo, hi)
        return buf, addrs - at

    def gather(self, addrs: np.ndarray) -> np.ndarray:
        """Bytes at ``addrs`` (any shape)."""
        if self.whole:
            return self.buf[addrs]
        buf, rel = self._part(addrs)
        return buf[rel]

    def scatter(self, addrs: np.ndarray, data: np.ndarray) -> None:
        """Bytes ``data`` to ``addrs``, in order (a repeated address keeps the last byte)."""
        if self.whole:
            self.buf[addrs.reshape(-1)] = data.reshape(-1)
            return
        buf, rel = self._part(addrs)
        buf[rel.reshape(-1)] = data.reshape(-1)


class HbsmGroup:
    """One mapping (``buf``) holding the HBSM of each of ``count`` TPBs, TPB ``t``'s ``size`` bytes
    at ``t * size`` (:data:`HBSM_GROUP`; the spaces are :meth:`FlatBytes.part` s of it). The
    same bytes as one mapping per TPB -- zero until written, backed when written, from the pool
    and back to it (one mapping of ``count * size`` bytes) -- and one array in which the same
    range of TPBs ``t0, t0 + step, ...`` is one strided view (``CopyExec.run_free``)."""
    __slots__ = ("buf", "size", "count")

    def __init__(self, size: int, count: int):
        self.buf = mempool.take(size * count, _anonymous)
        self.size, self.count = size, count

    def __del__(self) -> None:
        if mempool is not None and getattr(self, "buf", None) is not None:
            mempool.give(self.buf)


def _typed_box(mem: FlatBytes, walk: Walk, t: np.dtype) -> np.ndarray | None:
    """The values of box walk ``walk`` (whole-byte type ``t`` = its storage) as a strided view of
    the space's bytes, shape = the counts of its non-trivial levels; None if not a box."""
    bx = box(walk)
    if bx is None:
        return None
    lo, hi, counts, steps = bx
    sz = t.itemsize
    start, end = walk.base + lo * sz, walk.base + (hi + 1) * sz
    if start < 0 or end > mem.size:
        raise IndexError(f"walk bytes outside a space of {mem.size} bytes")
    buf, at = mem.locate(start, end)
    first = walk.base + sum(lv.initial for lv in walk.levels) * sz
    # (shape, dtype, buffer, offset, strides positionally: ndarray's keyword parsing costs
    # more than the view itself)
    return np.ndarray(counts, t, buf, first - at, tuple(s * sz for s in steps))


class Memory:
    """All data spaces of one machine: ``space(Space.HBSM, tpb)`` etc."""

    def __init__(self, machine: Machine):
        self.machine = machine
        self._spaces: dict[tuple[int, int], FlatBytes] = {}
        self._by_arg: dict[tuple, FlatBytes] = {}  # space() by its arguments as given
        self.writes = 0  # write_bytes / write_walk calls (Simulator: is it still the program's?)
        # scratch buffers of the run's semantics by (kind, shape..., type) (Conv2DExec._padded)
        self.scratch: dict[tuple, np.ndarray] = {}
        # every TPB's HBSM in one mapping (HBSM_GROUP), made with the first HBSM space; False:
        # not made (off, not mapped whole, or refused: one mapping per TPB then)
        self.group: HbsmGroup | None | bool = None
        # program files whose pages are mapped into a space (sim/segments.py): ProgramFile ->
        # an open descriptor of it, or False where the file was not the one read any more
        self.files: dict = {}

    def space(self, space: Space, tpb: int = 0) -> FlatBytes:
        s = self._by_arg.get((space, tpb))  # (a Space hashes and compares as its int)
        if s is not None:
            return s
        sp = Space(space)
        key = (int(space), tpb if sp is Space.HBSM else 0)
        s = self._spaces.get(key)
        if s is None:
            if sp is Space.HBSM and self.group is not False:
                s = self._hbsm_part(tpb)
            if s is None:
                s = FlatBytes(space_size(self.machine, sp), WHOLE)
            self._spaces[key] = s
        self._by_arg[(space, tpb)] = s
        return s

    def _hbsm_part(self, tpb: int) -> FlatBytes | None:
        """TPB ``tpb``'s HBSM as a part of the group mapping (:data:`HBSM_GROUP`), the group
        made now if it is not yet; None when there is none (the caller maps the space alone)."""
        g = self.group
        if g is None:
            if not (HBSM_GROUP and WHOLE):
                self.group = False
                return None
            try:
                g = self.group = HbsmGroup(space_size(self.machine, Space.HBSM),
                                           self.machine.num_tpbs)
            except (OSError, ValueError, OverflowError):  # e.g. ENOMEM under ulimit -v
                self.group = False
                return None
        if not 0 <= tpb < g.count:
            return None
        return FlatBytes.part(g, tpb)

    def prefault(self, rows: np.ndarray) -> None:
        """Back now the pages of the byte ranges a run is about to write: ``rows`` (an ``(n,
        3)`` int64 array) of (race-checker space code, :func:`.race_batch.space_code`, lo, hi). Per
        space mapped whole, the ranges merged (gaps below :data:`mempool.PREFAULT_GAP` joined:
        the pages backed are those written plus a few between them) and each backed in one call
        (:func:`mempool.populate`: the bytes do not change, only when their pages are backed).
        The race pre-pass hands it every block's HBSM writes (``Checks._derive_blocks``), the
        reset the program's segments (``Simulator._reset_memory``)."""
        if not mempool.PREFAULT or not rows.shape[0]:
            return
        rows = rows[rows[:, 2] > rows[:, 1]]
        if not rows.shape[0] or int(rows[:, 2].max()) >= 1 << 39 or int(rows[:, 1].min()) < 0:
            return  # (nothing, or keys that do not fit: left to the page faults)
        code = rows[:, 0]
        key_lo = code * (1 << 40) + rows[:, 1]
        order = np.argsort(key_lo, kind="stable")
        lo, hi = key_lo[order], code[order] * (1 << 40) + rows[order, 2]
        reach = np.maximum.accumulate(hi)  # (codes ascend: a space's reach starts in it)
        new = np.ones(lo.size, dtype=bool)
        new[1:] = lo[1:] > reach[:-1] + mempool.PREFAULT_GAP
        starts = np.flatnonzero(new)
        ends = np.append(starts[1:], lo.size) - 1
        for c, a, b in zip((lo[starts] >> 40).tolist(), (lo[starts] & ((1 << 40) - 1)).tolist(),
                           (reach[ends] - (lo[starts] >> 40 << 40)).tolist()):
            sp, tpb = divmod(c, race_batch.SPACE_TPBS)
            try:
                space = self.space(Space(sp), tpb)
            except ValueError:  # (not a space: left to the run, which names it)
                continue
            if space.whole:
                mempool.populate(space.buf, a, min(b, space.size))

    # --- raw bytes ------------------------------------------------------------------------------
    def write_bytes(self, space: Space, tpb: int, address: int, data: bytes | np.ndarray) -> None:
        self.writes += 1
        arr = np.frombuffer(bytes(data), dtype=np.uint8) if isinstance(data, (bytes, bytearray)) \
            else np.asarray(data, dtype=np.uint8).reshape(-1)
        self.space(space, tpb).write_range(address, arr)

    def read_bytes(self, space: Space, tpb: int, address: int, n: int) -> np.ndarray:
        return self.space(space, tpb).read_range(address, address + n)

    # --- walks ----------------------------------------------------------------------------------
    def read_walk(self, walk: Walk, tpb: int | None = None, offsets: np.ndarray | None = None,
                  copy: bool = True) -> np.ndarray:
        """The element values of ``walk`` in walk order (flat, numerics value type).

        ``offsets`` (element offsets) restricts the read to a subset; ``tpb`` overrides walk.tpb.
        ``copy=False``: the values may be a read-only view of the memory, valid only until the
        next write (for a caller that computes with them at once).
        """
        t = walk.tpb if tpb is None else tpb
        mem = self.space(walk.space, t)
        if offsets is None and not copy:  # a view of the whole walk: its plan (_view_plan)
            got = walk.__dict__.get("_mem_view")  # (a walk is immutable: kept on it)
            if got is None or got[0] is not twu.STRIDED:
                got = (twu.STRIDED, _view_plan(walk))
                object.__setattr__(walk, "_mem_view", got)
            p = got[1]
            if p is not None and mem.whole and p[1] <= mem.size:
                lo, hi, counts, strides, vt = p
                if counts is None:  # contiguous: a view of its bytes
                    v = mem.buf[lo:hi].view(vt)
                    v.flags.writeable = False
                    return v
                view = np.ndarray(counts, vt, mem.buf, lo, strides)  # lo: the first beat
                v = view.reshape(-1)  # a copy unless the beats have one stride
                if np.may_share_memory(v, view):  # still a view
                    v.flags.writeable = False
                return v
        dt = walk.dtype
        vt = _SAME.get(dt)
        if offsets is None:
            start = contiguous_start(walk)
            if start is not None and dt is not DType.I4:
                sz = dt.bits // 8
                lo = walk.base + start * sz
                hi = lo + walk.num_elements * sz
                if vt is not None and not copy:
                    v = mem.view_range(lo, hi).view(vt)
                    v.flags.writeable = False
                    return v
                return _from_bytes(mem.read_range(lo, hi), dt)
            if vt is not None:  # an affine box: a strided view of the values, no index array
                view = _typed_box(mem, walk, vt)
                if view is not None:
                    v = view.reshape(-1)  # a copy unless the beats have one stride
                    if np.may_share_memory(v, view):  # still a view
                        if copy:
                            return v.copy()
                        v.flags.writeable = False
                    return v
            offsets = element_offsets(walk)
        elif dt is not DType.I4 and _consecutive(offsets):
            sz = dt.bits // 8
            lo = walk.base + int(offsets[0]) * sz
            hi = lo + offsets.size * sz
            if vt is not None and not copy:
                v = mem.view_range(lo, hi).view(vt)
                v.flags.writeable = False
                return v
            return _from_bytes(mem.read_range(lo, hi), dt)
        if dt is DType.I4:
            raw = mem.gather(walk.base + (offsets >> 1))
            nib = np.where(offsets & 1, raw >> 4, raw & 0xF).astype(np.uint8)
            return numerics.unpack_nibbles(nib)
        sz = dt.bits // 8
        if vt is not None and twu.STRIDED:  # a typed gather (one index per element)
            first = walk.base // sz if walk.base % sz == 0 else None
            if first is not None:
                if mem.whole:
                    return mem.buf[:mem.size - mem.size % sz].view(vt)[first + offsets]
                idx = first + offsets  # a space mapped on demand: the region of the elements
                if not idx.size:
                    return np.zeros(0, dtype=vt)
                lo, hi = int(idx.min()) * sz, (int(idx.max()) + 1) * sz
                mem._bounds(lo, hi)
                buf, at = mem.locate(lo, hi)  # (regions are granule-aligned: at % sz == 0)
                return buf.view(vt)[idx - at // sz]
        addrs = walk.base + offsets * sz
        if sz == 1:
            raw = mem.gather(addrs)
        else:
            raw = mem.gather(addrs[:, None] + np.arange(sz, dtype=np.int64))
        return _from_bytes(raw.reshape(-1), dt)

    def write_walk(self, walk: Walk, values: np.ndarray, tpb: int | None = None,
                   offsets: np.ndarray | None = None) -> None:
        """Write ``values`` (converted to walk.dtype) at the walk's beats, in walk order."""
        self.writes += 1
        t = walk.tpb if tpb is None else tpb
        mem = self.space(walk.space, t)
        dt = walk.dtype
        values = np.asarray(values).reshape(-1)
        if offsets is None:
            start = contiguous_start(walk)
            if start is not None and dt is not DType.I4:
                lo = walk.base + start * (dt.bits // 8)
                vt = _SAME.get(dt)
                if vt is not None and values.dtype == vt and mem.whole \
                        and values.flags.c_contiguous:
                    hi = lo + values.nbytes  # (write_range of _to_bytes' view, without calls)
                    if lo >= 0 and hi <= mem.size:
                        mem.buf[lo:hi] = values.view(np.uint8)
                        return
                mem.write_range(lo, _to_bytes(values, dt))
                return
            vt = _SAME.get(dt)
            if vt is not None and values.size == walk.num_elements and walk.injective:
                view = _typed_box(mem, walk, vt)
                if view is not None:  # a strided view of the values: no index array
                    v = values if values.dtype == vt else numerics.convert(values, dt)
                    view[...] = v.reshape(view.shape)
                    return
            offsets = element_offsets(walk)
        elif dt is not DType.I4 and values.size == offsets.size and _consecutive(offsets):
            mem.write_range(walk.base + int(offsets[0]) * (dt.bits // 8),
                            _to_bytes(values, dt))
            return
        if dt is DType.I4:
            v = (numerics.convert(values, dt).astype(np.int16) & 0xF).astype(np.uint8)
            addrs = walk.base + (offsets >> 1)
            hi_sel = (offsets & 1) == 1
            for sel, keep, shift in ((~hi_sel, 0xF0, 0), (hi_sel, 0x0F, 4)):  # low, then high
                a = addrs[sel]
                if a.size:
                    cur = mem.gather(a)
                    mem.scatter(a, ((cur & keep) | (v[sel] << shift)).astype(np.uint8))
            return
        sz = dt.bits // 8
        raw = _to_bytes(values, dt)
        addrs = walk.base + offsets * sz
        if sz > 1:
            addrs = (addrs[:, None] + np.arange(sz, dtype=np.int64)).reshape(-1)
        mem.scatter(addrs, raw)


def _view_plan(walk: Walk) -> tuple | None:
    """How :meth:`Memory.read_walk` reads the whole of ``walk`` with ``copy=False`` from a space
    mapped whole, when that is a view: ``(lo, hi, None, None, value type)`` for contiguous beats
    (bytes [lo, hi) as the value type), ``(first, end, counts, byte strides, value type)`` for
    an affine box (the strided view at its first beat's byte ``first``; ``end``: the box's end
    byte); None for the other walks and for a walk starting below byte 0 (the general path, which
    raises). The same views :meth:`Memory.read_walk`'s general path makes, the same checks: the
    caller checks the end against the space's size."""
    dt = walk.dtype
    vt = _SAME.get(dt)
    if vt is None:
        return None
    sz = dt.bits // 8
    # the levels' part once per levels tuple, the base added here
    rel = twu.per_levels("view-plan", walk.levels, _view_plan_rel, sz, twu.STRIDED)
    if rel is None:
        return None
    base = walk.base
    if rel[0]:
        lo = base + rel[1]
        return None if lo < 0 else (lo, lo + rel[2], None, None, vt)
    if base + rel[1] < 0:
        return None
    return (base + rel[2], base + rel[3], rel[4], rel[5], vt)


def _view_plan_rel(levels: tuple, sz: int, strided: bool) -> tuple | None:
    """:func:`_view_plan` relative to the walk's base, for ``sz``-byte elements: ``(True,
    first byte, byte count)`` for contiguous beats, ``(False, lowest byte, first byte, end
    byte, counts, byte strides)`` for an affine box (``strided``: :data:`twu.STRIDED`), else
    None."""
    start = twu._contiguous_start(levels)
    if start is not None:
        return (True, start * sz, twu._beats(levels) * sz)
    if not strided:  # (twu.box: no box without STRIDED; sz >= 1 here: no sub-byte types)
        return None
    lo, hi, counts, steps = twu._box(levels)
    return (False, lo * sz, sum(lv.initial for lv in levels) * sz, (hi + 1) * sz, counts,
            tuple(st * sz for st in steps))


def _consecutive(offsets: np.ndarray) -> bool:
    """The offsets are ``k, k+1, k+2, ...`` (one contiguous run in order)."""
    n = offsets.size
    if n == 0 or not twu.STRIDED or int(offsets[-1]) - int(offsets[0]) != n - 1:
        return False
    return n == 1 or bool(np.all(np.diff(offsets) == 1))


def element_byte_set(walk: Walk, offsets: np.ndarray | None = None) -> np.ndarray:
    """Every byte address touched by the walk's beats (flat, unsorted, may repeat)."""
    if offsets is None:
        offsets = element_offsets(walk)
    dt = walk.dtype
    if dt is DType.I4:
        return walk.base + (offsets >> 1)
    sz = dt.bits // 8
    a = walk.base + offsets * sz
    if sz == 1:
        return a
    return (a[:, None] + np.arange(sz, dtype=np.int64)).reshape(-1)

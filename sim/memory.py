"""Simulator state for data: DDR (sparse), CCB SRAM and the HBSM of every TPB.

Every space is a byte-addressed, lazily paged store (pages of :data:`PAGE` bytes allocated on first
write; unwritten bytes read as zero), so a 64 GiB DDR or 56 x 2 MiB of HBSM cost only what a program
touches. Reads and writes are vectorized over an array of element byte addresses produced by a walk
(:mod:`m100.sim.twu`); no Python loop per element.
"""

from __future__ import annotations

import sys

import numpy as np

from m100.targets.m100 import numerics
from m100.targets.m100.isa import DType, Space, Walk, space_size
from m100.targets.m100.machine import Machine

from . import twu
from .twu import box, contiguous_start, element_offsets, is_injective, strided_bytes

PAGE_BITS = 20
PAGE = 1 << PAGE_BITS


#: Element types whose value type is their little-endian storage (on a little-endian host): their
#: bytes and values are views of each other.
_SAME = {dt: numerics.value_dtype(dt) for dt in (DType.I8, DType.I32, DType.F16, DType.F32)} \
    if sys.byteorder == "little" else {}


def _from_bytes(raw: np.ndarray, dt: DType) -> np.ndarray:
    """``numerics.from_bytes`` without its copy: every caller here passes a fresh buffer of its
    own (a range read, a gather or a compacted strided view), so the values may be a view of it."""
    t = _SAME.get(dt)
    if t is not None and raw.flags.c_contiguous and raw.size % t.itemsize == 0:
        return raw.reshape(-1).view(t)
    return numerics.from_bytes(raw, dt)


def _to_bytes(values: np.ndarray, dt: DType) -> np.ndarray:
    """``numerics.to_bytes`` without its second copy (the bytes are copied into pages at once)."""
    t = _SAME.get(dt)
    if t is not None:
        v = np.ascontiguousarray(numerics.convert(np.asarray(values).reshape(-1), dt))
        if v.dtype == t:
            return v.view(np.uint8)
    return numerics.to_bytes(values, dt)


class PagedBytes:
    """A sparse byte array of ``size`` bytes."""

    def __init__(self, size: int):
        self.size = size
        self.pages: dict[int, np.ndarray] = {}

    def read_range(self, lo: int, hi: int) -> np.ndarray:
        """A copy of bytes [lo, hi)."""
        out = np.zeros(hi - lo, dtype=np.uint8)
        p = lo >> PAGE_BITS
        while (p << PAGE_BITS) < hi:
            pg = self.pages.get(p)
            a, b = max(lo, p << PAGE_BITS), min(hi, (p + 1) << PAGE_BITS)
            if pg is not None:
                out[a - lo:b - lo] = pg[a - (p << PAGE_BITS):b - (p << PAGE_BITS)]
            p += 1
        return out

    def write_range(self, lo: int, data: np.ndarray) -> None:
        hi = lo + data.size
        p = lo >> PAGE_BITS
        while (p << PAGE_BITS) < hi:
            pg = self.pages.get(p)
            if pg is None:
                pg = self.pages[p] = np.zeros(PAGE, dtype=np.uint8)
            a, b = max(lo, p << PAGE_BITS), min(hi, (p + 1) << PAGE_BITS)
            pg[a - (p << PAGE_BITS):b - (p << PAGE_BITS)] = data[a - lo:b - lo]
            p += 1

    def gather(self, addrs: np.ndarray) -> np.ndarray:
        """Bytes at ``addrs`` (any shape)."""
        if addrs.size == 0:
            return np.zeros(addrs.shape, dtype=np.uint8)
        lo, hi = int(addrs.min()), int(addrs.max()) + 1
        if hi - lo <= 4 * addrs.size + PAGE:
            return self.read_range(lo, hi)[addrs - lo]
        out = np.zeros(addrs.shape, dtype=np.uint8)  # very sparse: page by page
        pages = addrs >> PAGE_BITS
        for p in _distinct(pages):
            pg = self.pages.get(int(p))
            if pg is not None:
                sel = pages == p
                out[sel] = pg[addrs[sel] - (int(p) << PAGE_BITS)]
        return out

    def scatter(self, addrs: np.ndarray, data: np.ndarray) -> None:
        addrs = addrs.reshape(-1)
        data = data.reshape(-1)
        if addrs.size == 0:
            return
        lo, hi = int(addrs.min()), int(addrs.max()) + 1
        if hi - lo <= 4 * addrs.size + PAGE:
            buf = self.read_range(lo, hi)
            buf[addrs - lo] = data
            self.write_range(lo, buf)
            return
        pages = addrs >> PAGE_BITS
        for p in _distinct(pages):
            p = int(p)
            pg = self.pages.get(p)
            if pg is None:
                pg = self.pages[p] = np.zeros(PAGE, dtype=np.uint8)
            sel = pages == p
            pg[addrs[sel] - (p << PAGE_BITS)] = data[sel]


def _distinct(pages: np.ndarray) -> np.ndarray:
    """The distinct page numbers (a bincount over their span: no sort)."""
    pages = pages.reshape(-1)
    lo = int(pages.min())
    return np.flatnonzero(np.bincount(pages - lo)) + lo


class Memory:
    """All data spaces of one machine: ``space(Space.HBSM, tpb)`` etc."""

    def __init__(self, machine: Machine):
        self.machine = machine
        self._spaces: dict[tuple[int, int], PagedBytes] = {}

    def space(self, space: Space, tpb: int = 0) -> PagedBytes:
        key = (int(space), tpb if space is Space.HBSM else 0)
        s = self._spaces.get(key)
        if s is None:
            s = self._spaces[key] = PagedBytes(space_size(self.machine, Space(space)))
        return s

    # --- raw bytes ------------------------------------------------------------------------------
    def write_bytes(self, space: Space, tpb: int, address: int, data: bytes | np.ndarray) -> None:
        arr = np.frombuffer(bytes(data), dtype=np.uint8) if isinstance(data, (bytes, bytearray)) \
            else np.asarray(data, dtype=np.uint8).reshape(-1)
        self.space(space, tpb).write_range(address, arr)

    def read_bytes(self, space: Space, tpb: int, address: int, n: int) -> np.ndarray:
        return self.space(space, tpb).read_range(address, address + n)

    # --- walks ----------------------------------------------------------------------------------
    def read_walk(self, walk: Walk, tpb: int | None = None,
                  offsets: np.ndarray | None = None) -> np.ndarray:
        """The element values of ``walk`` in walk order (flat, numerics value type).

        ``offsets`` (element offsets) restricts the read to a subset; ``tpb`` overrides walk.tpb.
        """
        t = walk.tpb if tpb is None else tpb
        mem = self.space(walk.space, t)
        dt = walk.dtype
        if offsets is None:
            start = contiguous_start(walk)
            if start is not None and dt is not DType.I4:
                sz = dt.bits // 8
                lo = walk.base + start * sz
                raw = mem.read_range(lo, lo + walk.num_elements * sz)
                return _from_bytes(raw, dt)
            got = _box_span(walk)
            if got is not None:  # an affine box: one range read, a strided view, no index array
                lo, a, z = got
                view = strided_bytes(mem.read_range(a, z), walk, lo)
                return _from_bytes(np.ascontiguousarray(view).reshape(-1), dt)
            offsets = element_offsets(walk)
        elif dt is not DType.I4 and _consecutive(offsets):
            sz = dt.bits // 8
            lo = walk.base + int(offsets[0]) * sz
            return _from_bytes(mem.read_range(lo, lo + offsets.size * sz), dt)
        if dt is DType.I4:
            raw = mem.gather(walk.base + (offsets >> 1))
            nib = np.where(offsets & 1, raw >> 4, raw & 0xF).astype(np.uint8)
            return numerics.unpack_nibbles(nib)
        sz = dt.bits // 8
        addrs = walk.base + offsets * sz
        if sz == 1:
            raw = mem.gather(addrs)
        else:
            raw = mem.gather(addrs[:, None] + np.arange(sz, dtype=np.int64))
        return _from_bytes(raw.reshape(-1), dt)

    def write_walk(self, walk: Walk, values: np.ndarray, tpb: int | None = None,
                   offsets: np.ndarray | None = None) -> None:
        """Write ``values`` (converted to walk.dtype) at the walk's beats, in walk order."""
        t = walk.tpb if tpb is None else tpb
        mem = self.space(walk.space, t)
        dt = walk.dtype
        values = np.asarray(values).reshape(-1)
        if offsets is None:
            start = contiguous_start(walk)
            if start is not None and dt is not DType.I4:
                mem.write_range(walk.base + start * (dt.bits // 8), _to_bytes(values, dt))
                return
            got = _box_span(walk) if is_injective(walk) else None
            if got is not None and values.size == walk.num_elements:
                # read-modify-write of the span through a strided view
                lo, a, z = got
                buf = mem.read_range(a, z)
                view = strided_bytes(buf, walk, lo)
                view[...] = _to_bytes(values, dt).reshape(view.shape)
                mem.write_range(a, buf)
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


def _consecutive(offsets: np.ndarray) -> bool:
    """The offsets are ``k, k+1, k+2, ...`` (one contiguous run in order)."""
    n = offsets.size
    if n == 0 or not twu.STRIDED or int(offsets[-1]) - int(offsets[0]) != n - 1:
        return False
    return n == 1 or bool(np.all(np.diff(offsets) == 1))


#: A box walk is read (and read-modify-written) as its whole bounding byte span when that span is
#: at most this many times its bytes (+ one page): copying a span is ~30x cheaper per byte than
#: gathering through an index array (e.g. a 64-channel slice of a 512-channel DDR tensor).
BOX_SPAN = 32


def _box_span(walk: Walk) -> tuple[int, int, int] | None:
    """(lowest element offset, first byte, end byte) of a whole-byte walk whose bounding byte span
    is dense enough to read at once (:data:`BOX_SPAN`); else None."""
    bx = box(walk)
    if bx is None:
        return None
    lo, hi = bx[0], bx[1]
    sz = walk.dtype.bits // 8
    if (hi - lo + 1) * sz > BOX_SPAN * walk.num_elements * sz + PAGE:
        return None
    return lo, walk.base + lo * sz, walk.base + (hi + 1) * sz


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

"""Simulator state for data: DDR, CCB SRAM and the HBSM of every TPB.

Every space is one flat byte array (:class:`FlatBytes`) over an anonymous memory mapping that
reserves nothing: the kernel backs a page only when it is first written, and unwritten bytes read
as zero, so a 64 GiB DDR or 56 x 2 MiB of HBSM cost only what a program touches. Reads and writes
of a walk are one slice (contiguous walks), one strided numpy view of the values (affine boxes,
:mod:`m100.sim.twu`), or a gather/scatter over element byte addresses (anything else); never a
Python loop per element.
"""

from __future__ import annotations

import mmap
import platform
import sys

import numpy as np

from m100.targets.m100 import numerics
from m100.targets.m100.isa import DType, Space, Walk, space_size
from m100.targets.m100.machine import Machine

from . import twu
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


class FlatBytes:
    """A byte array of ``size`` bytes (``buf``), zero until written, backed on demand."""

    def __init__(self, size: int):
        self.size = size
        try:
            self._map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | _NORESERVE)
            self.buf = np.frombuffer(self._map, dtype=np.uint8)
        except (OSError, ValueError, OverflowError):  # pragma: no cover - no lazy mapping here
            self._map = None
            self.buf = np.zeros(size, dtype=np.uint8)

    def _bounds(self, lo: int, hi: int) -> None:
        if lo < 0 or hi > self.size:
            raise IndexError(f"bytes [{lo}, {hi}) outside a space of {self.size} bytes")

    def read_range(self, lo: int, hi: int) -> np.ndarray:
        """A copy of bytes [lo, hi)."""
        self._bounds(lo, hi)
        return self.buf[lo:hi].copy()

    def view_range(self, lo: int, hi: int) -> np.ndarray:
        """Bytes [lo, hi) as a view (valid until the next write)."""
        self._bounds(lo, hi)
        return self.buf[lo:hi]

    def write_range(self, lo: int, data: np.ndarray) -> None:
        self._bounds(lo, lo + data.size)
        self.buf[lo:lo + data.size] = data

    def gather(self, addrs: np.ndarray) -> np.ndarray:
        """Bytes at ``addrs`` (any shape)."""
        return self.buf[addrs]

    def scatter(self, addrs: np.ndarray, data: np.ndarray) -> None:
        """Bytes ``data`` to ``addrs``, in order (a repeated address keeps the last byte)."""
        self.buf[addrs.reshape(-1)] = data.reshape(-1)


def _typed_box(buf: np.ndarray, walk: Walk, t: np.dtype) -> np.ndarray | None:
    """The values of box walk ``walk`` (whole-byte type ``t`` = its storage) as a strided view of
    the space's bytes ``buf``, shape = the counts of its non-trivial levels; None if not a box."""
    bx = box(walk)
    if bx is None:
        return None
    lo, hi, counts, steps = bx
    sz = t.itemsize
    if walk.base + lo * sz < 0 or walk.base + (hi + 1) * sz > buf.size:
        raise IndexError(f"walk bytes outside a space of {buf.size} bytes")
    first = walk.base + sum(lv.initial for lv in walk.levels) * sz
    return np.ndarray(counts, dtype=t, buffer=buf, offset=first,
                      strides=tuple(s * sz for s in steps))


class Memory:
    """All data spaces of one machine: ``space(Space.HBSM, tpb)`` etc."""

    def __init__(self, machine: Machine):
        self.machine = machine
        self._spaces: dict[tuple[int, int], FlatBytes] = {}

    def space(self, space: Space, tpb: int = 0) -> FlatBytes:
        key = (int(space), tpb if space is Space.HBSM else 0)
        s = self._spaces.get(key)
        if s is None:
            s = self._spaces[key] = FlatBytes(space_size(self.machine, Space(space)))
        return s

    # --- raw bytes ------------------------------------------------------------------------------
    def write_bytes(self, space: Space, tpb: int, address: int, data: bytes | np.ndarray) -> None:
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
                view = _typed_box(mem.buf, walk, vt)
                if view is not None:
                    v = view.reshape(-1)  # a copy unless the beats have one stride
                    if np.may_share_memory(v, mem.buf):  # still a view
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
                return mem.buf[:mem.size - mem.size % sz].view(vt)[first + offsets]
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
            vt = _SAME.get(dt)
            if vt is not None and values.size == walk.num_elements and walk.injective:
                view = _typed_box(mem.buf, walk, vt)
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

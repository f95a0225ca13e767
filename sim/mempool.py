"""A pool of the data spaces' mappings across :class:`~m100.sim.memory.Memory` objects.

Every run of the interpreter makes a fresh :class:`~m100.sim.memory.Memory` (``Simulator``), and
every space of it is an anonymous mapping that the kernel backs page by page when first written:
a ResNet-18 224 run took ~39 000 page faults (the program's segments ~11 500 of them, the run's
activations the rest), ~0.1 CPU-s of system time at the kernel's zeroing and mapping of fresh
pages, and as much again to give the pages back when the mapping went (``munmap``).

A whole space's mapping (``FlatBytes.whole``) now goes back to this pool when its space object
is collected, and the next space of the same size takes it. It is handed out zero, as a fresh
mapping is: when it is taken, every page the kernel reports resident (``mincore(2)``: a page is
resident once it was written or read) is set to zero, one slice per run of resident pages -- a
``memset`` of pages that stay mapped instead of a fault per page -- and every page the kernel
does not report resident -- one swapped out keeps its bytes -- is dropped
(``madvise(MADV_DONTNEED)``: it reads as zero afterwards; nearly free where nothing was ever
mapped). The bytes a run sees are therefore the same as with a fresh mapping (zero until
written), by construction: nothing else of a pooled mapping survives. The zeroing is done when a
mapping is taken, not when it is given back, so a process that runs a program once (``m100 run``)
pays nothing for the pool.

A mapping of :data:`DROP_WHOLE` bytes or more (a 64 GiB DDR) is not scanned: all its pages are
dropped at once (``MADV_DONTNEED``: zero afterwards, as a fresh mapping), which costs ~0.1 ms where
the scan cost ~0.01 CPU-s, and the next run faults in the few pages it writes.

Pages of a program file mapped into a space (:func:`map_file`: a program's weights, private to
the process -- copy-on-write) are part of its mapping too. Given back and taken again, such a
range would not read as zero after ``MADV_DONTNEED`` (a private file page reads the file's bytes
again): the ranges a mapping holds from files are therefore kept here (by its address) and made
anonymous again -- a fresh zero mapping of the same addresses (``mmap(MAP_FIXED)``) -- before the
mapping is zeroed and handed out.

A mapping is not kept when an array still views it after its space is gone (its reference count
says so; the view keeps its bytes), when ``mincore`` or ``madvise`` is not available (not
Linux), or when the pool already holds :data:`MAX_PER_SIZE` mappings of its size; it is then
unmapped as before. The pool holds at most what the spaces that went held, never more pages than
they had backed. :data:`POOL` False maps every space afresh (the tests compare the two).
"""

from __future__ import annotations

import ctypes
import mmap
import platform
import sys

import numpy as np

#: Keep whole spaces' mappings for the next space of the same size (False: a fresh mapping each).
POOL = True
#: The mappings of one size the pool keeps at most (a machine's HBSMs are one size each).
MAX_PER_SIZE = 128
PAGE = mmap.PAGESIZE  # (the host's pages, what mincore reports on)

_free: dict[int, list[np.ndarray]] = {}  # size -> mappings given back, not zeroed yet
_vecs: dict[int, np.ndarray] = {}  # mincore's result vector per page count (kept: no faults)


_files: dict[int, list[tuple[int, int]]] = {}  # mapping's address -> [lo, hi) mapped from files


def _load_libc():
    """(mincore, madvise, mmap) from the C library, or Nones when one is missing (the pool is
    then off: every space maps afresh; no file is mapped into a space)."""
    if not sys.platform.startswith("linux"):
        return None, None, None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        f, g, h = libc.mincore, libc.madvise, libc.mmap
    except (OSError, AttributeError):  # pragma: no cover - not glibc / musl
        return None, None, None
    f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    f.restype = ctypes.c_int
    g.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    g.restype = ctypes.c_int
    h.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                  ctypes.c_long]
    h.restype = ctypes.c_void_p
    if platform.machine() not in ("x86_64", "AMD64", "aarch64", "arm64"):
        h = None  # pragma: no cover - mmap's flag values below are those of these two
    return f, g, h


_MINCORE, _MADVISE, _MMAP = _load_libc()
#: mmap(2)'s flags on Linux: MAP_FIXED (replace whatever the range held) and MAP_ANONYMOUS
_MAP_FIXED, _MAP_ANONYMOUS = 0x10, 0x20
#: Linux's MAP_NORESERVE (no swap reserved: as the spaces' own mappings, sim/memory.py)
_MAP_NORESERVE = 0x4000
#: madvise(2)'s MADV_DONTNEED on Linux (a private anonymous range reads as zero afterwards)
_MADV_DONTNEED = 4
#: madvise(2)'s MADV_POPULATE_WRITE (Linux >= 5.14): back a range's pages now, writable, as a
#: write to each would -- without writing (a fresh private anonymous page is zero)
_MADV_POPULATE_WRITE = 23
#: madvise(2)'s MADV_POPULATE_READ (Linux >= 5.14): map a range's pages now, as a read of each
#: would (a file's pages from the page cache: no zeroing, no copy)
_MADV_POPULATE_READ = 22

#: Back the pages a run is about to write in one call per range (:func:`populate`, from
#: :meth:`~m100.sim.memory.Memory.prefault`); False: each page is faulted in by its first write
#: (the tests compare the two).
PREFAULT = True
#: Ranges closer than this many bytes are backed as one (the pages between them cost less than
#: another call).
PREFAULT_GAP = 1 << 16


def resident_runs(buf: np.ndarray) -> np.ndarray | None:
    """[[first page, end page), ...] of the runs of resident pages of the mapping ``buf`` (its
    first byte page-aligned), or None when ``mincore`` fails."""
    n = -(-buf.size // PAGE)
    vec = _vecs.get(n)
    if vec is None:  # (rounded up to whole words; the kernel writes the first n bytes)
        # an anonymous mapping of its own, not numpy's allocation: numpy advises huge pages
        # for 4 MB and more (m100/mempolicy.py), and a 64 GiB DDR's 16 MB vector was then
        # eight 2 MB pages the kernel zeroed at mincore's first write -- 0.1-0.18 CPU-s of
        # system time at times (the first pooled take: a first full run after a functional
        # one), against ~0.005 for its 4 096 small pages
        vec = _vecs[n] = np.frombuffer(mmap.mmap(-1, -(-n // 8) * 8), dtype=np.uint8)
    if _MINCORE(buf.ctypes.data, buf.size, vec.ctypes.data) != 0:
        return None
    # blocks of 2**15 pages whose bytes are not all zero first (a 64 GiB DDR has 16 M pages,
    # a run touches a few of them; a maximum per block is far cheaper than a nonzero scan),
    # then the resident pages of those blocks (bit 0 of each byte), then their runs
    words = vec.view(np.uint64)
    per = 4096  # words of 8 pages per block
    if words.size > per and words.size % per == 0:
        blocks = np.flatnonzero(words.reshape(-1, per).max(axis=1))
        idx = (blocks[:, None] * per + np.arange(per)).reshape(-1)
        words = idx[words[idx] != 0]
    else:
        words = np.flatnonzero(words)
    if not words.size:
        return np.zeros((0, 2), dtype=np.int64)
    pages = (words[:, None] * 8 + np.arange(8)).reshape(-1)
    pages = pages[(vec[pages] & 1) != 0]
    if not pages.size:
        return np.zeros((0, 2), dtype=np.int64)
    brk = np.flatnonzero(np.diff(pages) != 1)
    starts = pages[np.concatenate(([0], brk + 1))]
    ends = pages[np.concatenate((brk, [pages.size - 1]))] + 1
    return np.stack([starts, ends], axis=1)


def _zeroed(buf: np.ndarray) -> bool:
    """Set the mapping ``buf`` to zero: its resident runs by ``memset``, every page between
    them dropped (False when the kernel refused: not to be used)."""
    runs = resident_runs(buf)
    if runs is None:  # pragma: no cover - mincore failed
        return False
    # A page that is not resident may still hold bytes: one swapped out (mincore reports it
    # absent) comes back with them. Every range between the resident runs is therefore given
    # back to the kernel (MADV_DONTNEED: a private anonymous page reads as zero afterwards;
    # nearly free where nothing was ever mapped), and the resident runs are set to zero.
    base, n = buf.ctypes.data, -(-buf.size // PAGE)
    edges = [0, *runs.reshape(-1).tolist(), n]
    for a, b in zip(edges[0::2], edges[1::2]):
        if b > a and _MADVISE(base + a * PAGE, (b - a) * PAGE, _MADV_DONTNEED) != 0:
            return False  # pragma: no cover - the range could not be dropped
    for a, b in runs.tolist():
        buf[a * PAGE:b * PAGE] = 0
    return True


def populate(buf: np.ndarray, lo: int, hi: int) -> None:
    """Back the pages holding bytes ``[lo, hi)`` of the mapping ``buf`` (its first byte
    page-aligned: a whole space's mapping) now, with one ``madvise(MADV_POPULATE_WRITE)``,
    instead of one page fault per page at its first write. The bytes do not change: a page
    not backed yet comes zero, as its first write would have found it, and a backed page is
    left as it is. A first functional ResNet-18 224 run writes ~105 of its 56 HBSMs' 112 MB
    (~27 000 pages; docs/speed-log.md, session 33). Nothing is done where the kernel has no such
    advice (before Linux 5.14: EINVAL), or without :data:`PREFAULT` -- the run faults the pages
    in as before."""
    if not PREFAULT or _MADVISE is None:
        return
    base = buf.ctypes.data
    if base % PAGE:
        return
    lo = max(0, lo) // PAGE * PAGE
    hi = min(buf.size, -(-hi // PAGE) * PAGE)
    if hi > lo:
        _MADVISE(base + lo, hi - lo, _MADV_POPULATE_WRITE)  # (a refusal changes nothing)


#: Map the whole pages of a program file's segments into a space (:func:`map_file`, from
#: ``sim/segments.py``); False: their bytes are copied (the tests compare the two).
MAP_FILES = True


def map_file(buf: np.ndarray, lo: int, hi: int, fd: int, offset: int) -> bool:
    """Make bytes ``[lo, hi)`` of the mapping ``buf`` (its first byte page-aligned: a whole
    space's mapping) a private mapping of the file ``fd`` from byte ``offset`` on: the file's
    bytes, read from the page cache as they are read (no zeroing, no copy; the pages mapped now,
    ``MADV_POPULATE_READ``), copied only where a run writes them (copy-on-write). ``lo``, ``hi``
    and ``offset`` are multiples of :data:`PAGE`. False (nothing changed) without
    :data:`MAP_FILES`, where the C library or the kernel refuses, or for a range that is not
    whole pages: the caller copies the bytes then. The range is kept (``_files``) so that the
    pool makes it anonymous again before it hands the mapping out (:func:`take`)."""
    if not MAP_FILES or _MMAP is None or _MADVISE is None or hi <= lo:
        return False
    base = buf.ctypes.data
    if base % PAGE or lo % PAGE or hi % PAGE or offset % PAGE or lo < 0 or hi > buf.size:
        return False
    got = _MMAP(base + lo, hi - lo, mmap.PROT_READ | mmap.PROT_WRITE,
                mmap.MAP_PRIVATE | _MAP_FIXED | _MAP_NORESERVE, fd, offset)
    if got != base + lo:  # (MAP_FAILED; a fixed mapping is at its address or nowhere)
        return False  # pragma: no cover - the kernel refused (the range is as it was)
    _files.setdefault(base, []).append((lo, hi))
    _MADVISE(base + lo, hi - lo, _MADV_POPULATE_READ)  # (a refusal changes nothing)
    return True


def file_ranges(buf: np.ndarray) -> list[tuple[int, int]]:
    """The ranges of the mapping ``buf`` that :func:`map_file` mapped from files."""
    return list(_files.get(buf.ctypes.data, ()))


def _anonymize(buf: np.ndarray) -> bool:
    """Map every range of ``buf`` that was mapped from a file anonymous again (zero, as a fresh
    mapping); False when the kernel refused one (the mapping is then not to be used)."""
    base = buf.ctypes.data
    ranges = _files.pop(base, ())
    for lo, hi in ranges:
        got = _MMAP(base + lo, hi - lo, mmap.PROT_READ | mmap.PROT_WRITE,
                    mmap.MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_FIXED | _MAP_NORESERVE, -1, 0)
        if got != base + lo:  # pragma: no cover - the kernel refused
            return False
    return True


#: A pooled mapping of at least this many bytes is set to zero by dropping all its pages
#: (one ``MADV_DONTNEED``, ~0.1 ms for a 64 GiB DDR) instead of scanning it with ``mincore``
#: (~0.01 CPU-s for 64 GiB: a byte per page) and setting its resident pages to zero: such a
#: space is sparse -- a ResNet-50 run leaves ~225 resident pages of its DDR besides the weights
#: mapped from the program file -- and its few pages are faulted in again by the next run.
#: None: every mapping scanned.
DROP_WHOLE: int | None = 1 << 32


def take(size: int, make) -> np.ndarray:
    """A zero mapping of ``size`` bytes: one from the pool (set to zero now), else
    ``make(size)``."""
    if POOL:
        got = _free.get(size)
        while got:
            buf = got.pop()
            if not _anonymize(buf):
                continue  # pragma: no cover - the kernel refused
            if DROP_WHOLE is not None and buf.size >= DROP_WHOLE:
                if _MADVISE(buf.ctypes.data, -(-buf.size // PAGE) * PAGE, _MADV_DONTNEED) == 0:
                    return buf  # (a private anonymous range reads as zero afterwards)
            elif _zeroed(buf):
                return buf
    return make(size)


def give(buf: np.ndarray) -> None:
    """Keep ``buf`` for the next :func:`take` of its size. Called by the space holding it as the
    space goes (``FlatBytes.__del__``, whose attribute is then the array's only other
    reference: a view of it held anywhere else keeps it out of the pool)."""
    # references to the array here when nothing else holds it: the space's attribute, this
    # parameter and getrefcount's own argument
    if not POOL or _MINCORE is None or _MADVISE is None or sys.getrefcount(buf) != 3 \
            or buf.ctypes.data % PAGE != 0:
        _forget(buf)
        return
    got = _free.setdefault(buf.size, [])
    if len(got) < MAX_PER_SIZE:
        got.append(buf)
    else:
        _forget(buf)


def _forget(buf: np.ndarray) -> None:
    """Drop the file ranges kept for ``buf``, a mapping not kept: it is unmapped with its last
    reference, and its addresses may be another mapping's later."""
    if _files:
        # (not buf.ctypes: it imports, which fails while the interpreter shuts down)
        _files.pop(buf.__array_interface__["data"][0], None)

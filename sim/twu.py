"""Tensor-Walker address streams: element offsets, contiguity, and HBSM bank-access histograms.

A walk's beats are ``Walk.offsets()`` (levels broadcast into one index array, never a Python loop per
element). For timing, :func:`bank_accesses` counts the HBSM bank accesses of a walk's address stream
*analytically* from its levels, so it also works in ``--timing-only`` mode on walks of billions of
beats:

* the stream is cut into *runs*: if the innermost (non-trivial) level's stride is at most one bank
  granule (``hbsm_bank_width`` bytes), each pass of that level is one run of bytes; consecutive beats
  falling in the same granule coalesce into one access (a 32 B port reads a whole granule);
  otherwise every beat is its own access;
* the distribution of run start addresses modulo one bank sweep (``banks * width`` bytes) is the
  circular convolution of every outer level's residue histogram (FFT over 1024 residues);
* each run start residue contributes the granules its run covers, round-robin over the banks.

This is exact for the usual contiguous and strided walks (every test in ``test/unit/sim``), and an
approximation for i4 walks with odd strides.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from m100.targets.m100.isa import Level, Walk
from m100.targets.m100.machine import Machine


#: Walks that are affine boxes are read, written, split into blocks and marked for the race
#: checker through strided numpy views (no element index arrays). False: element by element,
#: the reference path (tests run both and compare results bit for bit).
STRIDED = True

#: Derivations that are functions of a walk's levels alone -- its box, contiguity, beat count,
#: block sub-levels, reshaped sub-boxes -- are made once per distinct levels tuple and shared by
#: every walk with those levels, whatever its base, space, TPB or element type (ResNet-18 224:
#: 18 174 operand walks, 728 distinct levels tuples). What depends on the base (byte
#: addresses) is added per walk. False: derived per walk (tests compare the two).
GEOMETRY = True

_GEO: dict = {}
_GEO_MAX = 1 << 16  # entries before the table is emptied (a process running many programs)
#: :func:`per_levels` by the levels tuple's identity: ``(kind, id(levels), args) -> (levels,
#: result)``. The entry holds the tuple, so its id names no other object while it is there; a
#: decoded program's walks with equal levels share one tuple (``encoding_read._Reader.walk``), so most
#: lookups hash no :class:`Level` (a Python ``__hash__`` and ``__eq__`` per level: ~52 000 of
#: each in a first functional ResNet-18 224 run). (Session 24's switch between this and the
#: by-value lookup alone, ``BY_ID``, was dropped in session 31: test/unit/sim/test_strided.py
#: checks the identity path against each derivation made afresh.)
_IDS: dict = {}


def per_levels(kind: str, levels: tuple, make, *args):
    """``make(levels, *args)``, computed once per ``(kind, levels, args)`` while
    :data:`GEOMETRY` is on (the result is shared: it must never be changed). Found by the
    tuple's identity first (:data:`_IDS`), else by its value: the same result either way."""
    if not GEOMETRY:
        return make(levels, *args)
    ikey = (kind, id(levels), args)
    got = _IDS.get(ikey)
    if got is not None and got[0] is levels:
        return got[1]
    key = (kind, levels, args)
    got = _GEO.get(key, _GEO)
    if got is _GEO:
        if len(_GEO) >= _GEO_MAX:
            _GEO.clear()
        got = _GEO[key] = make(levels, *args)
    if len(_IDS) >= _GEO_MAX:
        _IDS.clear()
    _IDS[ikey] = (levels, got)
    return got


def beats(walk: Walk) -> int:
    """``walk.num_elements`` (the product of its levels' counts), shared per levels tuple."""
    n = walk.__dict__.get("num_elements")
    if n is None:
        n = per_levels("beats", walk.levels, _beats)
    return n


def _beats(levels: tuple) -> int:
    return math.prod(lv.count for lv in levels)


def element_offsets(walk: Walk) -> np.ndarray:
    return walk.offsets()


def _fixed(lv: Level, k: int) -> Level:
    """Level ``lv`` pinned to its ``k``-th value (one beat)."""
    v = lv.initial + k * lv.step
    return Level(v, 0, 1) if lv.step == 0 else Level(v, lv.step, v)


def _sub_range(lv: Level, k0: int, k: int) -> Level:
    """Values ``k0 .. k0 + k - 1`` of level ``lv``."""
    if lv.step == 0:
        return Level(lv.initial, 0, k)
    v = lv.initial + k0 * lv.step
    return Level(v, lv.step, v + (k - 1) * lv.step)


def walk_block(walk: Walk, blocks: int, b: int) -> Walk | None:
    """The walk whose beats are beats ``[b * n / blocks, (b + 1) * n / blocks)`` of ``walk`` (n =
    its beat count) in the same order, when that chunk is a box: outer levels pinned to one value
    and one level cut to a sub-range. None when the chunk is not a box (or n % blocks != 0)."""
    if blocks == 1:
        return walk
    if not STRIDED:
        return None
    # kept on the (immutable) walk: hashing a walk for a shared cache costs ~3 us a lookup
    got = walk.__dict__.get("_blocks")
    if got is None:
        got = {}
        object.__setattr__(walk, "_blocks", got)
    key = (blocks, b)
    sub = got.get(key, False)
    if sub is False:
        lv = per_levels("block", walk.levels, _block_levels, blocks, b)
        sub = got[key] = None if lv is None else \
            Walk(walk.space, walk.tpb, walk.base, walk.dtype, lv)
    return sub


def _block_levels(levels: tuple, blocks: int, b: int) -> tuple | None:
    """The levels of :func:`walk_block`'s sub-walk (None: the chunk is not a box)."""
    levels = list(levels)
    need = blocks
    for i, lv in enumerate(levels):
        c = lv.count
        if c == 1:
            continue
        if c % need == 0:
            k = c // need
            levels[i] = _sub_range(lv, b * k, k)
            need = 1
            break
        if need % c:
            return None
        per = need // c  # chunks per value of this level
        levels[i] = _fixed(lv, b // per)
        b, need = b % per, per
    if need != 1:
        return None
    return tuple(levels)


def box(walk: Walk) -> tuple[int, int, tuple[int, ...], tuple[int, ...]] | None:
    """(lowest element offset, highest, counts, steps) of the walk's non-trivial levels, outermost
    first: its beats are ``start + sum(i_k * steps[k])`` with ``start`` = the sum of the initials.
    None for sub-byte element types (two elements share a byte), or when :data:`STRIDED` is off."""
    if walk.dtype.bits < 8 or not STRIDED:
        return None
    got = walk.__dict__.get("_box")  # a walk is immutable: computed once per walk object
    if got is None:
        got = per_levels("box", walk.levels, _box)
        object.__setattr__(walk, "_box", got)
    return got


def _box(levels: tuple) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    lo = hi = 0
    for lv in levels:  # (Walk.offset_range)
        a, b = lv.initial, lv.last
        lo += min(a, b)
        hi += max(a, b)
    counts, steps = [], []
    for lv in levels:
        if lv.count > 1:
            counts.append(lv.count)
            steps.append(lv.step)
    return lo, hi, tuple(counts), tuple(steps)


def strided_bytes(buf: np.ndarray, walk: Walk, lo_elem: int) -> np.ndarray:
    """A view of ``buf`` (the bytes from element offset ``lo_elem`` of ``walk`` on) with shape
    ``counts + (element bytes,)``: the walk's beats in walk order, no index array."""
    _, _, counts, steps = box(walk)
    sz = walk.dtype.bits // 8
    start = sum(lv.initial for lv in walk.levels) - lo_elem
    return np.lib.stride_tricks.as_strided(buf[start * sz:], shape=counts + (sz,),
                                           strides=tuple(s * sz for s in steps) + (1,),
                                           writeable=True)


def box_mask(levels: tuple, sz: int) -> np.ndarray:
    """The bytes a box walk of these levels and ``sz``-byte elements touches, as a read-only
    bool bitmap over [its lowest byte, its highest + 1) relative to that lowest byte (a walk at
    base ``B`` touches ``B + lo * sz + k`` for every True ``k``); one array per geometry."""
    return per_levels("mask", levels, _box_mask, sz)


def _box_mask(levels: tuple, sz: int) -> np.ndarray:
    lo, hi, counts, steps = _box(levels)
    mask = np.zeros((hi - lo + 1) * sz, dtype=np.bool_)
    start = sum(lv.initial for lv in levels) - lo
    np.lib.stride_tricks.as_strided(mask.view(np.uint8)[start * sz:], shape=counts + (sz,),
                                    strides=tuple(s * sz for s in steps) + (1,),
                                    writeable=True)[...] = 1
    mask.flags.writeable = False
    return mask


def contiguous_start(walk: Walk) -> int | None:
    """The first element offset if the walk's beats are ``start, start+1, ...`` (else None)."""
    d = walk.__dict__  # a walk is immutable: computed once per walk object
    if "_cstart" in d:
        return d["_cstart"]
    got = per_levels("cstart", walk.levels, _contiguous_start)
    object.__setattr__(walk, "_cstart", got)
    return got


def _contiguous_start(levels: tuple) -> int | None:
    expect = 1
    start = 0
    for lv in reversed(levels):
        c = lv.count
        start += lv.initial
        if c == 1:
            continue
        if lv.step != expect:
            return None
        expect *= c
    return start


def _run_structure(base: int, bits: int, levels: tuple, width: int
                   ) -> tuple[int, list[np.ndarray], float]:
    """(start byte offset, residue arrays of the outer levels in bytes, run length in bytes) of a
    walk's ``base``, element ``bits`` and ``levels``."""
    esize = max(bits / 8, 1 / 2)
    start = base * 8  # in bits
    nontriv = [lv for lv in levels if lv.count > 1]
    for lv in levels:
        if lv.count == 1:
            start += lv.initial * bits
    run_bytes = max(esize, 1.0)
    outer = nontriv
    if nontriv:
        inner = nontriv[-1]
        stride_b = abs(inner.step) * bits / 8
        if inner.step == 0:  # a repeat level: the same element every beat, one access per pass
            start += inner.initial * bits
            run_bytes = max(esize, 1.0)
            outer = nontriv[:-1]
        elif stride_b <= width:
            lo = min(inner.initial, inner.last)
            start += lo * bits
            run_bytes = (inner.count - 1) * stride_b + max(esize, 1.0)
            outer = nontriv[:-1]
    arrays = [(lv.values() * bits) for lv in outer]
    return start // 8, [a // 8 for a in arrays], run_bytes


@functools.lru_cache(maxsize=4096)
def _pattern(run_bytes: int, width: int, banks: int) -> np.ndarray:
    """[sweep, banks] accesses made by a run of ``run_bytes`` starting at each residue."""
    sweep = width * banks
    s = np.arange(sweep, dtype=np.int64)
    g0 = s // width
    g1 = (s + run_bytes - 1) // width
    n = g1 - g0 + 1
    full, part = n // banks, n % banks
    rel = (np.arange(banks)[None, :] - g0[:, None]) % banks
    return full[:, None] + (rel < part[:, None])


#: At most this many runs: their start residues are enumerated (an exact count) instead of
#: convolved by FFT (exact after rounding; the same integers). False: always the FFT (tests).
DIRECT_RUNS = 1024


def _walk_bank_accesses(walk: Walk, width: int, banks: int) -> np.ndarray:
    return _bank_hist(walk.base, walk.dtype.bits, walk.levels, width, banks)


def _bank_hist(base: int, bits: int, levels: tuple, width: int, banks: int) -> np.ndarray:
    """Accesses per bank of a walk (its base, element bits and levels). Every address enters
    modulo ``sweep = width * banks`` (bytes), and the base is a whole number of bytes: the
    histogram depends on ``base % sweep``, never on the walk's space or TPB."""
    sweep = width * banks
    start, arrays, run_bytes = _run_structure(base, bits, levels, width)
    if DIRECT_RUNS and math.prod(a.size for a in arrays) <= DIRECT_RUNS:
        res = np.array([start % sweep], dtype=np.int64)
        for a in arrays:
            res = ((res[:, None] + (a % sweep)[None, :]) % sweep).ravel()
        # the rows ``_pattern(run_bytes)[res]`` computed for these residues only (the same
        # integers): building the whole [sweep, banks] table was ~0.3 ms per run length, half
        # of a first timed ResNet-50 run's histograms (120 lengths for 1 381 walks)
        rb = int(np.ceil(run_bytes))
        g0 = res // width
        n = (res + rb - 1) // width - g0 + 1
        full, part = n // banks, n % banks
        rel = (np.arange(banks)[None, :] - g0[:, None]) % banks
        return (full[:, None] + (rel < part[:, None])).sum(axis=0).astype(np.float64)
    hist = np.zeros(sweep, dtype=np.float64)
    hist[start % sweep] = 1.0
    spec = None
    for a in arrays:
        h = np.bincount(a % sweep, minlength=sweep).astype(np.float64)
        f = np.fft.rfft(h)
        spec = f if spec is None else spec * f
    if spec is not None:
        hist = np.rint(np.fft.irfft(np.fft.rfft(hist) * spec, n=sweep))
    pat = _pattern(int(np.ceil(run_bytes)), width, banks)
    return hist @ pat


#: A walk's bank histogram at ``base + q * width`` is its histogram at ``base`` rolled by ``q``
#: banks: every run starts ``q`` granules later, covers as many granules and so the same banks
#: moved by ``q`` (:func:`_bank_hist`: ``g0`` moves by ``q``, ``n`` does not). So it is built once
#: per base residue modulo ``width`` and rolled (ResNet-50's first full run: 1 381 histograms
#: built, 667 with this). The counts are integers, the roll moves them: the same values. False:
#: built per base residue modulo the sweep (tests compare the two).
ROLL = True


@functools.lru_cache(maxsize=16384)
def _cached(base_mod: int, bits: int, levels: tuple, width: int, banks: int) -> tuple[float, ...]:
    q = base_mod // width
    if ROLL and q:
        got = _cached(base_mod - q * width, bits, levels, width, banks)
        q %= len(got)  # (np.roll by q: bank j counts what bank j - q counted)
        return got[-q:] + got[:-q] if q else got
    return tuple(_bank_hist(base_mod, bits, levels, width, banks).tolist())


#: :func:`_accesses`' shared arrays by (base residue, element bits, id(levels), width, banks):
#: (levels, array) -- the entry holds the levels tuple, so its id names no other object while
#: it is there. The lru caches behind it hash each :class:`Level` in Python (a generated
#: ``__hash__``): ~11 000 lookups in a first full ResNet-50 run.
_ACC: dict = {}


def _accesses(walk: Walk, width: int, banks: int) -> np.ndarray:
    """:func:`_cached` as a read-only array, kept on the walk object too (a walk is immutable). The
    shared cache is keyed by what the histogram depends on (:func:`_bank_hist`): the same
    tile on every TPB, or at another address with the same residue, is counted once (ResNet-18:
    ~12 800 walks, ~800 distinct keys); found by the levels tuple's identity first (:data:`_ACC`),
    else by value."""
    d = walk.__dict__
    key = f"_acc{width}_{banks}"
    got = d.get(key)
    if got is None:
        levels = walk.levels
        ik = (walk.base % (width * banks), walk.dtype.bits, id(levels), width, banks)
        e = _ACC.get(ik)
        if e is not None and e[0] is levels:
            got = e[1]
        else:
            got = _cached_array(ik[0], ik[1], levels, width, banks)
            if len(_ACC) >= _GEO_MAX:  # (a process running many programs)
                _ACC.clear()
            _ACC[ik] = (levels, got)
        d[key] = got
    return got


@functools.lru_cache(maxsize=16384)
def _cached_array(base_mod: int, bits: int, levels: tuple, width: int, banks: int) -> np.ndarray:
    """:func:`_cached` as one read-only float64 array shared by every walk of that key (the
    cost model only computes new arrays from it; writing into it raises)."""
    a = np.array(_cached(base_mod, bits, levels, width, banks), dtype=np.float64)
    a.flags.writeable = False
    return a


def bank_accesses(walk: Walk, machine: Machine) -> np.ndarray:
    """HBSM bank accesses (granule reads/writes) per bank for the whole walk, shape [banks]."""
    return _accesses(walk, machine.hbsm_bank_width, machine.hbsm_banks)


def block_slice(n_total: int, blocks: int, b: int) -> slice:
    """The element range of block ``b`` of a flat sequence split into equal blocks."""
    per = n_total // blocks
    return slice(b * per, (b + 1) * per)


def sram_bank_accesses(walk: Walk, machine: Machine) -> np.ndarray:
    """CCB SRAM interleave granules touched per bank (``ccb_sram_interleave`` bytes round-robin
    over ``ccb_sram_banks``), shape [ccb_sram_banks]."""
    return _accesses(walk, machine.ccb_sram_interleave, machine.ccb_sram_banks)


def reshape(walk: Walk, shape: tuple[int, ...]) -> Walk | None:
    """The walk with one level per dim of ``shape`` whose beats are the beats of ``walk`` in the
    same order (numpy's reshape without a copy, on the levels' counts and steps); None when its
    levels can not be split/merged that way (or the sizes differ, or :data:`STRIDED` is off)."""
    if not STRIDED:
        return None
    levels = _reshape_levels(walk.levels, tuple(shape))
    return None if levels is None else Walk(walk.space, walk.tpb, walk.base, walk.dtype, levels)


def _reshape_levels(levels: tuple, shape: tuple[int, ...]) -> tuple | None:
    """:func:`reshape` on the levels (a function of them and ``shape`` alone)."""
    if math.prod(shape) != _beats(levels):
        return None
    start = sum(lv.initial for lv in levels)
    old = [(lv.count, lv.step) for lv in levels if lv.count > 1]
    new = [(k, n) for k, n in enumerate(shape) if n > 1]
    steps = [0] * len(shape)
    oi = ni = 0
    while ni < len(new) and oi < len(old):
        oj, nj = oi + 1, ni + 1
        op, np_ = old[oi][0], new[ni][1]
        while op != np_:
            if np_ < op:
                np_ *= new[nj][1]
                nj += 1
            else:
                op *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):  # the old levels merged here must nest exactly
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        st = old[oj - 1][1]
        for k in range(nj - 1, ni - 1, -1):
            steps[new[k][0]] = st
            st *= new[k][1]
        oi, ni = oj, nj
    levels = [Level.span(n, s) for n, s in zip(shape, steps)]
    if not levels:
        return None
    lv0 = levels[0]
    levels[0] = Level(lv0.initial + start, lv0.step, lv0.final + (start if lv0.step else 0))
    return tuple(levels)


def sub_box(walk: Walk, shape: tuple[int, ...],
            sel: tuple[tuple[int, int, int], ...]) -> Walk | None:
    """The walk over the beats of ``walk`` (seen as ``shape``, :func:`reshape`) at the indices
    ``first + step * j`` (j < count) of every dim, ``sel`` = ((first, step, count), ...), in
    row-major order of those indices; None when ``walk`` does not reshape to ``shape``."""
    if not STRIDED:
        return None
    levels = per_levels("sub_box", walk.levels, _sub_box_levels, tuple(shape), tuple(sel))
    return None if levels is None else Walk(walk.space, walk.tpb, walk.base, walk.dtype, levels)


def _sub_box_levels(levels: tuple, shape: tuple[int, ...],
                    sel: tuple[tuple[int, int, int], ...]) -> tuple | None:
    r = _reshape_levels(levels, shape)
    if r is None:
        return None
    start = sum(lv.initial for lv in r)
    levels = []
    for lv, (first, step, count) in zip(r, sel):
        st = lv.step if lv.count > 1 else 0
        start += first * st
        levels.append(Level.span(count, st * step))
    lv0 = levels[0]
    levels[0] = Level(lv0.initial + start, lv0.step, lv0.final + (start if lv0.step else 0))
    return tuple(levels)

"""Stage 2a of sync insertion: which bytes each block of an instruction touches.

Block model (see ``isa.py``): ``Sync.blocks`` splits an instruction's outermost logical dimension
into equal blocks. For the operands that follow that dimension (the written operand of every kind,
the streamed source of copies/DMAs, matmul's ``a`` rows, CVU inputs whose rows match the output's
and that no stage reduces along axis 0) block ``b`` touches the ``b``-th equal chunk of the walk's
element sequence; every other operand (weights, reductions ...) is conservatively touched by every
block, except a convolution's input, whose block reads the input rows its windows cover.

* :func:`block_accesses`: every (memory, walk, written, split) access of one instruction;
* :class:`Chunks` / :func:`walk_chunks`: the bytes of each block of one access, as a bounding
  interval and, exactly, as sorted *runs* (the walk's inner levels that form one contiguous block
  fold into one run, so a strided walk costs one entry per row);
* :func:`access_need`: for two conflicting accesses, the need vector (per block of the later
  instruction, the last block of the earlier one whose bytes it meets);
* :func:`walk_rows` / :func:`rows_meet`: footprints that are rows of one period (column slices of
  one matrix) meet or not by arithmetic, without chunks.

Nothing here knows the global order or the executors: :mod:`.hazards` sweeps the accesses.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from m100.targets.m100 import isa
from m100.targets.m100.isa import CvuOp, Space

# walks with more elements than this are compared by bounding byte interval only (sound, coarser)
EXACT_LIMIT = 1 << 16

MemKey = tuple[int, int]  # (Space, TPB or 0)

_AXIS0_OPS = frozenset({CvuOp.RSUM, CvuOp.RMAX, CvuOp.RMIN, CvuOp.RMEAN, CvuOp.RPROD, CvuOp.SOFTMAX,
                        CvuOp.LAYERNORM, CvuOp.RMSNORM})


def mem_keys(w: isa.Walk) -> list[MemKey]:
    return [(int(w.space), w.tpb if w.space is Space.HBSM else 0)]


class Access(NamedTuple):
    """One operand walk of one instruction in one memory (a named tuple: ~43 000 of them on
    ResNet-50, each built in one call instead of a frozen dataclass's ``object.__setattr__`` per
    field)."""
    mem: MemKey
    walk: isa.Walk
    write: bool
    # True: block b touches chunk b of the element sequence; False: every block touches all of it;
    # a tuple: per block, the (start, stop) ranges of the element sequence it touches
    split: bool | tuple[tuple[tuple[int, int], ...], ...]
    name: str


def conv_input_rows(inst: isa.Conv2D, blocks: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Per block of a convolution (blocks split the n*oh output rows), the element ranges of the
    input ``x`` ([n, h, w, c] row-major) that its windows read, halo rows included."""
    oh, _ = inst.out_hw
    sh, dh, pt = inst.stride[0], inst.dilation[0], inst.pad[0]
    rows = inst.n * oh // blocks
    wc = inst.width * inst.c
    out = []
    for b in range(blocks):
        r = np.arange(b * rows, (b + 1) * rows)
        ni, oy = r // oh, r % oh
        rng = []
        for n in np.unique(ni):
            o = oy[ni == n]
            lo = max(0, int(o.min()) * sh - pt)
            hi = min(inst.h - 1, int(o.max()) * sh - pt + dh * (inst.kh - 1))
            if lo <= hi:
                rng.append((int(n * inst.h + lo) * wc, int(n * inst.h + hi + 1) * wc))
        out.append(tuple(rng))
    return tuple(out)


def block_accesses(inst: isa.Instruction) -> list[Access]:
    """Every (memory, walk, is_written, split-by-block) access of ``inst``."""
    out: list[Access] = []

    def add(name: str, w: isa.Walk, write: bool, split: bool, keys: list[MemKey] | None = None):
        for k in keys or mem_keys(w):
            out.append(Access(k, w, write, split, name))

    if isinstance(inst, isa.MatMul):
        add("a", inst.a, False, True)
        add("b", inst.b, False, False)
        add("c", inst.c, True, True)
        if inst.acc is not None:
            add("acc", inst.acc, False, True)
        if inst.post_in is not None:  # the post stages' operand: read block by block like C
            add("post_in", inst.post_in, False, True)
        for name, w, _ in inst.walks():
            if name in ("bias", "requant.per_channel", "dequant", "scale"):
                add(name, w, False, False)
    elif isinstance(inst, isa.Conv2D):
        nb = inst.sync.blocks
        for name, w, wr in inst.walks():
            if name == "x":
                add(name, w, False, conv_input_rows(inst, nb) if nb > 1 else False)
            else:
                add(name, w, wr, wr)
    elif isinstance(inst, isa.CvuPipeline):
        rank = len(inst.out_shape)
        axis0 = any(st.op in _AXIS0_OPS and st.axis in (0, -rank) for st in inst.stages)
        for i, (w, shp) in enumerate(zip(inst.inputs, inst.in_shapes)):
            split = (not axis0 and len(shp) == rank and shp[0] == inst.out_shape[0])
            add(f"inputs[{i}]", w, False, split)
        add("output", inst.output, True, True)
    elif isinstance(inst, (isa.Copy, isa.Fill)):
        for name, w, wr in inst.walks():
            add(name, w, wr, True)
    elif isinstance(inst, isa.Broadcast):
        add("src", inst.src, False, True)
        add("dst", inst.dst, True, True,
            [(int(Space.HBSM), t) for t in isa.tpbs_of(inst.tpb_mask)])
    elif isinstance(inst, isa.Dma):
        add("src", inst.src, False, True)
        keys = ([(int(Space.HBSM), t) for t in isa.tpbs_of(inst.tpb_mask)]
                if inst.tpb_mask else None)
        add("dst", inst.dst, True, True, keys)
    else:  # CsuCall and anything unknown: every operand, whole
        for name, w, wr in inst.walks():
            add(name, w, wr, False)
    return out


class Chunks:
    """The bytes each block ("chunk") of one access touches.

    ``lo[c], hi[c]``: the chunk's bounding byte interval; ``dense[c]``: it covers all of it.
    :meth:`runs` gives the exact set as sorted, disjoint *runs* of equal length (bytes): the
    walk's inner levels that form one contiguous block fold into a run, so a strided or windowed
    walk costs one entry per row, not per element. Runs are built eagerly for injective walks
    (cheap: only the outer levels are enumerated) and lazily, element by element, otherwise.
    ``exact_ok`` is false for chunks with more than ``EXACT_LIMIT`` runs (interval-only: sound).
    """

    def __init__(self, w: isa.Walk, sels: list, lo, hi, dense: list[bool], exact_ok: bool,
                 runs: list | None = None):
        self.walk, self.sels = w, sels  # sels[c]: slice or index array into w.offsets()
        self.lo, self.hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
        self.lol, self.hil = self.lo.tolist(), self.hi.tolist()
        self.dense = list(dense)
        self.all_dense = all(self.dense) or not exact_ok
        self.exact_ok = exact_ok
        self._runs: list = list(runs) if runs is not None else [None] * len(self.lol)

    def runs(self, c: int) -> tuple[np.ndarray, int]:
        got = self._runs[c]
        if got is None:
            if self.dense[c] or not self.exact_ok:
                got = (np.array([self.lol[c]], dtype=np.int64), self.hil[c] - self.lol[c])
            else:  # element by element
                w = self.walk
                bits = w.dtype.bits
                st = np.unique(w.base + np.unique(_offsets(w)[self.sels[c]]) * bits // 8)
                got = (st, max(1, bits // 8))
            self._runs[c] = got
        return got

    def exact(self, c: int) -> bool:
        """Whether chunk ``c`` should be refined run by run."""
        return self.exact_ok and not self.dense[c]


_chunk_cache: dict[tuple, Chunks] = {}
_offs_cache: dict[isa.Walk, np.ndarray] = {}


def _offsets(w: isa.Walk) -> np.ndarray:
    got = _offs_cache.get(w)
    if got is None:
        if len(_offs_cache) > 256:
            _offs_cache.clear()
        got = _offs_cache[w] = w.offsets()
    return got


def _fold(w: isa.Walk, gran: int) -> tuple[int, np.ndarray]:
    """(run length L in elements, start offset of every run in walk order): the innermost levels
    that cover a contiguous block of elements fold into one run, as long as L divides ``gran``
    (so every chunk boundary falls between runs). ``w`` must be injective."""
    levels = list(w.levels)
    L, inner_min, k = 1, 0, len(levels)
    while k > 0:
        lv = levels[k - 1]
        if lv.count == 1:
            inner_min += lv.initial
            k -= 1
            continue
        if abs(lv.step) != L or gran % (L * lv.count):
            break
        inner_min += min(lv.initial, lv.last)
        L *= lv.count
        k -= 1
    outer = isa.Walk(w.space, w.tpb, 0, w.dtype, tuple(levels[:k]))
    starts = (outer.offsets() if k else np.zeros(1, dtype=np.int64)) + inner_min
    return L, starts


def _coalesce(st: np.ndarray, rl: int) -> tuple[np.ndarray, int] | None:
    """Sorted disjoint runs ``st`` of ``rl`` bytes each, the adjacent ones merged: (starts,
    length) when every merged run has the same length, else None. A walk that writes a
    transposed layout (LLaMA prefill's RoPE into ``kT``: 18 rows x 4096 columns, one element per
    run in walk order) touches 4096 runs of 18 elements: the exact test stays cheap (issue 13,
    session 20: the interval test ordered RoPE's 56 stores into one chain)."""
    if st.size == 0:
        return st, rl
    brk = np.flatnonzero(np.diff(st) != rl) + 1
    first = np.concatenate(([0], brk))
    lens = np.diff(np.concatenate((first, [st.size])))
    if np.any(lens != lens[0]):
        return None
    return st[first], int(lens[0]) * rl


def walk_chunks(w: isa.Walk, nchunks: int, ranges=None) -> Chunks:
    """Per-chunk bytes: ``nchunks`` equal chunks of the element sequence, or, with ``ranges``
    (per chunk, (start, stop) element ranges), exactly those elements."""
    key = (w, nchunks, ranges)
    got = _chunk_cache.get(key)
    if got is not None:
        return got
    bits = w.dtype.bits
    nb = max(1, bits // 8)
    n = w.num_elements
    if ranges is None:
        per = n // nchunks
        spans = [((c * per, (c + 1) * per),) for c in range(nchunks)]
        gran = per
    else:
        spans = ranges
        gran = math.gcd(n, *(x for rng in ranges for ab in rng for x in ab))
    if bits >= 8 and w.injective:
        L, rstart = _fold(w, gran)
        los, his, dense, runs = [], [], [], []
        for rng in spans:
            idx = [rstart[a // L:z // L] for a, z in rng]
            st = np.sort(w.base + np.concatenate(idx) * nb) if idx else np.zeros(0, np.int64)
            if st.size == 0:
                los.append(0)
                his.append(0)
                dense.append(True)
                runs.append((st, L * nb))
                continue
            lo, hi = int(st[0]), int(st[-1]) + L * nb
            los.append(lo)
            his.append(hi)
            dense.append(hi - lo == st.size * L * nb)
            runs.append((st, L * nb))
        exact_ok = n // L <= EXACT_LIMIT
        if not exact_ok:  # runs short in walk order may be long in address order
            merged = [_coalesce(st, rl) for st, rl in runs]
            if all(m is not None and m[0].size <= EXACT_LIMIT for m in merged):
                runs, exact_ok = merged, True
        res = Chunks(w, [None] * len(spans), los, his, dense, exact_ok, runs)
    else:  # repeats or sub-byte elements: bounds now, exact sets lazily (element by element)
        offs = _offsets(w)
        sels = [np.concatenate([np.arange(a, z) for a, z in rng]) if rng else
                np.zeros(0, dtype=np.int64) for rng in spans]
        los, his = [], []
        for sel in sels:
            o = offs[sel]
            los.append(w.base + int(o.min()) * bits // 8 if o.size else 0)
            his.append(w.base + ((int(o.max()) + 1) * bits + 7) // 8 if o.size else 0)
        res = Chunks(w, sels, los, his, [lo == hi for lo, hi in zip(los, his)],
                     n <= EXACT_LIMIT)
    if len(_chunk_cache) > 4096:
        _chunk_cache.clear()
    _chunk_cache[key] = res
    return res


def is_dense(w: isa.Walk) -> bool:
    """The walk touches every byte of its bounding interval (a permuted row-major box)."""
    if w.dtype.bits < 8:
        return False
    lv = sorted((abs(x.step), x.count) for x in w.levels if x.count > 1)
    if any(st == 0 for st, _ in lv):
        return False
    span = 1
    for st, cnt in lv:
        if st != span:
            return False
        span *= cnt
    return True


def _overlap(a: Chunks, ia: int, b: Chunks, ib: int) -> bool:
    """Exact test of two chunks whose intervals meet: do two of their runs intersect?"""
    sa, la = a.runs(ia)
    sb, lb = b.runs(ib)
    lo, hi = max(a.lol[ia], b.lol[ib]), min(a.hil[ia], b.hil[ib])
    sa = sa[(sa + la > lo) & (sa < hi)]
    sb = sb[(sb + lb > lo) & (sb < hi)]
    if not sa.size or not sb.size:
        return False
    if sa.size > sb.size:
        sa, la, sb, lb = sb, lb, sa, la
    # runs of one chunk are sorted and disjoint: for every run of b, the last run of a that
    # starts before it ends is the only candidate
    idx = np.searchsorted(sa, sb + lb, side="left") - 1
    ok = idx >= 0
    return bool(np.any(sa[idx[ok]] + la > sb[ok]))


def _need_exact(ci: Chunks, cj: Chunks, ni: int) -> np.ndarray:
    """For each chunk of j, the last chunk of i it overlaps (or -1): interval test, exact
    refinement (runs) where intervals meet and a chunk is not dense."""
    out = []
    li, hi_, lj, hj = ci.lol, ci.hil, cj.lol, cj.hil
    for c in range(len(lj)):
        a, z = lj[c], hj[c]
        k = ni - 1
        while k >= 0:
            if li[k] < z and a < hi_[k] and li[k] < hi_[k] and a < z and (
                    not (ci.exact(k) or cj.exact(c)) or _overlap(ci, k, cj, c)):
                break
            k -= 1
        out.append(k)
    return np.array(out, dtype=np.int64)


def _access_chunks(a: Access, n: int, memo: dict | None) -> Chunks:
    if memo is None:
        return walk_chunks(a.walk, n, a.split if isinstance(a.split, tuple) else None)
    key = (id(a), n)  # the caller keeps the accesses alive while memo lives
    got = memo.get(key)
    if got is None:
        got = memo[key] = walk_chunks(a.walk, n, a.split if isinstance(a.split, tuple) else None)
    return got


def access_need(ai: Access, bi: int, aj: Access, bj: int, memo: dict | None = None) -> np.ndarray:
    """Need vector of one conflicting access pair: for each block of j (``bj`` blocks), the last
    block of i (``bi`` blocks) whose part of ``ai`` overlaps j's part of ``aj``, or -1.
    ``memo``: a dict the caller keeps (with the accesses) to look the chunks up by identity."""
    ni = bi if ai.split is not False else 1
    nj = bj if aj.split is not False else 1
    ci = _access_chunks(ai, ni, memo)
    cj = _access_chunks(aj, nj, memo)
    if ci.all_dense and cj.all_dense:  # the usual case: plain interval tests, small Python loops
        li, hi_, lj, hj = ci.lol, ci.hil, cj.lol, cj.hil
        out = []
        for c in range(nj):
            a, z = lj[c], hj[c]
            k = ni - 1
            while k >= 0 and not (li[k] < z and a < hi_[k] and li[k] < hi_[k] and a < z):
                k -= 1
            out.append(k)
    else:
        out = _need_exact(ci, cj, ni).tolist()
    if ai.split is False:  # every block of i touches it: the last block is the one to wait for
        out = [bi - 1 if k >= 0 else -1 for k in out]
    if aj.split is False:
        out = [max(out, default=-1)] * bj
    return np.array(out, dtype=np.int64)


def walk_rows(w: isa.Walk) -> tuple[int, int, int, int] | None:
    """``(start, period, rows, run)`` in bytes when the bytes ``w`` touches are exactly ``rows``
    runs of ``run`` contiguous bytes starting at ``start + k * period`` (``period`` 0 when
    ``rows`` is 1): an injective walk whose levels, but its outermost non-trivial one, fold into
    one contiguous run (the fold of :func:`_fold`), or a dense walk (one run). None otherwise."""
    if w.dtype.bits < 8:
        return None
    eb = w.dtype.bits // 8
    if not w.injective:
        return None
    levels = w.levels
    run, const, k = 1, 0, len(levels)
    while k > 0:
        lv = levels[k - 1]
        if lv.count == 1:
            const += lv.initial
        elif abs(lv.step) == run:
            const += min(lv.initial, lv.last)
            run *= lv.count
        else:
            break
        k -= 1
    outer = None
    for lv in levels[:k]:
        if lv.count == 1:
            const += lv.initial
        elif outer is not None:  # two row levels: not rows of one period
            if is_dense(w):
                lo, hi = w.byte_range()
                return lo, 0, 1, hi - lo
            return None
        else:
            outer = lv
    if outer is None:
        return w.base + const * eb, 0, 1, run * eb
    return (w.base + (const + min(outer.initial, outer.last)) * eb, abs(outer.step) * eb,
            outer.count, run * eb)


def rows_meet(a0: np.ndarray, pa: np.ndarray, na: np.ndarray, la: np.ndarray,
              b0: int, pb: int, nb: int, lb: int) -> tuple[np.ndarray, np.ndarray]:
    """For row-shaped footprints (:func:`walk_rows`) ``A[k]`` against ``B``: ``(decided, meet)``,
    ``meet`` exact where ``decided`` (equal periods, or one of the two a single run).

    A byte of both is ``a0 + k*P + u = b0 + m*P + v`` with ``0 <= u < la``, ``0 <= v < lb``,
    ``0 <= k < na``, ``0 <= m < nb``: some integer ``t = m - k`` in ``[1 - na, nb - 1]`` has
    ``t*P`` in ``[d - lb + 1, d + la - 1]`` (``d = a0 - b0``); with one side a single run,
    ``P`` is the other's period (its ``k`` or ``m`` is 0). Two single runs meet iff their
    intervals do."""
    p = np.where(pa == 0, pb, pa)
    decided = (pa == pb) | (pa == 0) | (pb == 0)
    d = a0 - b0
    single = p == 0
    ps = np.where(single, 1, p)
    t_lo = np.maximum((d - lb) // ps + 1, 1 - na)
    t_hi = np.minimum(-((-(d + la)) // ps) - 1, nb - 1)
    meet = np.where(single, (d < lb) & (-d < la), t_lo <= t_hi)
    return decided, meet

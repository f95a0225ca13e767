"""Stage 1 of sync insertion: memory accesses, hazards, and the block-level happens-before graph.

Nothing here decides counters. It answers three questions about a list of ISA instructions in
their *global order* (a valid sequential execution of the program):

* which bytes does block ``b`` of instruction ``i`` read and write (:func:`block_accesses`);
* which pairs ``i < j`` on different executors conflict, and for each block ``b`` of ``j`` which is
  the last block of ``i`` it must wait for (:func:`derive_hazards`, a *need vector*);
* given a set of sync edges, what happens-before what (:class:`HbGraph`, bitset reachability).

Block model (see ``isa.py``): ``Sync.blocks`` splits an instruction's outermost logical dimension
into equal blocks. For the operands that follow that dimension (the written operand of every kind,
the streamed source of copies/DMAs, matmul's ``a`` rows, CVU inputs whose rows match the output's
and that no stage reduces along axis 0) block ``b`` touches the ``b``-th equal chunk of the walk's
element sequence; every other operand (weights, conv inputs with halos, reductions ...) is
conservatively touched by every block.

Happens-before nodes: ``S(i, b)`` (block ``b`` of ``i`` may start: its monitors held) and
``E(i, b)`` (block ``b``'s writes are visible and its reads are done). Hardware edges, free of
charge: ``S(i,b) -> E(i,b)``, ``S(i,b) -> S(i,b+1)``, ``E(i,b) -> E(i,b+1)`` and program order
``E(i, last) -> S(i', 0)`` for consecutive instructions ``i, i'`` of one executor. Sync edges
``E(i, k) -> S(j, b)`` all point forward in the global order, so node id
``base[i] + 2*b (+1 for E)`` is a topological order and reachability is one forward sweep of
Python-int bitsets (``networkx.transitive_reduction`` is O(V*E); the tests cross-check against it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from m100.targets.m100 import isa
from m100.targets.m100.isa import CvuOp, Space

# walks with more elements than this are compared by bounding byte interval only (sound, coarser)
EXACT_LIMIT = 1 << 16
# derive_hazards keeps at most this many accesses' chunks (a pure function of the walk: an
# evicted one is rebuilt; unbounded, the chunks of every access compared held ~10 KB each)
CHUNK_MEMO = 4096

MemKey = tuple[int, int]  # (Space, TPB or 0)

_AXIS0_OPS = frozenset({CvuOp.RSUM, CvuOp.RMAX, CvuOp.RMIN, CvuOp.RMEAN, CvuOp.RPROD, CvuOp.SOFTMAX,
                        CvuOp.LAYERNORM, CvuOp.RMSNORM})


def mem_keys(w: isa.Walk) -> list[MemKey]:
    return [(int(w.space), w.tpb if w.space is Space.HBSM else 0)]


@dataclass(frozen=True)
class Access:
    """One operand walk of one instruction in one memory."""
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


@dataclass(slots=True)  # millions of them on a large program (the LLaMA prefill layer)
class Hazard:
    """Instruction ``j`` must wait, per block, for block ``need[b]`` of instruction ``i``."""
    i: int
    j: int
    need: np.ndarray  # len = blocks(j), values in [-1, blocks(i) - 1]
    why: list[tuple[str, MemKey, int, int]] = field(default_factory=list)  # (RAW/WAR/WAW, mem, lo, hi)


def _kind(wi: bool, wj: bool) -> str:
    return "WAW" if wi and wj else ("RAW" if wi else "WAR")


# False: every pair goes through ``access_need`` (the tests compare both ways)
DENSE_SHORTCUT = True
# False: pairs of row-shaped walks go through ``access_need`` too (the tests compare both ways)
ROWS_SHORTCUT = True
# up to this many row-shaped candidates of an access are tested by :func:`rows_meet1` in Python
# (more: :func:`rows_meet` on arrays); 0: always arrays (the tests compare both ways)
ROWS_SCALAR = 32
_NEED0 = np.zeros(1, dtype=np.int64)  # a 1-block instruction waiting for a 1-block one
_NEED0.setflags(write=False)  # shared by hazards: never changed in place (merges build anew)


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


def rows_meet1(a0: int, pa: int, na: int, la: int, b0: int, pb: int, nb: int, lb: int
               ) -> tuple[bool, bool]:
    """:func:`rows_meet` of one pair, on Python ints (the same formulas; ``//`` floors in both)."""
    p = pb if pa == 0 else pa
    decided = pa == pb or pa == 0 or pb == 0
    d = a0 - b0
    if p == 0:
        return decided, d < lb and -d < la
    t_lo = max((d - lb) // p + 1, 1 - na)
    t_hi = min(-((-(d + la)) // p) - 1, nb - 1)
    return decided, t_lo <= t_hi


def derive_hazards(insts: list[isa.Instruction], blocks: list[int]) -> dict[tuple[int, int], Hazard]:
    """RAW/WAR/WAW conflicts between instructions on different executors, as need vectors.

    Per memory, the accesses in global order sweep a *live* set (earlier accesses that may still
    conflict with a later one; a dense write drops what it covers); each access meets the live
    entries whose bounding intervals overlap it (write: any, read: writes). A pair of 1-block
    instructions whose walks are both dense conflicts exactly when the intervals overlap, so its
    need is ``[0]`` without building chunks (``access_need`` gives the same). Likewise two
    1-block accesses whose footprints are rows of one period (:func:`walk_rows`: column slices
    of one matrix, e.g. the halves of RoPE's rows, interleave in one bounding interval) meet or
    not by :func:`rows_meet`, exactly the decision ``access_need``'s run-by-run test makes for
    them (both are exact: at most ``EXACT_LIMIT`` runs, or dense); pairs that do not meet are
    dropped before the Python loop. Without it, k interleaved slices of one matrix cost k^2 exact
    tests (the 1024-token LLaMA prefill layer: millions)."""
    execs = [inst.executor for inst in insts]
    accs = [block_accesses(inst) for inst in insts]
    # per memory, arrays of bounding intervals of every access, in instruction order
    per_mem: dict[MemKey, list[tuple[int, int, int, bool, int]]] = {}
    for idx, al in enumerate(accs):
        for n, a in enumerate(al):
            lo, hi = a.walk.byte_range()
            per_mem.setdefault(a.mem, []).append((lo, hi, idx, a.write, n))
    dense_of: dict[int, bool] = {}  # id(walk) -> is_dense (the walks live in insts)
    rows_of: dict[int, tuple | None] = {}  # id(walk) -> walk_rows
    out: dict[tuple[int, int], Hazard] = {}
    get = out.get
    chunks: dict[tuple[int, int], Chunks] = {}  # (id(access), chunks) -> Chunks of this call
    prods: dict[int, list[int]] = {}  # j -> the producers i of its hazards in ``out``
    for mem, rows in per_mem.items():
        arr = np.array([(lo, hi, idx, int(w), n) for lo, hi, idx, w, n in rows], dtype=np.int64)
        lo, hi, wr = arr[:, 0], arr[:, 1], arr[:, 3].astype(bool)
        # the same columns as Python lists: scalar reads of numpy arrays are slow
        lol, hil, insl, wrl = lo.tolist(), hi.tolist(), arr[:, 2].tolist(), wr.tolist()
        accl = [accs[idx][n] for _, _, idx, _, n in rows]
        dense = []
        for a in accl:
            d = dense_of.get(id(a.walk))
            if d is None:
                d = dense_of[id(a.walk)] = is_dense(a.walk)
            dense.append(d)
        # row shapes (walk_rows) of the 1-block accesses exact for access_need
        shape = np.zeros((len(rows), 4), dtype=np.int64)
        el = np.zeros(len(rows), dtype=bool)
        if ROWS_SHORTCUT:
            for r, a in enumerate(accl):
                if blocks[insl[r]] != 1:
                    continue
                key = id(a.walk)
                got = rows_of.get(key, 0)
                if got == 0:
                    got = rows_of[key] = walk_rows(a.walk)
                if got is not None and (got[2] <= EXACT_LIMIT or dense[r]):
                    shape[r] = got
                    el[r] = True
        sh0, shp, shn, shl = (shape[:, c] for c in range(4))
        ell = el.tolist()
        shapel = shape.tolist() if ROWS_SCALAR else []
        # rows of earlier instructions still generating needs, with their columns
        live = np.zeros(0, dtype=np.int64)
        llo, lhi, lwr = live, live, np.zeros(0, dtype=bool)
        kills: list[int] = []
        start = 0  # first row of the current instruction
        grew = False  # the current instruction got a new hazard in this memory
        for r in range(len(rows)):
            j = insl[r]
            aj = accl[r]
            known = None  # per candidate: its footprint meets this one's (rows_meet)
            if live.size:
                sel = (llo < hil[r]) & (lhi > lol[r])
                if not wrl[r]:
                    sel &= lwr
                if ell[r]:
                    m = sel & el[live]
                    mi = np.flatnonzero(m)
                    if 0 < mi.size <= ROWS_SCALAR:
                        # a few candidates (the usual case): the same test on Python ints
                        # (numpy's fixed cost per call is ~20 of these)
                        b0, pb, nb, lb = shapel[r]
                        met = set()
                        for x, q in zip(mi.tolist(), live[mi].tolist()):
                            dec, meet = rows_meet1(*shapel[q], b0, pb, nb, lb)
                            if dec:
                                if meet:
                                    met.add(q)
                                else:
                                    sel[x] = False
                        cand = live[sel].tolist()
                        known = [q in met for q in cand]
                    else:
                        if mi.size:
                            q = live[m]
                            dec, meet = rows_meet(sh0[q], shp[q], shn[q], shl[q], int(sh0[r]),
                                                  int(shp[r]), int(shn[r]), int(shl[r]))
                            drop = np.zeros(len(sel), dtype=bool)
                            drop[mi[dec & ~meet]] = True
                            sel &= ~drop
                            yes = np.zeros(len(sel), dtype=bool)
                            yes[mi[dec & meet]] = True
                            known = yes[sel].tolist()
                        cand = live[sel].tolist()
                else:
                    cand = live[sel].tolist()
            else:
                cand = []
            ej = execs[j]
            bj = blocks[j]
            pj = prods.get(j)
            if pj is None:
                pj = prods[j] = []
            fast = DENSE_SHORTCUT and bj == 1 and dense[r]
            for n_c, q in enumerate(cand):
                i = insl[q]
                if execs[i] == ej:
                    continue
                ai = accl[q]
                why = (_kind(ai.write, aj.write), mem, max(lol[q], lol[r]), min(hil[q], hil[r]))
                if (fast and dense[q] and blocks[i] == 1) or (known is not None and known[n_c]):
                    # one chunk each, every byte of both intervals touched: they meet
                    h = get((i, j))
                    if h is None:
                        out[(i, j)] = Hazard(i, j, _NEED0, [why])
                        grew = True
                        pj.append(i)
                    else:
                        h.need = _NEED0  # the largest need of a 1-block producer
                        h.why.append(why)
                    continue
                if len(chunks) > CHUNK_MEMO:  # bounded: chunks are rebuilt when needed again
                    chunks.clear()
                need = access_need(ai, blocks[i], aj, bj, chunks)
                if need.max() < 0:
                    continue
                h = get((i, j))
                if h is None:
                    h = out[(i, j)] = Hazard(i, j, need)
                    grew = True
                    pj.append(i)
                else:
                    h.need = np.maximum(h.need, need)
                h.why.append(why)
            if wrl[r] and dense[r]:
                kills.append(r)
            if r + 1 == len(rows) or insl[r + 1] != j:
                if grew and PRUNE_IMPLIED and len(pj) > 1:
                    prods[j] = prune_implied(out, j, pj, execs)
                grew = False
                # a dense write covering an earlier access implies every later conflict with it
                # (block-exact: see docs/sync.md), so the earlier access stops generating needs
                for k in kills:
                    keep = ~((llo >= lol[k]) & (lhi <= hil[k]))
                    live, llo, lhi, lwr = live[keep], llo[keep], lhi[keep], lwr[keep]
                new = np.arange(start, r + 1)
                live = np.concatenate([live, new])
                llo = np.concatenate([llo, lo[start:r + 1]])
                lhi = np.concatenate([lhi, hi[start:r + 1]])
                lwr = np.concatenate([lwr, wr[start:r + 1]])
                kills = []
                start = r + 1
    return out


def first_wait(need: np.ndarray) -> int:
    """The first block of the consumer that waits for something (``len(need)``: none)."""
    if need is _NEED0:
        return 0
    w = np.flatnonzero(need >= 0)
    return int(w[0]) if w.size else len(need)


def prune_implied(needs: dict, j: int, producers: list[int], execs: list) -> list[int]:
    """Drop the needs ``i -> j`` that program order implies; return the producers left.

    Of two producers ``i1 < i2`` of ``j`` on one executor, ``i2`` implies ``i1`` when the first
    block of ``j`` that waits for ``i2`` is no later than the first that waits for ``i1``:
    every block edge ``E(i1, k) -> S(j, b)`` then follows from ``E(i1, k) -> E(i1, last) ->
    S(i2, 0)`` (program order) ``-> E(i2, need2[b']) -> S(j, b') -> S(j, b)`` with ``b' <= b``.
    Such a need is never kept by the transitive reduction (:func:`reduce_needs` drops every need
    whose block edges are all implied) and removing implied edges keeps every reachability, so
    the kept needs -- and the program -- are the same; only the certificate lists fewer
    conflicting pairs (the ones left imply the others through program order, which its checker
    also derives). On the 1024-token LLaMA prefill layer a consumer of a redistribution meets
    every earlier copy of each producer TPB (millions of pairs), of which one per executor is
    left."""
    seen: dict = {}
    for i in producers:
        seen.setdefault(execs[i], []).append(i)
    if len(seen) == len(producers):
        return producers
    left = []
    for group in seen.values():
        if len(group) == 1:
            left.append(group[0])
            continue
        best = None
        for i in sorted(group, reverse=True):
            f = first_wait(needs[(i, j)].need)
            if best is not None and f >= best:
                del needs[(i, j)]
                continue
            left.append(i)
            best = f if best is None else min(best, f)
    return left


# False: every conflicting pair is kept as a need (the tests compare both ways)
PRUNE_IMPLIED = True


class HbGraph:
    """Block-level happens-before graph over instructions in global order (see module doc).

    Reachability is kept as vector clocks: the E-nodes of one executor form a chain (its blocks
    and program order), so the E-nodes that happen-before a node are, per executor, a prefix of
    that chain, summarised by one integer (the rank of the latest). ``clock[v, x]`` is that rank
    for executor ``x`` (including ``v`` itself when ``v`` is an E-node); a sweep in node order
    computes it, and adding an edge only recomputes from its head onward (every edge points
    forward). Queries ask whether an E-node happens-before a node, which is all the stages need.
    """

    def __init__(self, insts: list[isa.Instruction], blocks: list[int]):
        self.insts = insts
        self.n = len(insts)
        self.blocks = list(blocks)
        self.base = np.zeros(self.n + 1, dtype=np.int64)
        self.base[1:] = np.cumsum([2 * b for b in blocks])
        self.num_nodes = int(self.base[-1])
        self._node_inst = np.repeat(np.arange(self.n), [2 * b for b in blocks]).tolist()
        self._base = self.base.tolist()
        self.execs = [inst.executor for inst in insts]
        xs = sorted(set(self.execs))
        self.xid = {e: n for n, e in enumerate(xs)}
        # program-order predecessor (previous instruction of the same executor), E-node ranks
        self.po_prev: list[int] = []
        self.rank0: list[int] = []  # rank of E(i, 0) in its executor's chain (1-based)
        last: dict = {}
        count: dict = {}
        for i, e in enumerate(self.execs):
            self.po_prev.append(last.get(e, -1))
            last[e] = i
            self.rank0.append(count.get(e, 0) + 1)
            count[e] = count.get(e, 0) + self.blocks[i]
        # ranks fit the narrowest integer that holds the longest chain (half the memory of int32
        # for up to 32 767 blocks per executor: the 1024-token LLaMA prefill layer's clocks are
        # 280k nodes x 170 executors)
        self.clock_dtype = np.int16 if max(count.values(), default=0) < 2**15 else np.int32
        self.sync_preds: dict[int, set[int]] = {}  # S-node -> set of E-nodes (sync edges)
        self._clock: np.ndarray | None = None
        self._dirty = 0  # first node whose clock is stale
        self._xidl: list[int] | None = None  # clock column of each instruction's executor

    def S(self, i: int, b: int) -> int:
        return self._base[i] + 2 * b

    def E(self, i: int, b: int) -> int:
        return self._base[i] + 2 * b + 1

    def locate(self, v: int) -> tuple[int, int, bool]:
        """(instruction, block, is E-node) of node ``v``."""
        i = self._node_inst[v]
        b, is_e = divmod(v - self._base[i], 2)
        return i, b, bool(is_e)

    def node_name(self, v: int) -> str:
        i, b, e = self.locate(v)
        return f"{'SE'[e]}({i},{b})"

    def add_sync(self, i: int, k: int, j: int, b: int) -> None:
        u, v = self.E(i, k), self.S(j, b)
        if u >= v:
            raise ValueError(f"sync edge {self.node_name(u)} -> {self.node_name(v)} points "
                             "backward in the global order")
        self.sync_preds.setdefault(v, set()).add(u)
        if self._clock is not None:
            self._dirty = min(self._dirty, v)

    def add_need(self, i: int, j: int, need: np.ndarray) -> None:
        """The block edges ``E(i, need[b]) -> S(j, b)`` of one need (``add_sync`` for each)."""
        u0, v0 = self._base[i] + 1, self._base[j]
        if u0 >= v0:
            raise ValueError(f"need {i} -> {j} points backward in the global order")
        preds = self.sync_preds
        for b, k in enumerate(need.tolist()):
            if k >= 0:
                v = v0 + 2 * b
                got = preds.get(v)
                if got is None:
                    preds[v] = {u0 + 2 * k}
                else:
                    got.add(u0 + 2 * k)
                if self._clock is not None:
                    self._dirty = min(self._dirty, v)

    def hw_preds(self, v: int) -> list[int]:
        """Free (hardware) predecessors of node ``v``."""
        i, b, is_e = self.locate(v)
        if is_e:
            return [self.S(i, b)] + ([self.E(i, b - 1)] if b else [])
        if b:
            return [self.S(i, b - 1)]
        p = self.po_prev[i]
        return [self.E(p, self.blocks[p] - 1)] if p >= 0 else []

    def preds(self, v: int) -> list[int]:
        return self.hw_preds(v) + sorted(self.sync_preds.get(v, ()))

    def clock(self, upto: int | None = None) -> np.ndarray:
        """``clock[v, x]``: rank of the latest E-node of executor ``x`` at or before ``v``.

        With ``upto``, only the rows up to node ``upto`` (its instruction's) are brought up to
        date: allocation alternates queries and new edges that point ever further forward
        (``allocate._serialize``), and a sweep to the end after each edge was quadratic."""
        if self._clock is None:
            self._clock = np.zeros((self.num_nodes, len(self.xid)), dtype=self.clock_dtype)
            self._dirty = 0
        if self._dirty >= (self.num_nodes if upto is None else upto + 1):
            return self._clock
        last = self.n - 1 if upto is None else self._node_inst[upto]
        c = self._clock
        base = self._base
        if self._xidl is None:
            self._xidl = [self.xid[e] for e in self.execs]
        xid = self._xidl
        i = int(np.searchsorted(self.base, self._dirty, side="right")) - 1
        for i in range(i, last + 1):
            p = self.po_prev[i]
            po = base[p] + 2 * self.blocks[p] - 1 if p >= 0 else -1
            x, r0 = xid[i], self.rank0[i]
            for b in range(self.blocks[i]):
                v = base[i] + 2 * b
                if v >= self._dirty:  # S-node
                    preds = [v - 2] if b else ([po] if po >= 0 else [])
                    sp = self.sync_preds.get(v)
                    if sp:
                        preds.extend(sp)
                    if len(preds) == 1:
                        c[v] = c[preds[0]]
                    elif preds:
                        c[v] = c[preds].max(axis=0)
                    else:
                        c[v] = 0
                if v + 1 >= self._dirty:  # E-node
                    if b:
                        np.maximum(c[v], c[v - 1], out=c[v + 1])
                    else:
                        c[v + 1] = c[v]
                    c[v + 1, x] = r0 + b
        self._dirty = base[last + 1]
        return c

    def hb(self, u: int, v: int) -> bool:
        """E-node ``u`` happens-before node ``v`` (strictly)."""
        if u == v:
            return False
        # :meth:`locate` and :meth:`clock` inline: counter allocation asks ~1 M times on
        # ResNet-50 224 (a call, a tuple and a numpy scalar each were most of its cost)
        i = self._node_inst[u]
        d = u - self._base[i]
        assert d & 1, "happens-before queries start at an E-node"
        c = self._clock
        if c is None or self._dirty <= v:
            c = self.clock(v)
        return c.item(v, self._xidl[i]) >= self.rank0[i] + (d >> 1)

    def _e_columns(self) -> tuple[np.ndarray, np.ndarray]:
        """Per node: its executor's clock column, and its rank in that executor's chain when it
        is an E-node (S-nodes: 0, never asked)."""
        reps = [2 * b for b in self.blocks]
        col = np.repeat(np.array([self.xid[e] for e in self.execs], dtype=np.int64), reps)
        node = np.arange(self.num_nodes, dtype=np.int64)
        rank = np.repeat(np.asarray(self.rank0, dtype=np.int64), reps) + \
            (node - np.repeat(self.base[:-1], reps)) // 2
        rank[node % 2 == 0] = 0
        return col, rank

    def sync_edge_flags(self):
        """For every S-node ``v`` with sync edges (in node order): ``(v, us, flags)`` with ``us``
        its sync predecessors (sorted) and ``flags[n]`` true when the edge ``us[n] -> v`` is
        implied by a longer path (so the transitive reduction drops it).

        ``u -> v`` is implied iff another predecessor ``p`` of ``v`` has ``u`` at or before it:
        ``clock[p, x(u)] >= rank(u)`` (``p = u`` itself has exactly ``rank(u)``, so it is masked
        out). One gather per node, ``O(preds(v) * sync_preds(v))``, over the clocks computed
        once; ``test_redundant_edges_match_networkx_transitive_reduction`` is the oracle."""
        c = self.clock()
        col, rank = self._e_columns()
        coll, rankl = col.tolist(), rank.tolist()
        out = []
        for v in sorted(self.sync_preds):
            us = sorted(self.sync_preds[v])
            hw = self.hw_preds(v)
            if len(us) == 1:
                u = us[0]
                out.append((v, us, [bool(hw) and hw[0] != u and
                                    int(c[hw[0], coll[u]]) >= rankl[u]]))
                continue
            ua = np.array(us, dtype=np.int64)
            h, m = len(hw), len(us)
            a = c[np.ix_(np.concatenate([np.array(hw, dtype=np.int64), ua]), col[ua])]
            a[np.arange(h, h + m), np.arange(m)] = 0  # not u itself (ranks start at 1)
            for r, p in enumerate(hw):  # a hardware edge that is also a sync edge: the same edge
                if p in self.sync_preds[v]:
                    a[r, us.index(p)] = 0
            out.append((v, us, (a.max(axis=0) >= rank[ua]).tolist()))
        return out

    def redundant_sync_edges(self) -> set[tuple[int, int]]:
        """Sync edges (E-node, S-node) implied by a longer path (the complement of the transitive
        reduction restricted to sync edges; hardware edges are always kept)."""
        return {(u, v) for v, us, flags in self.sync_edge_flags()
                for u, f in zip(us, flags) if f}

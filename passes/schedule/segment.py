"""Segments and stages: the vocabulary of a placement and what decides how a stage may be cut.

A placement (:mod:`.placement`) is a list of :class:`SegmentCfg`, each a run of ops executed
together, each op a :class:`StageCfg` on a group of TPBs (rows x column parts x K parts) with its
output rows cut into bands. The predicates here are properties of an op in its graph, independent
of any schedule: where a tensor lives between segments (:func:`memory_of`), whether a consumer can
take a tensor band by band (:func:`streamable`, :func:`input_window`), which pieces of a
contraction run in lockstep (:func:`lockstep_groups`) and whether its reduction may be split over
TPBs (:func:`ksplit_ok`). The timeline (:mod:`.timeline`) turns a placement into tasks; the
placement search and the emitter read the same definitions.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from operator import attrgetter

from .cost import CostModel
from .graph import Op, OpGraph, ScheduleError, geometry, row_window
from .partition import TilePlan
from .plan import PlanPiece, image_parts, image_rows

@dataclass(frozen=True)
class StageCfg:
    op: str
    tpbs: tuple[int, ...]
    gc: int = 1
    bands: int = 1

    block: bool = False  # bands to TPB rows in contiguous blocks (pipelines) or round-robin
    chunked: bool = False  # a contraction cut into K chunks even where its K fits whole
    # a contraction whose reduction is split over ``ks`` TPBs (K parts): each computes a partial
    # sum of its K chunks, part 0 receives the others' by DTDU and adds them (+ bias, activation)
    # on its CVU. TPB of (row r, column part j, K part q): ``tpbs[q * gr * gc + r * gc + j]``
    ks: int = 1
    # > 0: a one-round matmul (``bands == gr``) whose band rows stay in the HBSM whole (all of K)
    # while the second operand streams past in column tiles of this many columns: A is read
    # once, B once per TPB row (instead of A once per column tile and B once per row tile);
    # bands are cut at TCU row-tile boundaries, the larger ones first (:func:`tile_band_rows`)
    act_resident: int = 0
    # a K split (``ks`` > 1) of one round (``bands == gr``) whose parts each receive their weight
    # in one K chunk: one DMA per (column part, K part) instead of two or more, each costing a
    # DMA setup and DDR latency on an engine; a one-tile piece holds it in one HBSM slot
    # (``partition.tile_piece``'s ``whole_parts``; chosen by ``whole_parts.whole_parts``)
    whole: bool = False
    # > 1: an int4-weight GEMV (one TPB row, K in chunks, one column tile per column part) whose
    # consecutive column parts, ``wshare`` at a time, receive each K chunk of their columns by
    # one DRB broadcast, each TPB's matmul reading its own columns out of the group's buffer:
    # one DDR transfer (one DMA setup and DDR latency on an in-order engine) per group and chunk
    # instead of one per TPB and chunk; each TPB holds the group's chunk (``wshare`` x the
    # weight slot). Chosen by :func:`.wshare.share_gemv_chunks`.
    wshare: int = 1
    # > 1: an int4-weight GEMV streamed in K chunks (``chunked``) in at least ``4 * kfine`` of
    # them instead of 4: the compute of the last chunk, which trails the stream, is shorter
    # (LLaMA2-7B's Q/K/V on 7 TPBs: 28.7 k cycles a chunk at 4 chunks). Chosen by
    # :func:`.gemv_chunks.finer_gemv_chunks`.
    kfine: int = 1
    # non-empty: the stage is an op of a causal attention chain (``OpGraph.causal``) whose bands
    # are cut by work instead of into equal rows: ``(C, k, align)`` -- a band of rows ``[a, e)``
    # keeps the score columns ``[0, min(C, e - 1 + k))`` (``causal.py``), so equal rows would
    # give the last band ~``2 * rows / bands`` times the work of the first; the cuts lie at
    # whole row tiles of ``align`` rows (:func:`work_cuts`). The chain's stages of a segment
    # carry the same value, so their bands cover the same rows.
    wcut: tuple[int, int, int] = ()

    def __hash__(self) -> int:
        """The dataclass's hash (of the tuple of the fields, :func:`_stage_fields`), kept on the
        instance after the first call: stages key the builders' and floors' memos (band boxes,
        TCU and DMA floors, segment keys), hashed ~0.4 M times a ResNet-50 schedule, each a
        tuple of 13 fields with the TPBs. Not pickled or copied (:meth:`__getstate__`): a
        string's hash differs between processes."""
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash(_stage_fields(self))
        return h

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d.pop("_hash", None)
        return d

    @functools.cached_property
    def gr(self) -> int:
        """TPB rows (kept on the instance: the builders and floors ask it ~0.5 M times a
        ResNet-50 schedule; not a field -- equality, hash and ``replace`` do not see it)."""
        return len(self.tpbs) // (self.gc * self.ks)

    def tpb_at(self, r: int, j: int, q: int = 0) -> int:
        """The TPB of TPB row ``r``, column part ``j`` and K part ``q``."""
        return self.tpbs[(q * self.gr + r) * self.gc + j]

    def _first(self, r: int) -> int:
        return -(-r * self.bands // self.gr)

    def row_of(self, b: int) -> int:
        """The TPB row that computes band ``b``."""
        if self.block:
            return min(self.gr - 1, (b * self.gr) // self.bands) if self._first(
                (b * self.gr) // self.bands) <= b else (b * self.gr) // self.bands - 1
        return b % self.gr

    def round_of(self, b: int) -> int:
        return b - self._first(self.row_of(b)) if self.block else b // self.gr

    def rows_in_round(self, rnd: int) -> list[int]:
        """TPB rows that compute a band in round ``rnd``."""
        if self.block:
            return [r for r in range(self.gr) if self._first(r) + rnd < self._first(r + 1)]
        return [r for r in range(self.gr) if rnd * self.gr + r < self.bands]


#: a stage's fields, in order, as one tuple (what the dataclass's own ``__hash__`` hashes)
_stage_fields = attrgetter(*(f.name for f in fields(StageCfg)))


@dataclass(frozen=True)
class SegmentCfg:
    stages: tuple[StageCfg, ...]
    kind: str = "data-parallel"  # data-parallel | pipeline | single

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(s.op for s in self.stages)


#: a tensor whose bytes are accessed scattered (``OpGraph.wroots``) lives in DDR, not in the CCB
#: SRAM, when those accesses are bound to a few SRAM banks (:func:`bank_bound`): a transposed
#: layout its producer writes (a root of ``OpGraph.wmap``: the prefill heads' q, ``[heads, T,
#: 2, hd / 2]``, a band of rows stored as one run per head at the head stride, LLaMA2-7B's 256 KiB
#: -- a multiple of ``ccb_sram_banks x ccb_sram_interleave``: every run on the same bank) and a
#: tensor read in column boxes (a root of ``OpGraph.cviews``: the V projection, whose column
#: parts the heads read and the V cache copy takes, and its column-split producer stores, runs of
#: a head's columns at the 8 KiB row pitch: two banks). The interpreter moved RoPE's q stores at
#: ~46 B/cycle where the plan, which spreads a transfer's granules over the banks, counted 79;
#: DDR takes them at the AXI rate. LLaMA2-7B W8A8 prefill layer 2 571 159 / 2 644 580 -> 2 566 753
#: / 2 600 511 cycles predicted / simulated with q's layout in DDR, -> 2 561 597 / 2 564 529 with
#: V's too (issue 13, session 27). False: by size, as any tensor (A/B)
SCATTERED_IN_DDR = True


def bank_bound(machine, dims: tuple[tuple[int, int], ...]) -> bool:
    """Do stores scattered along ``dims`` (``(byte stride, extent)``: ``OpGraph.wroots``) fall
    on at most half of the CCB SRAM banks? A dim whose stride is at least an interleave granule
    and whose steps visit at most ``ccb_sram_banks // 2`` banks (a stride of a multiple of the
    banks' period visits one)."""
    il, nb = machine.ccb_sram_interleave, machine.ccb_sram_banks
    for stride, n in dims:
        if stride >= il and len({(k * stride // il) % nb for k in range(min(n, nb))}) <= nb // 2:
            return True
    return False


def memory_of(cm: CostModel, g: OpGraph, tensor: str) -> str:
    """Where a tensor lives between segments: CCB SRAM if it fits a quarter of it, else DDR; a
    view (``OpGraph.views``) where its root lives; a tensor accessed scattered over a few SRAM
    banks in DDR (:data:`SCATTERED_IN_DDR`)."""
    if tensor in g.wmap:  # stored into another tensor's layout (``OpGraph.wmap``)
        tensor = g.wmap[tensor][0]
        if tensor in g.views:
            tensor = g.views[tensor][0]
    elif tensor in g.views:
        tensor = g.views[tensor][0]
    elif tensor in g.rmap:  # a strided view (``OpGraph.rmap``): where its root lives
        tensor = g.rmap[tensor][0]
    elif tensor in g.cviews:  # columns read in place (``OpGraph.cviews``)
        tensor = g.cviews[tensor][0]
    elif tensor in g.strided:  # columns of another tensor (``OpGraph.strided``)
        tensor = g.strided[tensor][0]
        if tensor in g.views:
            tensor = g.views[tensor][0]
    t = g.tensors[tensor]
    if t.kind in ("weight", "input", "output"):
        return "ddr"
    if SCATTERED_IN_DDR and tensor in g.wroots and bank_bound(cm.machine, g.wroots[tensor]):
        return "ddr"
    return "sram" if t.nbytes <= cm.machine.ccb_sram_bytes // 4 else "ddr"


def band_rows(rows: int, bands: int, b: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of band ``b`` of ``bands`` (near-equal split)."""
    return (rows * b) // bands, (rows * (b + 1)) // bands


def tile_band_rows(rows: int, bands: int, b: int, align: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of band ``b`` of ``bands`` cut at multiples of ``align`` (the TCU row
    tile): the ``units = ceil(rows / align)`` row tiles dealt as evenly as possible, the larger
    bands first (they start first), the last band ending at ``rows``."""
    units = -(-rows // align)
    base, extra = divmod(units, bands)
    lo = (b * base + min(b, extra)) * align
    hi = lo + (base + (1 if b < extra else 0)) * align
    return min(rows, lo), min(rows, hi)


@functools.lru_cache(maxsize=256)
def work_cuts(rows: int, bands: int, cols: int, k: int, align: int) -> tuple[int, ...]:
    """The ``bands + 1`` row cuts of a causal chain's ``[rows, cols]`` scores (``StageCfg.wcut``)
    into ``bands`` bands of whole ``align``-row tiles (the last one ends at ``rows``) whose work
    -- padded rows x kept columns ``min(cols, e - 1 + k)`` of a band ``[a, e)`` -- is as even as
    possible: the largest band's work the least, then the sum of squares (an exact DP over
    the tile boundaries, O(bands x tiles^2)). Early bands get more rows than late ones: 12 bands
    of 1024 rows (k = 1) are cut at 0, 224, 352, 448, ..., 960, 992, 1024, the largest holding
    10.5 % of the work, where 12 equal bands of ~86 rows give the last one 15 %, padded to 96
    rows. ``bands`` must not exceed the row tiles."""
    n = -(-rows // align)
    if not 1 <= bands <= n:
        raise ScheduleError(f"internal: {bands} work bands of {n} row tiles")

    def work(t0: int, t1: int) -> int:
        return (t1 - t0) * align * min(cols, min(rows, t1 * align) - 1 + k)
    inf = (float("inf"), float("inf"))
    best = [[inf] * (n + 1) for _ in range(bands + 1)]
    arg = [[0] * (n + 1) for _ in range(bands + 1)]
    best[0][0] = (0, 0)
    for b in range(1, bands + 1):
        for t in range(b, n - (bands - b) + 1):
            for s0 in range(b - 1, t):
                m0, q0 = best[b - 1][s0]
                if m0 == float("inf"):
                    continue
                w = work(s0, t)
                c = (max(m0, w), q0 + w * w)
                if c < best[b][t]:
                    best[b][t], arg[b][t] = c, s0
    cuts = [n]
    for b in range(bands, 0, -1):
        cuts.append(arg[b][cuts[-1]])
    return tuple(min(rows, t * align) for t in reversed(cuts))


def stage_rows(st: StageCfg, rows: int, b: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of band ``b`` of a (not resident-activation) stage of ``rows`` output
    rows: cut by work (:func:`work_cuts`) or into equal rows (:func:`band_rows`)."""
    if st.wcut:
        cuts = work_cuts(rows, st.bands, *st.wcut)
        return cuts[b], cuts[b + 1]
    return band_rows(rows, st.bands, b)


def stage_band_rows(st: StageCfg, rows: int, b: int, align: int) -> tuple[int, int]:
    """Rows of band ``b`` of a stage (:func:`tile_band_rows` for a resident-activation stage)."""
    if st.wcut:
        return stage_rows(st, rows, b)
    if st.act_resident:
        return tile_band_rows(rows, st.bands, b, align)
    return band_rows(rows, st.bands, b)


def streamable(g: OpGraph, op: Op, tensor: str) -> bool:
    """Can ``op`` consume ``tensor`` band by band from a producer (row-standard layouts, identity
    indexing)? Otherwise it reads the whole tensor from memory. (Cached per graph.)"""
    cache = g.__dict__.setdefault("_stream_cache", {})
    key = (op.name, tensor)
    r = cache.get(key)
    if r is None:
        r = cache[key] = _streamable(g, op, tensor)
    return r


def reads_whole(op: Op, tensor: str) -> bool:
    """``op`` reads ``tensor`` whole from memory, never band by band from a producer: the B operand
    of a matmul and the filter of a conv (the emitter ``load``s every operand after the first).
    Such a tensor produced in the same segment must be stored, and the reader must wait for its
    last band (issue 10: a matmul whose B came from a CVU op of its segment read memory that was
    never written)."""
    return op.unit in ("tcu.matmul", "tcu.conv2d") and tensor in op.inputs[1:]


def _streamable(g: OpGraph, op: Op, tensor: str) -> bool:
    if op.unit in ("tcu.matmul", "tcu.conv2d") and tensor != op.inputs[0]:
        return False  # see reads_whole
    prod = g.producer(tensor)
    if prod is not None and prod.unit == "cvu.reduction" and not prod.attrs.get("keep", True):
        return False  # a reduction that dropped its axis: rows of another shape
    if op.unit.startswith("dtdu") or op.attrs.get("layout") == "nchw":
        return False
    maps = op.attrs.get("maps")
    if maps is not None:
        i = list(op.inputs).index(tensor)
        m = maps[i]
        ident = all(c == tuple(1 if k == r else 0 for k in range(len(c))) and k0 == 0
                    for r, (c, k0) in enumerate(m))
        if not ident or len(m) != len(g.out(op).shape):
            return False
    return True


def input_window(g: OpGraph, op: Op, tensor: str, lo: int, hi: int) -> tuple[int, int] | None:
    if not streamable(g, op, tensor):
        return None
    acts = [t for t in op.inputs if g.tensors[t].kind != "weight"]
    if acts and tensor == acts[0]:
        return row_window(g, op, lo, hi)
    t = g.tensors[tensor]
    out = g.out(op)
    if len(t.shape) >= 1 and t.shape[:-1] == out.shape[:-1] and op.unit.startswith("cvu"):
        return (lo, hi)
    return None


def lockstep(tplan: TilePlan, op: Op) -> bool:
    """Are the pieces of a one-stage ``op`` built in lockstep groups (:func:`lockstep_groups`)?
    TCU contractions whose K is chunked or whose second operand streams: their chunks are what
    several TPBs read at the same time."""
    return op.unit in ("tcu.matmul", "tcu.conv2d") and (tplan.tk < tplan.k
                                                         or not tplan.weight_resident)


def lockstep_groups(g: OpGraph, op: Op, st: StageCfg, tplan: TilePlan, geo,
                    align: int = 1) -> list[list[PlanPiece]]:
    """The pieces of a one-stage contraction in lockstep groups: per round (the bands computed at
    the same time, one per TPB row), per row tile index inside the band and per column tile index
    inside the column part, the pieces of every such band and column part (one per TPB). Each
    piece gets the TPBs that share its activation chunks (same band and row tile: the column
    parts) and its weight chunks (same column tile: the rows of the round). With a K split
    (``st.ks`` > 1) every piece is there once per K part (its own chunks, on its own TPB) and
    shares chunks only with the pieces of its K part."""
    per = max(1, image_rows(g, op))
    tr, tc = max(1, tplan.tr), max(1, tplan.tc)
    rounds: dict[int, list[int]] = {}
    for b in range(st.bands):
        rounds.setdefault(st.round_of(b), []).append(b)
    ctiles = []
    for j in range(st.gc):
        c0, c1 = band_rows(geo.cols, st.gc, j)
        ctiles.append([(cc, min(c1, cc + tc)) for cc in range(c0, c1, tc)])
    groups = []
    for rnd in sorted(rounds):
        rtiles = {}
        for b in rounds[rnd]:
            lo, hi = stage_band_rows(st, geo.rows, b, align)
            rtiles[b] = [(a, min(e0, a + tr)) for (a0, e0) in image_parts(lo, hi, per)
                         for a in range(a0, e0, tr)]
        for ti in range(max((len(v) for v in rtiles.values()), default=0)):
            for ci in range(max((len(v) for v in ctiles), default=0)):
                grp = []
                for q in range(st.ks):
                    for b in rounds[rnd]:
                        if ti >= len(rtiles[b]):
                            continue
                        a, e = rtiles[b][ti]
                        for j in range(st.gc):
                            if ci >= len(ctiles[j]):
                                continue
                            cc, ce = ctiles[j][ci]
                            grp.append(PlanPiece(op.name, b, j, st.tpb_at(st.row_of(b), j, q),
                                                 a, e, cc, ce, kpart=q, kparts=st.ks))
                # the TPBs of the pieces with the same band / column part and K part, in group
                # order (one pass over the group, not one per piece)
                by_a: dict[tuple[int, int], list[int]] = {}
                by_b: dict[tuple[int, int], list[int]] = {}
                for p in grp:
                    by_a.setdefault((p.band, p.kpart), []).append(p.tpb)
                    by_b.setdefault((p.col, p.kpart), []).append(p.tpb)
                a_sh = {k: tuple(v) for k, v in by_a.items()}
                b_sh = {k: tuple(v) for k, v in by_b.items()}
                for p in grp:
                    p.a_share = a_sh[(p.band, p.kpart)]
                    p.b_share = b_sh[(p.col, p.kpart)]
                if st.wshare > 1:
                    _weight_groups(op, st, tplan, grp, geo.cols)
                if grp:
                    groups.append(grp)
    return groups


def wshare_ok(op: Op, st: StageCfg, tplan: TilePlan) -> bool:
    """Can ``st`` share weight chunks between column parts (``StageCfg.wshare``)? An int4-weight
    matmul of one TPB row and one round (a GEMV), no K split, K in chunks, each column part one
    column tile (its pieces are then whole column parts), ``wshare`` dividing the column parts."""
    return (op.unit == "tcu.matmul" and "w4" in op.attrs and st.gr == 1 and st.bands == 1
            and st.ks == 1 and not st.act_resident and tplan.tk < tplan.k
            and tplan.tc >= tplan.cols and st.gc % st.wshare == 0)


def _weight_groups(op: Op, st: StageCfg, tplan: TilePlan, grp: list[PlanPiece],
                   cols: int) -> None:
    """``PlanPiece.w_share`` / ``w_cols`` of the pieces of a lockstep group of a stage with
    ``wshare`` > 1: the TPBs of ``wshare`` consecutive column parts and their columns."""
    if not wshare_ok(op, st, tplan):
        raise ScheduleError(f"internal: op '{op.name}': wshare={st.wshare} on a stage that is "
                            "not an int4 GEMV in K chunks with one column tile per column part")
    by_col = {p.col: p for p in grp}
    for p in grp:
        g0 = p.col // st.wshare * st.wshare
        members = [by_col[j] for j in range(g0, g0 + st.wshare) if j in by_col]
        c0, c1 = band_rows(cols, st.gc, g0)[0], band_rows(cols, st.gc, g0 + st.wshare - 1)[1]
        if any(not (c0 <= q.c0 and q.c1 <= c1) for q in members):
            raise ScheduleError(f"internal: op '{op.name}': a piece outside its weight group")
        p.w_share = tuple(q.tpb for q in members)
        p.w_cols = (c0, c1)


def row_tile(cm: CostModel, g: OpGraph, op: Op) -> int:
    """Output rows of one TCU row tile (``tcu_tile_m`` output elements)."""
    return max(1, -(-cm.machine.tcu_tile_m // geometry(g, op).row_elems))


def act_resident_ok(g: OpGraph, op: Op) -> bool:
    """Can ``op`` keep its activation band whole in the HBSM (``StageCfg.act_resident``)? A plain
    matmul (no batch, no K split, whole-K epilogue: no requantization or rounding store, no int4
    weight) -- its band rows then stay while B streams in column tiles."""
    return op.unit == "tcu.matmul" and not op.attrs.get("batch") and not op.attrs.get("w4") \
        and "requant" not in op.epilogue and "store" not in op.epilogue \
        and "dequant" not in op.epilogue


def ksplit_ok(g: OpGraph, op: Op) -> bool:
    """Can ``op``'s reduction be split over TPBs (``StageCfg.ks`` > 1)? A float contraction
    (f32 operands and result: the CVU adds the partial sums in f32, like the TCU's accumulator)
    whose epilogue is at most a bias and a ReLU (applied after the sum, on the CVU)."""
    if op.unit not in ("tcu.matmul", "tcu.conv2d") or op.attrs.get("groups", 1) != 1:
        return False
    if op.attrs.get("batch") or "rq_table" in op.attrs or "dq_table" in op.attrs:
        return False
    if any(e not in ("bias", "relu") for e in op.epilogue):
        return False
    dts = {g.tensors[t].dtype for t in op.inputs[:2]} | {g.out(op).dtype}
    return dts == {"f32"}


def ksplit_bias(op: Op) -> str | None:
    """The bias tensor a K-split reduction adds (the contraction's third input), if any."""
    return op.inputs[2] if len(op.inputs) > 2 else None


def ksplit_stages(op: Op, parts: int) -> int:
    """CVU stages of a K-split reduction: one add per other part, the bias, the ReLU."""
    return (parts - 1) + (ksplit_bias(op) is not None) + ("relu" in op.epilogue)


def reduce_pieces(grp: list[PlanPiece], si: int) -> list[PlanPiece]:
    """The reduction pieces of a K-split lockstep group: one per output tile (the part-0
    piece's box, on its TPB), listing the TPBs of its parts in ``reduce``."""
    tiles: dict[tuple[int, int, int, int], list[PlanPiece]] = {}  # output tile -> its parts
    for q in grp:
        tiles.setdefault((q.band, q.col, q.r0, q.c0), []).append(q)
    out = []
    for p in grp:
        if p.kpart == 0:
            parts = sorted(tiles[(p.band, p.col, p.r0, p.c0)], key=lambda q: q.kpart)
            out.append(PlanPiece(p.op, p.band, p.col, p.tpb, p.r0, p.r1, p.c0, p.c1,
                                 segment=si, reduce=tuple(q.tpb for q in parts)))
    return out

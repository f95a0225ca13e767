"""Mini-tensor partitioning: tile shapes that fit a TPB's HBSM, double buffered, and suit the unit.

A *piece* is the part of an op one TPB computes for one mini-tensor: ``rows x cols`` of the output
(rows: the outer streamable axis; cols: ``n`` / ``f`` / last dim). :func:`tile_piece` cuts a piece
into instructions along three axes -- rows ``tr``, columns ``tc`` and the reduction ``tk`` -- so that

* the live working set fits the HBSM budget: activation tiles and streamed weight tiles have two
  slots (the next tile loads while the TCU works on the current one), the output tile two slots (the
  consumer drains one while the next is produced); weights that fit whole stay resident (one slot);
* TCU tiles are multiples of the natural tile (``tcu_tile_m/k/n``) where the shape allows, so the
  tile-shape efficiency of the cost model stays high;
* among the feasible tilings the one with the lowest predicted cycles wins (fewer, larger instructions
  pay the pipeline latency less often), ties broken towards larger tiles.

A piece that fits in no tiling raises :class:`ScheduleError` naming the op, its smallest footprint and
the budget (what to change: fewer rows per mini-tensor, more TPBs, a smaller machine tile).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property

from .cost import CostModel, ceil_div, round_up
from .graph import Op, OpGraph, ScheduleError, dtype_bytes, geometry, row_window


@dataclass(frozen=True)
class Buffer:
    """One HBSM buffer a piece needs: ``slot_bytes`` (bank aligned) x ``slots``."""
    role: str  # act, act1, weight, out, acc
    slot_bytes: int
    slots: int
    unit: str

    @property
    def nbytes(self) -> int:
        return self.slot_bytes * self.slots


@dataclass(frozen=True)
class TilePlan:
    """How one piece (``rows x cols``) is cut into instructions and which buffers it needs."""
    op: str
    unit: str
    rows: int
    cols: int
    tr: int  # rows per instruction
    tc: int  # cols per instruction
    tk: int  # reduction chunk per instruction (== k: no split)
    k: int
    cycles: float  # all instructions of the piece, back to back on the unit
    buffers: tuple[Buffer, ...] = field(default=())
    weight_resident: bool = True
    # the piece's activation rows stay in the HBSM whole (all of K, one slot) while the second
    # operand streams past them in column tiles (``StageCfg.act_resident``)
    act_resident: bool = False

    @cached_property
    def footprint(self) -> int:  # cached: the scheduler asks per TPB of every segment it builds
        return sum(b.nbytes for b in self.buffers)

    @property
    def instructions(self) -> int:
        return ceil_div(self.rows, self.tr) * ceil_div(self.cols, self.tc) * ceil_div(self.k, self.tk)

    @property
    def shape_str(self) -> str:
        if self.k > 1:
            return f"{self.tr}x{self.tc}x{self.tk}"
        return f"{self.tr}x{self.tc}"


#: ``tile_piece(once=True)`` of a vector op whose piece is one tile: its buffers (input rows,
#: output, broadcast operands, table boxes) are filled once, one slot each in the footprint
#: (issue 13, session 20: LLaMA prefill's RoPE on 56 TPBs, 1.69 -> 0.85 MB)
VECTOR_ONCE = True
#: ``tile_piece(once=True)``: does the tiler itself count the one slot of a buffer filled once
#: per piece (larger tiles in the room), or choose as with two and leave the room to the plan?
#: (session 19, LLaMA2-7B W8A8 prefill layer: the room taken by larger K chunks of Q / K / V
#: left none for the next projection's weights, 3 546 454 predicted against 3 372 682)
ONCE_TILES = False


def _check_fp(op: Op, bufs: list[tuple], fp: int, two_slots: bool, extra_a: int,
              extra_o: int) -> None:
    """``fp`` (the tiler's sum) against the buffers ``bufs`` (role, slot bytes, slots, unit) of
    its tiling (plus the slots ``ONCE_TILES`` counts when the tiling is chosen with two).
    :func:`tile_piece` sums a contraction tiling's footprint without making its buffers; they are
    made, and summed again here, only for a tiling that becomes the best (a few per call;
    ``test_stage_shapes`` makes every candidate a best)."""
    want = sum(b[1] * b[2] for b in bufs) + ((extra_a + extra_o) if two_slots else 0)
    if fp != want:
        raise ScheduleError(f"internal: op '{op.name}': the tiler's footprint {fp} is not its "
                            f"buffers' {want}")


def _candidates(total: int, align: int, limit: int = 8) -> list[int]:
    """Tile sizes for an axis of ``total``: total itself, then halvings rounded to ``align``."""
    out = [total]
    t = total
    while len(out) < limit and t > 1:
        t = ceil_div(t, 2)
        if t >= align:
            t = round_up(t, align)
        if t not in out:
            out.append(t)
        if t <= 1:
            break
    return out


def _in_rows(g: OpGraph, op: Op, tr: int) -> int:
    w = row_window(g, op, 0, tr)
    geo = geometry(g, op)
    if w is None:
        return geo.in_rows
    return w[1] - w[0]


def tile_piece(cm: CostModel, g: OpGraph, op: Op, rows: int, cols: int,
               budget: int | None = None, chunked: bool = False, kparts: int = 1,
               act_resident: int = 0, whole_parts: bool = False, wshare: int = 1,
               wstreams: int = 0, kfine: int = 1, astreams: int = 0,
               once: bool = False, act_whole: bool = False) -> TilePlan:
    """The cheapest tiling of ``rows x cols`` of ``op`` whose working set fits ``budget`` bytes.

    ``chunked``: a TCU contraction whose K can be split is cut into K chunks even where the whole
    reduction fits (its weight then streams chunk by chunk and the first instruction starts on
    the first chunk instead of the whole weight; the search tries both, see ``StageCfg``).
    ``kparts`` > 1: the reduction is split over that many TPBs (``StageCfg.ks``): the chunks are
    dealt to the parts in contiguous runs (:func:`k_part_range`), so there are at least
    ``kparts`` of them; the cycles are one part's; the TPB of part 0 also holds the partial sums
    it receives (``partial``, two slots per other part) and the reduced output (``red_out``).
    ``act_resident`` > 0 (a matmul whose K is not split over TPBs): one row tile of all ``rows``
    and all of K, loaded once into one slot and kept while the second operand streams past it in
    column tiles of ``act_resident`` columns (each column of B read once per piece instead of
    once per row tile; ``StageCfg.act_resident``), in the fewest K chunks that fit.
    ``whole_parts`` (with ``kparts`` > 1, ``StageCfg.whole``): exactly one K chunk per part, so
    each part's weight is one DMA (each costs a DMA setup and DDR latency on an engine); a piece
    that is one instruction tile (``tr >= rows``, ``tc >= cols``) then holds its weight in one
    slot, not two (nothing of it streams). ``ScheduleError`` when no chunk size gives one chunk
    per part.
    ``wshare`` > 1 (an int4 GEMV, ``StageCfg.wshare``): each weight K chunk holds the columns of
    ``wshare`` column parts (one DRB broadcast to all of them), K is chunked and a piece is its
    whole column part (``tc = cols``); ``ScheduleError`` when K has no chunk.
    ``kfine`` > 1 (with ``chunked``, an int4 GEMV; ``StageCfg.kfine``): at least ``4 * kfine``
    K chunks instead of 4.
    ``astreams`` > 0 (a one-stage TCU contraction): the activation DMAs the tiling implies are
    counted with the weight DMAs when tilings are compared -- a K-chunked activation is loaded
    again for every column tile of the piece (one broadcast to the column parts per row tile
    and chunk), on the CCB DMA engines that ``astreams`` such streams (the stage's TPB rows
    and K parts) share.
    ``once`` (a one-stage segment of one round: each TPB computes one piece of the stage): a
    buffer filled once per piece holds one slot, not two, in the plan's footprint (what weight
    prefetch, kept tensors and late stores fit next to it) -- the activation when the piece is
    one row tile of whole K (loaded once, read by every column tile), the output tile and the
    epilogue's ``post_in`` box when the piece is one instruction tile (nothing follows it on
    the TPB that would be produced into the other slot). The tiling itself is chosen as with
    two slots (:data:`ONCE_TILES`).
    ``act_whole`` (a matmul of a pipeline fed by a stage of its segment): its activation slots
    hold a row tile of all of K whatever the K chunk (the producer pieces' rows arrive whole:
    ``kinds.tcu``, a streamed input)."""
    mc = cm.machine
    if whole_parts and kparts < 2:
        raise ScheduleError(f"internal: op '{op.name}': whole K parts without a K split")
    if act_resident and (op.unit != "tcu.matmul" or kparts > 1 or op.attrs.get("w4")
                         or "requant" in op.epilogue or "store" in op.epilogue
                         or "dequant" in op.epilogue):
        raise ScheduleError(f"internal: op '{op.name}' ({op.unit}) has no resident-activation "
                            "tiling")
    budget = mc.hbsm_bytes if budget is None else budget
    geo = geometry(g, op)
    out = g.out(op)
    ob = dtype_bytes(out.dtype)
    acts = g.act_inputs(op)
    unit = op.unit.split(".")[0]
    best: TilePlan | None = None
    best_key: tuple = ()  # the key of ``best`` (read only once ``best`` is set)
    smallest = None
    if op.unit in ("tcu.matmul", "tcu.conv2d"):
        conv = op.unit == "tcu.conv2d"
        ab = dtype_bytes(acts[0].dtype) if acts else 4
        ws = g.weights(op)
        wb = dtype_bytes(ws[0].dtype) if ws else ab
        act_is_weight = not ws  # a matmul of two activations: B streams like a weight
        if act_is_weight and len(acts) > 1:
            wb = dtype_bytes(acts[1].dtype)
        kwin = op.attrs["kh"] * op.attrs["kw"] if conv else 1
        cin = geo.k // kwin
        groups = op.attrs.get("groups", 1) if conv else 1
        row_align = max(1, ceil_div(mc.tcu_tile_m, geo.row_elems))
        k_cands = [kwin * c for c in _candidates(cin, max(1, mc.tcu_tile_k // kwin) if kwin < mc.tcu_tile_k else 1)]
        if "w4" in op.attrs and not conv:  # K chunks of whole dequantization blocks: halvings of
            # the block count (halvings of K rounded to the TCU tile lose every chunk size of
            # LLaMA2-7B's down projection, K = 11008 = 86 blocks of 128, which then kept K whole)
            blk = op.attrs["w4"][1]
            k_cands = [blk * c for c in _candidates(ceil_div(geo.k, blk), 1)] \
                if geo.k % blk == 0 else k_cands
        if groups > 1 or "requant" in op.epilogue or ("store" in op.epilogue and conv):
            # a requantized (i8) result can not be accumulated onto; a rounded (f16) one of a
            # matmul accumulates its K chunks in f32 (the last chunk reads them as ``acc``)
            k_cands = [geo.k]
        elif chunked and len(k_cands) > 1 and kparts == 1:
            k_cands = [x for x in k_cands if x < geo.k]
            if "w4" in op.attrs:
                # an int4 GEMV streams its weight: at least 4 chunks where K allows, the last
                # chunk's compute is the tail that does not overlap the stream (the tiler alone
                # keeps the fewest, largest chunks; LLaMA2-7B gate/up on 28 TPBs: 421k -> 373k
                # cycles)
                # (and at most 8: every chunk is a DMA of its own, ~250 cycles of DDR latency on
                # an in-order engine; the cheapest compute alone would pick the smallest chunk
                # that divides K, LLaMA2-7B down: 43 chunks of 256 instead of 4 of 2816)
                # (a chunk shared by ``wshare`` column parts is one DMA for all of them: up
                # to 8 per TPB's share of them, each TPB then holds ``wshare`` x the chunk)
                # (``kfine``: at least 4 x kfine chunks, ``StageCfg.kfine``)
                lo = 4 * kfine
                k_cands = [x for x in k_cands
                           if lo <= ceil_div(geo.k, x) <= max(8 * wshare, 2 * lo)] or \
                    [x for x in k_cands if lo * x <= geo.k] or \
                    (k_cands if kfine == 1 else [min(k_cands)])
        if kparts > 1:
            if groups > 1 or "requant" in op.epilogue or "store" in op.epilogue or \
                    "dequant" in op.epilogue:
                raise ScheduleError(f"op '{op.name}': its reduction can not be split over TPBs")
            per_part = kwin * ceil_div(cin, kparts) if conv else ceil_div(geo.k, kparts)
            extra = [per_part] + ([kwin * ceil_div(cin, 2 * kparts), kwin * ceil_div(cin, 4 * kparts)]
                                  if conv else
                                  [round_up(ceil_div(geo.k, 2 * kparts), mc.tcu_tile_k),
                                   round_up(ceil_div(geo.k, 4 * kparts), mc.tcu_tile_k)])
            k_cands = sorted({x for x in k_cands + extra if 0 < x <= per_part
                              and ceil_div(geo.k, x) >= kparts}, reverse=True)
            # at least two chunks per part where K allows: each part's weight then streams
            # under its compute instead of arriving whole before its first instruction
            # (``chunked``: at least four, a shorter tail after the last chunk arrives)
            if whole_parts:  # one chunk per part (k_part_range deals kparts chunks one each)
                k_cands = [x for x in k_cands if ceil_div(geo.k, x) == kparts]
            else:
                k_cands = [x for x in k_cands if ceil_div(geo.k, x) >= 2 * kparts] or k_cands
                if chunked:
                    k_cands = [x for x in k_cands if ceil_div(geo.k, x) >= 4 * kparts] \
                        or k_cands
            if not k_cands:
                raise ScheduleError(f"op '{op.name}': its reduction ({geo.k}) has "
                                    + (f"no chunk size giving one chunk to each of {kparts} parts"
                                       if whole_parts else f"fewer chunks than {kparts} parts"))
        if "w4" in op.attrs:  # a K chunk holds whole dequantization blocks
            blk = op.attrs["w4"][1]
            k_cands = [x for x in k_cands if x % blk == 0]
            if not k_cands:
                if kparts > 1:
                    raise ScheduleError(f"op '{op.name}': no K chunk of whole blocks of {blk} "
                                        f"for {kparts} parts")
                k_cands = [geo.k]
        if wshare > 1:  # the group's chunk per TPB: K chunked, a piece = its column part
            k_cands = [x for x in k_cands if x < geo.k]
            if not k_cands or conv or kparts > 1 or act_resident:
                raise ScheduleError(f"op '{op.name}': no K chunks for weight chunks shared "
                                    f"by {wshare} column parts")
        tc_cands = _candidates(cols, mc.tcu_tile_n) if groups == 1 else [cols]
        if wshare > 1:
            tc_cands = [cols]
        tr_cands = _candidates(rows, row_align)
        if act_resident:  # one row tile of whole K; B in column tiles (< cols), K chunks
            tr_cands = [rows]
            k_cands = _candidates(geo.k, mc.tcu_tile_k)
            tc_cands = [act_resident] if act_resident < cols else []
        # the slot sizes below depend on fewer loop variables than the loop nest: each is
        # computed at the level it depends on (the same numbers, ~a third of the align calls)
        K = geo.k
        round_out = "store" in op.epilogue or "dequant" in op.epilogue
        wslot_of = {(tc, tk): cm.align(tk * tc * wshare * wb if groups == 1
                                       else geo.weight_bytes * tc / geo.cols)
                    for tc in tc_cands for tk in k_cands}
        # per K chunk: the chunks of the longest part; per (column tile, K chunk): the engine
        # time of one weight DMA (filled on first use: the same calls as in the loop)
        nk_of = {}
        for tk in k_cands:
            n_k = ceil_div(K, tk)
            if kparts > 1:  # the longest part's chunks
                n_k = max(b - a for a, b in (k_part_range(n_k, kparts, q)
                                             for q in range(kparts)))
            nk_of[tk] = n_k
        wdma_of: dict[tuple[int, int], float] = {}
        pb_ = dtype_bytes(g.tensors[op.attrs["post_in"]].dtype) if op.attrs.get("post_in") \
            else 0
        adma_of: dict[int, float] = {}  # per K chunk: the engine time of one activation DMA
        w4 = "w4" in op.attrs
        if w4:  # int4 weights: their f16 scales per block of K
            sb, blk = dtype_bytes(g.tensors[op.attrs["w4"][0]].dtype), op.attrs["w4"][1]
            scale_all = {tc: cm.align(ceil_div(geo.k, blk) * tc * wshare * sb) for tc in tc_cands}
            scale_of = {(tc, tk): cm.align(ceil_div(tk, blk) * tc * sb)
                        for tc in tc_cands for tk in k_cands}
        n_partial = 2 * (kparts - 1)
        align = cm.align
        piece_cycles = cm.piece_cycles
        # ``CostModel.piece_cycles``' own memo read here (a call and its key per candidate:
        # ~1.5 % of a ResNet-50 schedule), unless a subclass answers otherwise (the tests')
        pc_memo = cm.piece_memo(g) if cm.answers_piece_memo() else None
        mach, mid, oname = cm.machine, id(cm.machine), op.name
        engine_cycles = cm.dma_engine_cycles

        def buffers(tr, tc, tk, aslot, aslots, wslot, wslots, oslot, one_tile, post_buf,
                    bias_buf, rq_slot, o_out, streamed):
            """The buffers of a tiling as (role, slot bytes, slots, unit), in :class:`Buffer`
            order (made only for a tiling that becomes the best; its footprint is computed
            below without them and checked against them: :func:`_check_fp`)."""
            bufs = [("act", aslot, aslots, unit),
                    ("weight", wslot, wslots, unit),
                    ("out", oslot, 1 if one_tile else 2, unit)]
            if post_buf is not None:  # the epilogue's [rows, cols] operand
                bufs.append(post_buf)
            if bias_buf is not None:  # a bias vector per column tile, resident
                bufs.append(bias_buf)
            if w4:
                if tk < geo.k and tc >= cols:  # all of K's, loaded once
                    # (kinds.tcu.scales_resident)
                    # (a weight group's: ``wshare`` column parts' of them, one broadcast)
                    bufs.append(("scale", scale_all[tc], 1, unit))
                else:
                    bufs.append(("scale", scale_of[(tc, tk)], 2 if streamed else 1, unit))
            if rq_slot:  # per-channel requant (multiplier, shift) pairs
                bufs.append(("requant", rq_slot, 2 if streamed else 1, unit))
            if kparts > 1:  # part 0: the others' partial sums and the reduced tile
                bufs += [("partial", oslot, n_partial, "dtdu"), ("red_out", o_out, 2, "cvu")]
            return bufs

        for tr in tr_cands:
            in_rows = _in_rows(g, op, tr) if conv else tr
            m = tr * geo.row_elems
            n_rows = ceil_div(rows, tr)
            if conv:
                aslot_of = {tk: align(in_rows * op.attrs["w"] * (tk // kwin) * groups * ab)
                            for tk in k_cands}
            else:
                aslot_of = {tk: align(tr * geo.row_elems *
                                      (K if act_resident or act_whole else tk) * ab)
                            for tk in k_cands}
            for tc in tc_cands:
                n_tiles = n_rows * ceil_div(cols, tc)
                one_tile = once and tr >= rows and tc >= cols  # ``once``: one slot of each
                # the buffers that depend on the tile's rows and columns only
                post_buf = ("post_in", align(m * tc * pb_), 1 if one_tile else 2, unit) \
                    if pb_ else None
                bias_buf = ("bias", align(tc * 4), ceil_div(cols, tc), unit) \
                    if len(ws) > 1 else None
                rq_slot = align(tc * 8) if "rq_table" in op.attrs else 0
                o_acc = align(m * tc * 4)  # a K-chunked tile's f32 (i32) accumulator
                o_out = align(m * tc * ob)  # the tile in its output type
                oslots = 1 if one_tile else 2
                fp_tc = (post_buf[1] * post_buf[2] if post_buf is not None else 0) + \
                    (bias_buf[1] * bias_buf[2] if bias_buf is not None else 0)
                for tk in k_cands:
                    streamed = tk < K or tc < cols
                    # one K chunk per part and one instruction tile: the weight never streams
                    wslots = 1 if not streamed or (whole_parts and tr >= rows and tc >= cols) \
                        else 2
                    wslot = wslot_of[(tc, tk)]
                    aslot = aslot_of[tk]
                    oslot = o_acc if tk < K else o_out
                    if tk < K and round_out:
                        # + the rounded (dequantized) result next to the f32 (i32) accumulator
                        oslot += o_out
                    aslots = 1 if act_resident or (once and tr >= rows and tk >= K) else 2
                    # the footprint of :func:`buffers`' list, summed without making it (the
                    # footprint decides first, the buffers only for a tiling that becomes the
                    # best; every term is an int: the same sum in any order)
                    fp = aslot * aslots + wslot * wslots + oslot * oslots + fp_tc
                    if w4:
                        fp += scale_all[tc] if tk < geo.k and tc >= cols else \
                            scale_of[(tc, tk)] * (2 if streamed else 1)
                    if rq_slot:
                        fp += rq_slot * (2 if streamed else 1)
                    if kparts > 1:
                        fp += oslot * n_partial + o_out * 2
                    if once and not ONCE_TILES:
                        # the tiling is chosen with two slots of each (the HBSM one slot
                        # frees is left to prefetches, kept tensors and late stores, which
                        # read ``TilePlan.footprint``: larger tiles filling it measured longer)
                        fp += (aslot if aslots == 1 and not act_resident else 0) + \
                            ((oslot + (post_buf[1] if post_buf else 0)) if one_tile else 0)
                    if smallest is None or fp < smallest[0]:
                        smallest = (fp, tr, tc, tk)
                    if fp > budget:
                        continue
                    n_instr = n_tiles * nk_of[tk]
                    hit = pc_memo.get((mid, oname, tr, tc, tk)) if pc_memo is not None else None
                    cyc = n_instr * (hit[1] if hit is not None and hit[0] is mach else
                                     piece_cycles(g, op, tr, tc, tk))
                    # the weight DMAs the tiling implies: a streamed weight is loaded again for
                    # every row tile (and column tile and K chunk), one DMA each, on the CCB
                    # DMA engines that ``wstreams`` such streams of the stage share (each
                    # transfer's engine time in a stream: ``CostModel.dma_engine_cycles``)
                    wdma = wdma_of.get((tc, tk))
                    if wdma is None:
                        wdma = wdma_of[(tc, tk)] = engine_cycles(
                            wslot if streamed else wslot * ceil_div(geo.k, tk))
                    wload = (n_instr if streamed else 1) * wdma
                    if astreams and not act_resident:
                        # the activation DMAs: per row tile, every K chunk again for every
                        # column tile (whole K: once per row tile)
                        adma = adma_of.get(aslot)
                        if adma is None:
                            adma = adma_of[aslot] = engine_cycles(aslot)
                        wload += astreams / max(1, wstreams) * adma * n_rows * (
                            ceil_div(cols, tc) * nk_of[tk] if tk < K else 1)
                    key = (max(cyc, wstreams * wload / mc.ccb_dma_engines), cyc, -fp)
                    if best is None or key < best_key:
                        best_key = key
                        bufs = buffers(tr, tc, tk, aslot, aslots, wslot, wslots, oslot,
                                       one_tile, post_buf, bias_buf, rq_slot, o_out, streamed)
                        best = TilePlan(op.name, op.unit, rows, cols, tr, tc, tk, geo.k, cyc,
                                        tuple(Buffer(*b) for b in bufs), not streamed,
                                        act_resident > 0)
                        _check_fp(op, bufs, fp, once and not ONCE_TILES,
                                  aslot if aslots == 1 and not act_resident else 0,
                                  (oslot + (post_buf[1] if post_buf else 0)) if one_tile else 0)
    else:
        # vector / data-movement ops: tile rows only (reductions along cols keep whole rows)
        frac_c = cols / max(1, geo.cols)
        in_row_b = geo.in_row_bytes * frac_c
        out_row_b = geo.out_row_bytes * frac_c
        rot = op.attrs.get("rot") or {}  # rotate-half reads: in another input's buffer
        extra = [g.tensors[t] for i, t in enumerate(op.inputs)
                 if g.tensors[t].kind != "weight" and i not in rot][1:]
        wboxes = _weight_boxes(g, op, cols)
        for tr in _candidates(rows, 1, limit=16):
            in_rows = _in_rows(g, op, tr) if op.unit == "cvu.pool" else tr
            bufs = [Buffer("act", cm.align(in_rows * in_row_b), 2, unit),
                    Buffer("out", cm.align(tr * out_row_b), 2, unit)]
            for i, t in enumerate(extra):  # broadcast operands (bias rows, scales): whole
                tb = t.nbytes if t.numel < g.out(op).numel else t.nbytes * tr / max(1, geo.rows)
                bufs.append(Buffer(f"act{i + 1}", cm.align(tb * frac_c), 2, unit))
            for w, box in wboxes(tr):
                if box is None:  # resident whole (its columns)
                    bufs.append(Buffer("weight", cm.align(w.nbytes * frac_c), 1, unit))
                else:  # a CVU op loads the box its map reads per tile (kinds/cvu.input_box)
                    bufs.append(Buffer("weight", cm.align(box[1] * dtype_bytes(w.dtype)),
                                       2 if box[0] else 1, unit))
            fp = sum(b.nbytes for b in bufs)
            if smallest is None or fp < smallest[0]:
                smallest = (fp, tr, cols, 1)
            if fp > budget:
                continue
            n_instr = ceil_div(rows, tr)
            cyc = n_instr * cm.piece_cycles(g, op, tr, cols)
            if best is None or (cyc, -fp) < (best.cycles, -best.footprint):
                best = TilePlan(op.name, op.unit, rows, cols, tr, cols, 1, 1, cyc, tuple(bufs))
        if best is not None and once and VECTOR_ONCE and best.tr >= rows:
            # one tile per piece and one piece per TPB: each buffer is filled once (the
            # tiling chosen with two slots, as a contraction's: ``ONCE_TILES``)
            best = replace(best, buffers=tuple(replace(b, slots=1) for b in best.buffers))
    if best is None:
        fp, tr, tc, tk = smallest  # type: ignore[misc]
        where = f" ({op.loc})" if op.loc else ""
        raise ScheduleError(
            f"op '{op.name}'{where} ({op.unit}): no tiling of its {rows}x{cols} piece fits the HBSM "
            f"budget of {budget} bytes per TPB; the smallest tiling ({tr}x{tc}"
            f"{'x' + str(tk) if tk > 1 else ''}) needs {fp} bytes. Use more TPBs or a machine with "
            f"a larger HBSM.")
    return best


def k_part_range(n_chunks: int, kparts: int, q: int) -> tuple[int, int]:
    """The K chunks ``[a, b)`` of part ``q`` of a reduction of ``n_chunks`` chunks split over
    ``kparts`` TPBs (contiguous runs, as equal as possible)."""
    return n_chunks * q // kparts, n_chunks * (q + 1) // kparts


def piece_in_bytes(g: OpGraph, op: Op, rows: int, cols: int) -> float:
    """Activation bytes a piece reads (with the halo rows of convs/pools)."""
    geo = geometry(g, op)
    if op.unit in ("tcu.conv2d", "cvu.pool", "tcu.matmul"):
        w = row_window(g, op, 0, rows)
        in_rows = (w[1] - w[0]) if w else geo.in_rows
        b = in_rows * geo.in_row_bytes
        if op.unit == "tcu.matmul":
            post_in = op.attrs.get("post_in")
            acts = [t for t in g.act_inputs(op) if t.name != post_in]
            if len(acts) > 1:  # a second activation operand (B) is needed whole per column part
                b += acts[1].nbytes * cols / max(1, geo.cols)
            if post_in:  # the epilogue's operand: the piece's [rows, cols] box
                b += rows * geo.row_elems * cols * dtype_bytes(g.tensors[post_in].dtype)
        return b
    return rows * geo.in_row_bytes * cols / max(1, geo.cols)


def piece_weight_bytes(g: OpGraph, op: Op, cols: int) -> float:
    geo = geometry(g, op)
    return geo.weight_bytes * cols / max(1, geo.cols)


def piece_out_bytes(g: OpGraph, op: Op, rows: int, cols: int) -> float:
    geo = geometry(g, op)
    return rows * geo.out_row_bytes * cols / max(1, geo.cols)


def _weight_boxes(g: OpGraph, op: Op, cols: int):
    """``tr -> [(weight tensor, None | (box varies with the row tile, box elements))]`` of a
    vector op's weight inputs: a CVU op with input maps loads, per piece of ``tr`` rows, the box
    its map reads (``kinds/cvu.input_box``: the rows of a ``[T, T]`` mask, one row of a table
    broadcast over the rows), which is what its HBSM holds -- not the whole weight (a 2 MB
    attention mask fused into a softmax's rows would not fit); other ops hold each weight's
    columns whole (None)."""
    ws = [(i, g.tensors[t]) for i, t in enumerate(op.inputs) if g.tensors[t].kind == "weight"]
    maps = op.attrs.get("maps")
    if not ws or maps is None or not op.unit.startswith("cvu.") or op.unit == "cvu.pool":
        return lambda tr: [(w, None) for _, w in ws]
    from .kinds.cvu import input_box  # (kinds import this module)
    from .plan import row_view
    oshape = g.out(op).shape
    E = row_view(oshape)[1]

    # per weight: does its box follow the row tile (the map reads the rows), its box at 1 row
    per = []
    resident = op.attrs.get("resident", ())
    for i, w in ws:
        if i >= len(maps) or i in resident:  # resident whole (``kinds/cvu``)
            per.append((w, None))
            continue
        b2 = input_box(maps[i], oshape, 0, 0, (2, E, cols))[1]
        per.append((w, (b2[0] > 1, b2[1] * b2[2])))

    def boxes(tr: int):
        return [(w, None if p is None else (p[0], (tr if p[0] else 1) * p[1])) for w, p in per]
    return boxes


def col_splits(cm: CostModel, g: OpGraph, op: Op, k: int) -> list[int]:
    """Ways to split ``op``'s columns over ``k`` TPBs (factors that keep TCU-friendly widths)."""
    geo = geometry(g, op)
    out = []
    for gc in range(1, k + 1):
        if k % gc:
            continue
        if gc == 1:
            out.append(1)
            continue
        if op.unit in ("cvu.softmax", "cvu.layernorm", "cvu.rmsnorm", "cvu.reduction"):
            continue
        if op.attrs.get("rot"):  # rotate-half reads: a piece holds whole rows (kinds/cvu)
            continue
        if op.unit == "tcu.conv2d" and op.attrs.get("groups", 1) > 1:
            if op.attrs["groups"] % gc:
                continue
        w = geo.cols / gc
        if op.unit.startswith("tcu") and w < cm.machine.tcu_tile_n:
            continue
        if w < 1:
            continue
        out.append(gc)
    return out


__all__ = ["Buffer", "TilePlan", "tile_piece", "col_splits", "k_part_range", "piece_in_bytes",
           "piece_weight_bytes", "piece_out_bytes"]
_ = math

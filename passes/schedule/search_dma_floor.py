"""A lower bound of a candidate segment's isolated cost from its activation DMAs (issue 15).

:mod:`.search_floor` bounds a candidate by its TCU work; many candidates the search rejects --
most of ResNet-50's candidate pipelines -- are held by the CCB DMA engines instead: their inputs
are loaded once per band and row tile (conv halo rows, every K chunk again for each column tile
of a band), and their outputs stored. :func:`dma_floor` answers those without a build.

Why it is a lower bound: every DMA task of a build runs on one of the ``ccb_dma_engines``
engines, whose data phases follow each other (:mod:`.dma_queue`: ``d_i >= e_(i-1)``; at depth 1
the whole transfer holds the engine, :class:`.busy.BusyBlocks`), and no data phase starts before
the transfer's fixed latency (setup + memory latencies, ``CostModel.dma_latency``) after cycle 0
(an isolated build's inputs are ready at 0). So some engine's last data phase ends at or after
(the shortest fixed latency) + (the sum of the data phases) / (engines), and the makespan is the
latest end of any task. Any subset of the build's DMA tasks gives such a bound; this module
counts a subset it knows exactly:

* the activation loads of a stage's pieces (role ``act``): the inputs not produced in the segment
  (``Transfers._streamed``) as :mod:`.kinds.tcu` / :mod:`.kinds.cvu` ``plan_piece`` load them --
  a TCU piece's whole-K rows once per (TPB, rows), one DRB broadcast to the band's column parts
  (``_act_in`` with ``row_tpbs``) or its K chunks one load each; a CVU piece's input boxes; a
  pool's window rows; an epilogue's ``post_in`` box;
* the stores of the pieces whose op's output is read outside the segment (role ``out``).

Weights, biases and tables are not counted (their traffic barely depends on the candidate, so
it would not prune), nor the stages whose pieces are built otherwise: lockstep groups (a
one-stage contraction with chunked K or a streamed weight, :func:`.segment.lockstep`), K splits,
resident activations, an op of a causal chain (clipped pieces, another band order), families
without pieces here. Each covered stage's count is the builder's own, transfer by transfer, from
its functions (``Scheduler.band_boxes``, the windows and box-bytes memos, ``CostModel``):
``test_dma_floor.py`` requires it to *equal* the sum of the data phases of the stage's ``act``
and ``out`` DMA tasks in the full isolated build of every candidate real searches cost.
"""

from __future__ import annotations

from .graph import Op, ScheduleError, conv_out_hw, dtype_bytes
from .plan import conv_window, op_family, row_view
from .search_floor import stage_shape
from .segment import SegmentCfg, StageCfg, lockstep, memory_of, reads_whole

FAMILIES = ("matmul", "conv", "cvu", "reduce", "pool")


def dma_floor(sched, seg: SegmentCfg) -> float:
    """A lower bound of the makespan of ``seg`` built alone from the data phases of its counted
    DMA transfers (module doc); 0 when none is counted. ``sched``: the search's
    :class:`.timeline.Scheduler` (its tile plans and memos)."""
    if seg.kind not in ("data-parallel", "pipeline"):
        return 0.0
    g = sched.g
    causal = getattr(g, "causal", None) or {}
    if any(st.op in causal for st in seg.stages):
        return 0.0
    names = {st.op for st in seg.stages}
    memo = sched.__dict__.setdefault("_dma_floor", {})
    total, lat = 0.0, float("inf")
    for st in seg.stages:
        op = sched.ops[st.op]
        if st.ks != 1 or st.act_resident or op_family(op.unit) not in FAMILIES:
            continue
        try:
            tplan = sched.stage_plan(seg, st)
        except ScheduleError:
            return 0.0  # the build says why
        if tplan.act_resident or (len(seg.stages) == 1 and lockstep(tplan, op)):
            continue
        streamed = tuple(_made_in(sched, t, names) for t in op.inputs)
        out = _outside(sched, op, names)
        key = (st, tplan.tr, tplan.tc, tplan.tk, streamed, out)
        hit = memo.get(key)
        if hit is None:
            shape = stage_shape(sched, op, st)
            if shape is None:
                hit = stage_dma(sched, st, op, tplan, streamed, out)
            else:  # a stage of the same structure (another op, other TPBs): its count
                smemo = sched.__dict__.setdefault("_dma_shapes", {})
                skey = (shape, key[1:])
                hit = smemo.get(skey)
                if hit is None:
                    hit = smemo[skey] = stage_dma(sched, st, op, tplan, streamed, out)
            memo[key] = hit
        total += hit[0]
        lat = min(lat, hit[1])
    if not total > 0.0:
        return 0.0
    mc = sched.cm.machine
    return (lat if mc.dma_outstanding > 1 else 0.0) + total / mc.ccb_dma_engines


def _made_in(sched, tensor: str, names: set[str]) -> bool:
    """``Transfers._streamed`` in an isolated build (nothing kept): made by an op of the segment."""
    prod = sched.producers.get(tensor)
    return prod is not None and prod.name in names


def _outside(sched, op: Op, names: set[str]) -> bool:
    """``PlanBuilder._outside_consumers`` for ``op``'s output (nothing kept): stored to memory."""
    t = op.outputs[0]
    users = sched.consumers.get(t, [])
    return sched.g.tensors[t].kind == "output" or not users or \
        any(u.name not in names or reads_whole(u, t) for u in users)


class _Count:
    """The transfers counted so far, by kind: (bytes, source, destination, broadcast) -> how
    many (a stage's pieces repeat a few shapes); :meth:`data` sums their data phases."""

    def __init__(self):
        self.n: dict[tuple, int] = {}
        self.seen: set[tuple] = set()  # ``Transfers.acache``: (TPB, rows) of a whole-K load

    def add(self, nbytes: float, src: str, dst: str = "hbsm", broadcast: bool = False,
            times: int = 1) -> None:
        key = (nbytes, src, dst, broadcast)
        self.n[key] = self.n.get(key, 0) + times

    def data(self, cm) -> tuple[float, float]:
        """(the data phases' sum, the shortest fixed latency) of the counted transfers."""
        queued = cm.machine.dma_outstanding > 1
        data, lat = 0.0, float("inf")
        for (nb, src, dst, bc), k in self.n.items():
            cyc = cm.dma_cycles(nb, src, dst=dst, broadcast=bc)
            fixed = cm.dma_latency(src, dst)
            if queued:  # ``ListScheduler._add_queued``: the data phase, >= 0
                d = cyc - fixed
                data += k * (d if d > 0.0 else 0.0)
            else:  # depth 1: the whole transfer holds the engine
                data += k * cyc
            lat = min(lat, fixed)
        return data, lat


def _src(sched, tensor: str) -> str:
    """Where ``Transfers._load`` / ``_broadcast`` read ``tensor`` from."""
    g = sched.g
    return "ddr" if g.tensors[tensor].kind == "weight" else memory_of(sched.cm, g, tensor)


def stage_dma(sched, st: StageCfg, op: Op, tplan, streamed: tuple[bool, ...], out: bool
              ) -> tuple[float, float]:
    """(data cycles, shortest fixed latency) of the counted DMAs of stage ``st`` of ``op`` built
    piece by piece (the wave order's pieces, ``PlanBuilder._compute_segment``); ``streamed``: per
    input, made in the segment; ``out``: its output is stored."""
    g, cm = sched.g, sched.cm
    cnt = _Count()
    add = cnt.add
    family = op_family(op.unit)
    ob = dtype_bytes(g.out(op).dtype)
    loc = memory_of(cm, g, op.outputs[0]) if out else ""
    tcu = family in ("matmul", "conv")
    if tcu:
        row_elems = sched.geo(op).row_elems
        post_in = op.attrs.get("post_in")
        pb = dtype_bytes(g.tensors[post_in].dtype) if post_in else 0
        x_src = _src(sched, op.inputs[0])
        x_mem = memory_of(cm, g, op.inputs[0])
        p_src = _src(sched, post_in) if post_in else ""
    elif family == "cvu":
        ins = _cvu_inputs(sched, op, streamed)
        E = row_view(g.out(op).shape)[1]
    else:
        x = g.tensors[op.inputs[0]]
        xb = dtype_bytes(x.dtype)
        x_src = _src(sched, x.name)
    for b in range(st.bands):
        row = None  # the TCU row tile's loads (the same for its column parts and tiles)
        for j, tpb, a, e, cc, ce in sched.band_boxes(st, op, tplan, b):
            rows, cols = e - a, ce - cc
            if tcu:
                if row is None or row[0] != a:
                    row = (a,) + _tcu_rows(sched, op, tplan, a, rows)
                _, x_rows, full, chunks = row
                if not streamed[0]:
                    if chunks is None:  # ``_act_in`` with the band's TPB row: once per rows
                        if (tpb, x_rows) not in cnt.seen:
                            row_tpbs = tuple(st.tpbs[st.row_of(b) * st.gc + jj]
                                             for jj in range(st.gc))
                            if len(row_tpbs) > 1:  # ``_broadcast`` reads it where it lives
                                add(full, x_mem, broadcast=True)
                            else:
                                add(full, x_src)
                            for x in row_tpbs:
                                cnt.seen.add((x, x_rows))
                    else:  # one load per K chunk
                        for nb in chunks:
                            add(nb, x_src)
                if post_in:
                    add(float(rows * cols * pb), p_src)
                dims = (rows, row_elems, cols)
            elif family == "cvu":
                _cvu_piece(cnt, ins, rows, E, cols)
                dims = (rows, E, cols)
            elif family == "reduce":
                _, E, C = row_view(x.shape)
                if not streamed[0]:
                    add(float(rows * E * C * xb), x_src)
                dims = (rows, E, 1)
            else:  # pool
                at = op.attrs
                _, i0, i1, _, _ = conv_window(at, a, rows, 1)
                if not (streamed[0] and at.get("layout") != "nchw"):
                    add(float((i1 - i0) * at["w"] * cols * xb), x_src)
                dims = (rows, conv_out_hw(at)[1], cols)
            if out:
                add(float(dims[0] * dims[1] * dims[2] * ob), "hbsm", loc)
    return cnt.data(cm)


def _tcu_rows(sched, op: Op, tplan, r0: int, rows: int) -> tuple:
    """What a TCU piece of output rows [r0, r0 + rows) loads of its activation outside a
    lockstep group (``kinds.tcu.plan_piece``: ``group`` -1, one K part, no clipping): (its input
    rows, the bytes of all of K, None) when K is whole, else (.., .., the bytes of each K chunk)."""
    g = sched.g
    xb = dtype_bytes(g.tensors[op.inputs[0]].dtype)
    if op.unit == "tcu.conv2d":
        at = op.attrs
        wkey = (op.name, r0, rows)
        win = sched.windows.get(wkey)
        if win is None:
            win = sched.windows[wkey] = conv_window(at, r0, rows, at.get("dilation", (1, 1))[0])
        n0, i0, i1, _, _ = win
        kwin = at["kh"] * at["kw"]
        K = at["c"]
        kk = max(1, tplan.tk // kwin) if tplan.tk < tplan.k else K
        x_rows = (n0 * at["h"] + i0, n0 * at["h"] + i1)
        per_k = (i1 - i0) * at["w"]
    else:
        K = op.attrs["k"]
        kk = tplan.tk if tplan.tk < K else K
        x_rows = (r0, r0 + rows)
        per_k = rows
    if kk == K:
        return x_rows, float(per_k * K * xb), None
    return x_rows, float(per_k * K * xb), [float(per_k * min(kk, K - k0) * xb)
                                           for k0 in range(0, K, kk)]


def _cvu_inputs(sched, op: Op, streamed: tuple[bool, ...]) -> list[tuple]:
    """The inputs a CVU piece loads (``kinds.cvu.plan_piece``: weights and the inputs not made
    in the segment): (tensor, its bytes per element, the piece dims its map reads or None, where
    it is read from)."""
    g = sched.g
    maps = op.attrs.get("maps")
    resident = op.attrs.get("resident", ())
    out = []
    for i, tname in enumerate(op.inputs):
        t = g.tensors[tname]
        if (t.kind != "weight" and streamed[i]) or i in resident or i in op.attrs.get("rot", ()):
            continue  # made in the segment, a resident table (loaded once per TPB), or read
            # from another input's box (a rotate-half read)
        used = None
        if maps is not None and i < len(maps):
            # the box :func:`.kinds.cvu.input_box` gives: the piece's dims the map reads, 1 in
            # the others; which dims it reads does not depend on where the piece starts
            # (``emit_core.row_index``'s coefficients are the same for every row and column)
            from .kinds.cvu import input_box
            lin, _ = input_box(maps[i], g.out(op).shape, 0, 0, (1, 1, 1))
            used = tuple(any(x[0][d] for x in lin) for d in range(3))
        out.append((t, dtype_bytes(t.dtype), used, _src(sched, tname)))
    return out


def _cvu_piece(cnt: _Count, ins: list[tuple], rows: int, E: int, cols: int) -> None:
    """The input loads of one CVU piece of ``rows x E x cols`` (:func:`_cvu_inputs`)."""
    tile_b = rows * E * cols
    for t, tb, used, src in ins:
        if used is not None:
            nb = float((rows if used[0] else 1) * (E if used[1] else 1) *
                       (cols if used[2] else 1) * tb)
        else:
            nb = min(float(t.nbytes), tile_b * tb)
        cnt.add(nb, src)


__all__ = ["dma_floor", "stage_dma"]

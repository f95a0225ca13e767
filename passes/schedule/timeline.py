"""Space-time timeline: a placement (segments of stages on TPB groups) -> tasks with predicted cycles.

A *segment* is a run of ops executed together: each op is a *stage* on a group of TPBs (``gr`` rows x
``gc`` column parts); the stage's output rows are cut into ``bands`` mini-tensors, band ``b`` column
``j`` runs on ``tpbs[row_of(b) * gc + j]`` (round-robin, or contiguous blocks of bands for pipelines). Stages of one segment stream mini-tensors to each other
(TPB -> TPB DTDU copies of the producer band rows the consumer band needs, halo rows included); a
one-stage segment is a data-parallel op. Segments run one after the other (their inputs come from CCB
SRAM or DDR, written by the segment that produced them).

Tasks (one per instruction or instruction group) go to in-order resources exactly like the hardware:
each TPB unit (TCU/CVU/DTDU/CSU) and each CCB DMA engine executes its queue in program order. A task
starts when its resource is free and its dependencies (data + buffer slots: a double-buffered slot is
refilled only after the task that read it two fills ago has finished) are done. This list schedule is
the scheduler's prediction: start/end cycles per task, per op, the makespan and the critical path.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from .cost import CostModel, ceil_div
from .graph import Op, OpGraph, ScheduleError, geometry, row_window
from .partition import TilePlan, piece_in_bytes, piece_out_bytes, piece_weight_bytes, tile_piece


@dataclass(frozen=True)
class StageCfg:
    op: str
    tpbs: tuple[int, ...]
    gc: int = 1
    bands: int = 1

    block: bool = False  # bands to TPB rows in contiguous blocks (pipelines) or round-robin

    @property
    def gr(self) -> int:
        return len(self.tpbs) // self.gc

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


@dataclass(frozen=True)
class SegmentCfg:
    stages: tuple[StageCfg, ...]
    kind: str = "data-parallel"  # data-parallel | pipeline | single

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(s.op for s in self.stages)


@dataclass
class Task:
    id: int
    kind: str  # dma-in | dma-out | compute | copy
    unit: str  # tcu cvu dtdu csu dma
    tpb: int  # executing TPB (-1: a CCB DMA engine)
    op: str
    tensor: str
    nbytes: float
    cycles: float
    deps: list[int]
    segment: int = 0
    band: int = 0
    col: int = 0
    dst_tpbs: tuple[int, ...] = ()
    src: str = ""  # ddr | sram | hbsm
    dst: str = ""
    engine: int = -1
    macs: int = 0
    start: float = 0.0
    end: float = 0.0
    crit_pred: int = -1  # the task whose end fixed this task's start

    @property
    def resource(self) -> tuple[str, int]:
        return ("dma", self.engine) if self.unit == "dma" else (self.unit, self.tpb)


@dataclass
class BufferUse:
    """An HBSM buffer a TPB needs during a segment (lifetime in predicted cycles)."""
    tpb: int
    name: str
    op: str
    role: str
    slot_bytes: int
    slots: int
    unit: str
    start: float = 0.0
    end: float = 0.0

    @property
    def nbytes(self) -> int:
        return self.slot_bytes * self.slots


@dataclass
class Timeline:
    tasks: list[Task] = field(default_factory=list)
    buffers: list[BufferUse] = field(default_factory=list)
    plans: dict[str, TilePlan] = field(default_factory=dict)
    segments: list[SegmentCfg] = field(default_factory=list)
    seg_spans: list[tuple[float, float]] = field(default_factory=list)

    @property
    def makespan(self) -> float:
        return max((t.end for t in self.tasks), default=0.0)


def memory_of(cm: CostModel, g: OpGraph, tensor: str) -> str:
    """Where a tensor lives between segments: CCB SRAM if it fits a quarter of it, else DDR."""
    t = g.tensors[tensor]
    if t.kind in ("weight", "input", "output"):
        return "ddr"
    return "sram" if t.nbytes <= cm.machine.ccb_sram_bytes // 4 else "ddr"


def band_rows(rows: int, bands: int, b: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of band ``b`` of ``bands`` (near-equal split)."""
    return (rows * b) // bands, (rows * (b + 1)) // bands


def streamable(g: OpGraph, op: Op, tensor: str) -> bool:
    """Can ``op`` consume ``tensor`` band by band from a producer (row-standard layouts, identity
    indexing)? Otherwise it reads the whole tensor from memory. (Cached per graph.)"""
    cache = g.__dict__.setdefault("_stream_cache", {})
    key = (op.name, tensor)
    r = cache.get(key)
    if r is None:
        r = cache[key] = _streamable(g, op, tensor)
    return r


def _streamable(g: OpGraph, op: Op, tensor: str) -> bool:
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


class Scheduler:
    """Builds tasks for segments and list-schedules them on in-order resources."""

    def __init__(self, cm: CostModel, g: OpGraph):
        self.cm = cm
        self.g = g
        self.ops = {o.name: o for o in g.ops}
        self.producers = g.producers()
        self._tile_cache: dict[tuple, TilePlan] = {}
        self._geo: dict[str, object] = {}
        self._bands: dict[tuple[int, int], list[int]] = {}

    def geo(self, op: Op):
        r = self._geo.get(op.name)
        if r is None:
            r = self._geo[op.name] = geometry(self.g, op)
        return r

    def band_of(self, rows: int, bands: int, r: int) -> int:
        """The band (of ``bands`` over ``rows``) that holds row ``r``."""
        starts = self._bands.get((rows, bands))
        if starts is None:
            starts = self._bands[(rows, bands)] = [band_rows(rows, bands, q)[0] for q in range(bands)]
        return max(0, bisect.bisect_right(starts, r) - 1)

    # ------------------------------------------------------------------ tiles
    def tile(self, op: Op, rows: int, cols: int, budget: int) -> TilePlan:
        key = (op.name, rows, cols, budget)
        p = self._tile_cache.get(key)
        if p is None:
            p = tile_piece(self.cm, self.g, op, rows, cols, budget)
            self._tile_cache[key] = p
        return p

    def stage_budget(self, seg: SegmentCfg, st: StageCfg) -> int:
        share = {}
        for s in seg.stages:
            for t in s.tpbs:
                share[t] = share.get(t, 0) + 1
        n = max(share[t] for t in st.tpbs)
        bw = self.cm.machine.hbsm_bank_width
        return (self.cm.machine.hbsm_bytes // n) // bw * bw

    # ------------------------------------------------------------------ task building
    def build(self, segs: list[SegmentCfg], isolated: bool = False) -> Timeline:
        """Tasks of ``segs`` scheduled in order. ``isolated``: inputs are ready at cycle 0 (search)."""
        tl = Timeline(segments=list(segs))
        st = _State(self, tl)
        for si, seg in enumerate(segs):
            st.segment(si, seg, isolated)
        return tl


class _State:
    def __init__(self, s: Scheduler, tl: Timeline):
        self.s = s
        self.cm = s.cm
        self.g = s.g
        self.tl = tl
        self.free: dict[tuple[str, int], float] = {}
        self.last_on_res: dict[tuple[str, int], int] = {}
        self.written: dict[str, list[int]] = {}  # tensor in memory -> dma-out task ids
        self.tpb_last: dict[int, int] = {}  # TPB -> last task id touching it (segment barrier)
        self.dma_busy: dict[int, list[list[float]]] = {}

    # a task is scheduled as soon as it is created (creation order == program order per resource)
    def add(self, **kw) -> Task:
        t = Task(id=len(self.tl.tasks), **kw)
        ready, pred = 0.0, -1
        for d in t.deps:
            e = self.tl.tasks[d].end
            if e > ready:
                ready, pred = e, d
        if t.unit == "dma":
            # CCB DMA engines: the compiler orders each engine's queue by predicted start, so a
            # transfer fills the earliest idle gap of the engine that can start it first
            best = None
            for e in range(self.cm.machine.ccb_dma_engines):
                st, idx = _gap(self.dma_busy.setdefault(e, []), ready, t.cycles)
                if best is None or st < best[0]:
                    best = (st, e, idx)
            assert best is not None
            start, t.engine, idx = best
            _insert(self.dma_busy[t.engine], idx, start, start + t.cycles)
            if start > ready:
                pred = self.last_on_res.get(("dma", t.engine), pred)
        else:
            res = t.resource
            start = ready
            free = self.free.get(res, 0.0)
            if free > start:  # TPB units execute their queue in program order
                start, pred = free, self.last_on_res.get(res, -1)
            self.free[res] = start + t.cycles
        t.start = start
        t.end = start + t.cycles
        t.crit_pred = pred
        self.last_on_res[t.resource] = t.id
        self.tl.tasks.append(t)
        return t

    def segment(self, si: int, seg: SegmentCfg, isolated: bool) -> None:
        if seg.kind == "dma":
            return self._dma_segment(si, seg, isolated)
        g, cm, s = self.g, self.cm, self.s
        seg_ops = set(seg.ops)
        seg_tpbs = sorted({t for st in seg.stages for t in st.tpbs})
        # segment barrier per TPB: its first task waits for the TPB's previous segment to end
        barrier = {t: self.tpb_last[t] for t in seg_tpbs if t in self.tpb_last}
        seg_start_task = len(self.tl.tasks)
        consumers_outside = self._outside_consumers(seg_ops)
        # per stage: tile plan, piece tasks per (band, col)
        stage_out: dict[str, dict[tuple[int, int], int]] = {}  # op -> (band, col) -> compute task
        stage_of: dict[str, StageCfg] = {st.op: st for st in seg.stages}

        def bar(tpb: int) -> list[int]:
            return [barrier[tpb]] if tpb in barrier else []

        # weights: resident parts broadcast once at segment start
        plans: dict[str, TilePlan] = {}
        for st in seg.stages:
            op = s.ops[st.op]
            geo = s.geo(op)
            budget = s.stage_budget(seg, st)
            rows_b = ceil_div(geo.rows, max(1, st.bands))
            cols_b = ceil_div(geo.cols, st.gc)
            plan = s.tile(op, rows_b, cols_b, budget)
            plans[st.op] = plan
            self.tl.plans[st.op] = plan
        weight_task: dict[tuple[str, int], list[int]] = {}
        chunk_bytes = cm.machine.hbsm_bytes // 16  # DMA granule that lets compute start early
        for st in seg.stages:
            op = s.ops[st.op]
            plan = plans[st.op]
            if not plan.weight_resident:
                continue
            geo = s.geo(op)
            for j in range(st.gc):
                tp = tuple(st.tpbs[r * st.gc + j] for r in range(st.gr))
                nb = piece_weight_bytes(g, op, ceil_div(geo.cols, st.gc))
                if nb <= 0:
                    continue
                deps = sorted({d for t in tp for d in bar(t)})
                n_w = max(1, min(8, ceil_div(int(nb), chunk_bytes)))
                weight_task[(op.name, j)] = [
                    self.add(kind="dma-in", unit="dma", tpb=-1, op=op.name,
                             tensor=",".join(x.name for x in g.weights(op)), nbytes=nb / n_w,
                             cycles=cm.dma_cycles(nb / n_w, "ddr"), deps=deps, segment=si, col=j,
                             dst_tpbs=tp, src="ddr", dst="hbsm").id for _ in range(n_w)]

        # bands, round-major across stages so that pipelines interleave in program order
        slot_hist: dict[tuple[str, int, str], list[int]] = {}  # (op, tpb, role) -> task ids (slots)
        out_readers: dict[tuple[str, int, int], list[int]] = {}  # (op, band, col) -> readers

        def slot_dep(key: tuple[str, int, str], slots: int) -> list[int]:
            h = slot_hist.get(key, [])
            return [h[-slots]] if len(h) >= slots else []

        act_chunks: dict[tuple[str, int], list[int]] = {}  # (op, band) -> DMA ids (row broadcast)
        w_chunks: dict[tuple[str, int, int], list[int]] = {}  # (op, round, col) -> DMA ids
        lag = self._lags(seg)
        n_waves = max(st.bands + lag[st.op] for st in seg.stages)
        for w in range(n_waves):
            for st in seg.stages:
                b = w - lag[st.op]
                if not 0 <= b < st.bands:
                    continue
                op = s.ops[st.op]
                plan = plans[st.op]
                geo = s.geo(op)
                lo, hi = band_rows(geo.rows, st.bands, b)
                if hi <= lo:
                    continue
                rnd = st.round_of(b)
                row_tpbs = tuple(st.tpbs[st.row_of(b) * st.gc + j] for j in range(st.gc))
                unit = _unit_of(op.unit)
                for j in range(st.gc):
                    tpb = row_tpbs[j]
                    c0, c1 = band_rows(geo.cols, st.gc, j)
                    cols = c1 - c0
                    n_instr = max(1, ceil_div(hi - lo, plan.tr) * ceil_div(cols, plan.tc)
                                  * ceil_div(plan.k, plan.tk))
                    deps: list[int] = list(bar(tpb))
                    wids = weight_task.get((op.name, j), [])
                    # activation inputs: streamed from a producer stage, or from memory
                    mem_in_bytes = 0.0
                    mem_src = "sram"
                    mem_deps: list[int] = []
                    mem_parts: list[tuple[float, str]] = []  # (bytes, memory) per input tensor
                    for tname in op.inputs:
                        tt = g.tensors[tname]
                        if tt.kind == "weight":
                            continue
                        prod = s.producers.get(tname)
                        win = input_window(g, op, tname, lo, hi)
                        if prod is not None and prod.name in seg_ops and prod.name in stage_out:
                            deps += self._stream(si, seg, stage_of[prod.name], prod, tname, win,
                                                 tpb, stage_out[prod.name], out_readers, b)
                        else:
                            # a row band is the same for every column part: count it once
                            part = self._in_bytes(op, tname, lo, hi, geo.cols, win)
                            mem_in_bytes += part
                            mem_parts.append((part, memory_of(cm, g, tname)))
                            if memory_of(cm, g, tname) == "ddr":
                                mem_src = "ddr"
                            if not isolated and tname in self.written:
                                mem_deps.append(max(self.written[tname],
                                                    key=lambda i: self.tl.tasks[i].end))
                    w_stream = 0.0 if plan.weight_resident else piece_weight_bytes(g, op, cols)
                    n_chunks = min(8, max(n_instr, ceil_div(int(mem_in_bytes + w_stream),
                                                            chunk_bytes)))
                    chunk_deps: list[list[int]] = [[] for _ in range(n_chunks)]
                    if mem_in_bytes > 0:
                        key = (op.name, b)
                        if key not in act_chunks:  # one DRB broadcast to the band's column TPBs
                            ids = []
                            for c in range(n_chunks):
                                sd = [d for tp in row_tpbs for d in slot_dep((op.name, tp, "in"), 2)]
                                nb = mem_in_bytes / n_chunks
                                ids.append(self.add(
                                    kind="dma-in", unit="dma", tpb=-1, op=op.name,
                                    tensor=",".join(x for x in op.inputs if g.tensors[x].kind != "weight"),
                                    # fidelity (issue 9): one DMA per input tensor, each
                                    # with its own setup/latency, as the emitter sends them
                                    nbytes=nb, cycles=sum(cm.dma_cycles(pb / n_chunks, ps)
                                                          for pb, ps in mem_parts),
                                    deps=mem_deps + [d for tp in row_tpbs for d in bar(tp)] + sd,
                                    segment=si, band=b, col=-1, dst_tpbs=row_tpbs, src=mem_src,
                                    dst="hbsm").id)
                            act_chunks[key] = ids
                        ids = act_chunks[key]
                        for c in range(n_chunks):
                            chunk_deps[c].append(ids[min(c, len(ids) - 1)])
                    if w_stream > 0:
                        key3 = (op.name, rnd, j)
                        if key3 not in w_chunks:  # broadcast to this round's TPBs of column j
                            col_tpbs = tuple(st.tpbs[r * st.gc + j] for r in st.rows_in_round(rnd))
                            ids = []
                            for c in range(n_chunks):
                                sd = [d for tp in col_tpbs for d in slot_dep((op.name, tp, "w"), 2)]
                                nb = w_stream / n_chunks
                                ids.append(self.add(
                                    kind="dma-in", unit="dma", tpb=-1, op=op.name,
                                    tensor=",".join(x.name for x in g.weights(op)), nbytes=nb,
                                    cycles=cm.dma_cycles(nb, "ddr"),
                                    deps=[d for tp in col_tpbs for d in bar(tp)] + sd,
                                    segment=si, band=b, col=j, dst_tpbs=col_tpbs, src="ddr",
                                    dst="hbsm").id)
                            w_chunks[key3] = ids
                        ids = w_chunks[key3]
                        for c in range(n_chunks):
                            chunk_deps[c].append(ids[min(c, len(ids) - 1)])
                    # compute: one task per input chunk (instructions grouped evenly)
                    n_comp = n_chunks if (mem_in_bytes > 0 or w_stream > 0) else 1
                    macs_total = (hi - lo) * geo.row_elems * cols * geo.k \
                        if op.unit in ("tcu.matmul", "tcu.conv2d") else 0
                    per = plan.cycles * ((hi - lo) / plan.rows) * (cols / plan.cols) / n_comp
                    out_key = (op.name, tpb, "out")
                    last = None
                    # resident weights: chunks are row tiles (each needs the whole weight and
                    # yields final output rows, stored at once); streamed weights: K chunks
                    row_mode = plan.weight_resident and n_comp > 1
                    outside = op.outputs[0] in consumers_outside
                    stores: list[int] = []
                    for c in range(n_comp):
                        cdeps = (list(deps) if c == 0 else []) + (chunk_deps[c] if c < len(chunk_deps) else [])
                        if wids:
                            cdeps.append(wids[-1] if row_mode else
                                         wids[min(len(wids) - 1, ((c + 1) * len(wids) - 1) // n_comp)])
                        if c == 0:
                            for rd in slot_dep(out_key, 2):
                                cdeps += out_readers.get(("#slot", rd, 0), [])
                        t = self.add(kind="compute", unit=unit, tpb=tpb, op=op.name,
                                     tensor=op.outputs[0], nbytes=0.0, cycles=per, deps=cdeps,
                                     segment=si, band=b, col=j, macs=macs_total // n_comp)
                        slot_hist.setdefault((op.name, tpb, "in"), []).append(t.id)
                        slot_hist.setdefault((op.name, tpb, "w"), []).append(t.id)
                        last = t
                        if outside and (row_mode or c == n_comp - 1):
                            # outputs needed outside the segment go to memory (SRAM or DDR)
                            nb = piece_out_bytes(g, op, hi - lo, cols) / (n_comp if row_mode else 1)
                            loc = memory_of(cm, g, op.outputs[0])
                            o = self.add(kind="dma-out", unit="dma", tpb=-1, op=op.name,
                                         tensor=op.outputs[0], nbytes=nb,
                                         cycles=cm.dma_cycles(nb, loc), deps=[t.id], segment=si,
                                         band=b, col=j, dst_tpbs=(tpb,), src="hbsm", dst=loc)
                            self.written.setdefault(op.outputs[0], []).append(o.id)
                            stores.append(o.id)
                    assert last is not None
                    slot_hist.setdefault(out_key, []).append(last.id)
                    out_readers[("#slot", last.id, 0)] = list(stores)
                    stage_out.setdefault(op.name, {})[(b, j)] = last.id
        # segment end: record the last task per TPB
        for t in self.tl.tasks[seg_start_task:]:
            for tp in ((t.tpb,) if t.tpb >= 0 else ()) + t.dst_tpbs:
                prev = self.tpb_last.get(tp)
                if prev is None or self.tl.tasks[prev].end <= t.end:
                    self.tpb_last[tp] = t.id
        seg_tasks = self.tl.tasks[seg_start_task:]
        span = (min((t.start for t in seg_tasks), default=0.0), max((t.end for t in seg_tasks), default=0.0))
        self.tl.seg_spans.append(span)
        if isolated:  # the search only needs the makespan
            return
        # HBSM buffers: every TPB of a stage holds the plan's buffers for the segment's span there
        life: dict[int, list[float]] = {}
        for t in seg_tasks:
            for tp in ((t.tpb,) if t.tpb >= 0 else ()) + t.dst_tpbs:
                lf = life.setdefault(tp, [t.start, t.end])
                lf[0] = min(lf[0], t.start)
                lf[1] = max(lf[1], t.end)
        for st in seg.stages:
            plan = plans[st.op]
            for tp in st.tpbs:
                a, e = life.get(tp, span)
                for buf in plan.buffers:
                    self.tl.buffers.append(BufferUse(tp, f"{st.op}.{buf.role}", st.op, buf.role,
                                                     buf.slot_bytes, buf.slots, buf.unit, a, e))

    def _dma_segment(self, si: int, seg: SegmentCfg, isolated: bool) -> None:
        """A data-movement op (transpose, pad, broadcast, reshape): one CCB DMA memory -> memory."""
        g, cm = self.g, self.cm
        op = self.s.ops[seg.stages[0].op]
        deps = []
        src = "sram"  # fidelity (issue 9): was always "ddr"; the source is DDR if any input is
        for tname in op.inputs:
            if memory_of(cm, g, tname) == "ddr":
                src = "ddr"
            if not isolated and tname in self.written:
                deps.append(max(self.written[tname], key=lambda i: self.tl.tasks[i].end))
        nb = float(g.out(op).nbytes)
        start = len(self.tl.tasks)
        dst = memory_of(cm, g, op.outputs[0])
        # fidelity: memory -> memory is costed end by end by dma_cycles (no HBSM end); a
        # data-movement segment is one DMA between segments: no other engine shares its links
        t = self.add(kind="dma-mem", unit="dma", tpb=-1, op=op.name, tensor=op.outputs[0],
                     nbytes=nb, cycles=cm.dma_cycles(nb, src, 1, dst=dst), deps=deps, segment=si,
                     src=src, dst=dst)
        self.written.setdefault(op.outputs[0], []).append(t.id)
        self.tl.seg_spans.append((t.start, t.end))
        _ = start

    def _lags(self, seg: SegmentCfg) -> dict[str, int]:
        """Wave offset of each stage: band b of a stage is emitted in wave b + lag, after every
        producer band its row window needs (halo rows of the next band included)."""
        g, s = self.g, self.s
        lag: dict[str, int] = {}
        by_op = {st.op: st for st in seg.stages}
        for st in seg.stages:
            op = s.ops[st.op]
            geo = s.geo(op)
            need = 0
            for tname in op.inputs:
                prod = s.producers.get(tname)
                if prod is None or prod.name not in by_op or prod.name not in lag:
                    continue
                pst = by_op[prod.name]
                pgeo = s.geo(prod)
                for b in range(st.bands):
                    lo, hi = band_rows(geo.rows, st.bands, b)
                    if hi <= lo:
                        continue
                    win = input_window(g, op, tname, lo, hi)
                    if win is None:
                        qmax = pst.bands - 1
                    else:
                        qmax = s.band_of(pgeo.rows, pst.bands, max(win[1], win[0] + 1) - 1)
                    need = max(need, lag[prod.name] + qmax - b)
            lag[st.op] = need
        return lag

    def _outside_consumers(self, seg_ops: set[str]) -> set[str]:
        out = set()
        cons = self.g.consumers()
        for name in seg_ops:
            op = self.s.ops[name]
            for t in op.outputs:
                users = cons.get(t, [])
                if self.g.tensors[t].kind == "output" or not users or \
                        any(u.name not in seg_ops for u in users):
                    out.add(t)
        return out

    def _in_bytes(self, op: Op, tname: str, lo: int, hi: int, cols: int,
                  win: tuple[int, int] | None) -> float:
        g = self.g
        t = g.tensors[tname]
        acts = [x for x in op.inputs if g.tensors[x].kind != "weight"]
        if tname == acts[0]:
            return piece_in_bytes(g, op, hi - lo, cols) if op.unit.startswith("tcu") or \
                op.unit == "cvu.pool" else piece_in_bytes(g, op, hi - lo, cols)
        if win is None:
            return float(t.nbytes)
        rows = math.prod(t.shape[:-1]) if len(t.shape) > 1 else 1
        geo = self.s.geo(op)
        return t.nbytes * (win[1] - win[0]) / max(1, rows) * cols / max(1, geo.cols)

    def _stream(self, si: int, seg: SegmentCfg, pst: StageCfg, prod: Op, tname: str,
                win: tuple[int, int] | None, tpb: int, produced: dict[tuple[int, int], int],
                out_readers: dict, band: int) -> list[int]:
        """Copies of the producer bands overlapping ``win`` to ``tpb``; returns their task ids."""
        g, cm = self.g, self.cm
        pgeo = self.s.geo(prod)
        t = g.tensors[tname]
        deps: list[int] = []
        if win is None:
            qs = range(pst.bands)
        else:
            qs = range(self.s.band_of(pgeo.rows, pst.bands, win[0]),
                       self.s.band_of(pgeo.rows, pst.bands, max(win[0], win[1] - 1)) + 1)
        items = [((q, j), produced[(q, j)]) for q in qs for j in range(pst.gc) if (q, j) in produced]
        for (q, j), ptask in items:
            plo, phi = band_rows(pgeo.rows, pst.bands, q)
            if win is not None:
                a, e = max(plo, win[0]), min(phi, win[1])
                if e <= a:
                    continue
            else:
                a, e = plo, phi
            nb = t.nbytes * (e - a) / max(1, pgeo.rows) / pst.gc
            src_tpb = self.tl.tasks[ptask].tpb
            if src_tpb == tpb:
                deps.append(ptask)
                out_readers.setdefault(("#slot", ptask, 0), []).append(ptask)
                continue
            c = self.add(kind="copy", unit="dtdu", tpb=src_tpb, op=prod.name, tensor=tname,
                         nbytes=nb, cycles=cm.mesh_cycles(nb, src_tpb, tpb), deps=[ptask],
                         segment=si, band=band, col=j, dst_tpbs=(tpb,), src="hbsm", dst="hbsm")
            out_readers.setdefault(("#slot", ptask, 0), []).append(c.id)
            deps.append(c.id)
        if win is not None and not deps and produced:
            raise ScheduleError(f"internal: no producer band of '{tname}' covers rows {win}")
        return deps


def _gap(blocks: list[list[float]], ready: float, dur: float) -> tuple[float, int]:
    """Earliest start >= ready of a ``dur`` long interval between merged busy ``blocks``."""
    lo, hi = 0, len(blocks)
    while lo < hi:  # first block ending after ready
        mid = (lo + hi) // 2
        if blocks[mid][1] <= ready:
            lo = mid + 1
        else:
            hi = mid
    t = ready
    i = lo
    while i < len(blocks):
        if blocks[i][0] >= t + dur:
            break
        t = max(t, blocks[i][1])
        i += 1
    return t, i


def _insert(blocks: list[list[float]], i: int, a: float, e: float) -> None:
    """Insert busy [a, e) before index i, merging with touching neighbours."""
    if i > 0 and blocks[i - 1][1] >= a - 1e-9:
        blocks[i - 1][1] = max(blocks[i - 1][1], e)
        if i < len(blocks) and blocks[i][0] <= blocks[i - 1][1] + 1e-9:
            blocks[i - 1][1] = max(blocks[i - 1][1], blocks[i][1])
            del blocks[i]
        return
    if i < len(blocks) and blocks[i][0] <= e + 1e-9:
        blocks[i][0] = a
        return
    blocks.insert(i, [a, e])


def _unit_of(u: str) -> str:
    return u.split(".")[0] if u.split(".")[0] in ("tcu", "cvu", "dtdu", "csu") else "cvu"


def critical_path(tl: Timeline) -> list[Task]:
    """The chain of tasks that fixed the makespan (each task's start was set by the previous)."""
    if not tl.tasks:
        return []
    t = max(tl.tasks, key=lambda x: x.end)
    path = [t]
    while t.crit_pred >= 0:
        t = tl.tasks[t.crit_pred]
        path.append(t)
    return path[::-1]

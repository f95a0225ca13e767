"""The schedule plan: one explicit, inspectable schedule that the timeline builds and the emitter reads.

The timeline (:mod:`.timeline`) turns a placement into a :class:`Plan`: every instruction the program
will execute is one :class:`PlanTask` -- its unit (or CCB DMA engine), TPB, receiving TPBs (a DRB
broadcast's ``tpb_mask``), bytes, dependencies and predicted start/end cycles (the list schedule).
Tasks are grouped into :class:`PlanPiece` records (one instruction tile of one mini-tensor of one op
on one TPB: output rows ``[r0, r1)``, columns ``[c0, c1)``) in the wave order, computed once. The
emitter (:mod:`.emit_units`) walks the pieces in that order and turns each task into exactly one
``tpb`` instruction with that task's engine, TPB, mask and predicted cycles; it recomputes nothing
(it checks that it consumed every task, in order, with matching unit and TPB).

``Plan.to_json()`` dumps the plan (``m100-schedule{plan-json=FILE}``); the schedule report
(:mod:`.report`) prints from it.
"""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass, field
from operator import attrgetter

from .graph import Op, OpGraph, conv_out_hw
from .partition import TilePlan


_END = attrgetter("end")


class Unit(str, enum.Enum):
    """Where a task executes: a unit of a TPB, or a CCB DMA engine."""
    TCU = "tcu"
    CVU = "cvu"
    DTDU = "dtdu"
    CSU = "csu"
    DMA = "dma"

    @staticmethod
    def of_op(unit: str) -> "Unit":
        """The TPB unit that executes an op classified as ``unit`` (``tcu.matmul`` -> TCU, ...)."""
        got = _OF_OP.get(unit)
        if got is None:
            head = unit.split(".")[0]
            got = _OF_OP[unit] = Unit(head) if head in ("tcu", "cvu", "dtdu", "csu") else Unit.CVU
        return got


_OF_OP: dict[str, Unit] = {}  # Unit.of_op per op unit (the scheduler asks per task)


# what a piece's step generator (timeline and emitter alike) yields right before its store when
# the store waits for the next lockstep group's first step (a resident-activation matmul: the
# next column tile's transfers go ahead of this tile's stores on the DMA engines)
STORE_LATER = "store-later"


def op_family(unit: str) -> str:
    """The instruction family of a compute op: matmul | conv | pool | reduce | cvu."""
    return _FAMILY.get(unit, "cvu")


_FAMILY = {"tcu.matmul": "matmul", "tcu.conv2d": "conv", "cvu.pool": "pool",
           "cvu.reduction": "reduce"}


def row_view(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(rows, elems per row, cols) of a row-standard tensor (NHWC image rows, 2-D rows, ...)."""
    if len(shape) >= 3:
        return math.prod(shape[:-2]), shape[-2], shape[-1]
    if len(shape) == 2:
        return shape[0], 1, shape[1]
    return 1, 1, shape[0] if shape else 1


def image_rows(g: OpGraph, op: Op) -> int:
    """Output rows per image: a piece never crosses an image (its rows map to one leading index)."""
    rshape = g.tensors[op.inputs[0]].shape if op.unit == "cvu.reduction" else g.out(op).shape
    if op.unit in ("tcu.conv2d", "cvu.pool"):
        return conv_out_hw(op.attrs)[0]
    rows = row_view(rshape)[0]
    # rank >= 4: a piece's rows stay inside one index of every dim before the last three (the
    # emitter's ``row_index`` maps them as rows of dim -3 at fixed leading indices); rows //
    # shape[0] let a piece of a 5-D tensor cross dim 1 (its walk left the buffer)
    return rshape[-3] if len(rshape) >= 4 else rows


def image_parts(lo: int, hi: int, per: int) -> list[tuple[int, int]]:
    """Split rows [lo, hi) at multiples of ``per`` (bands must not cross an image)."""
    out = []
    a = lo
    while a < hi:
        e = min(hi, (a // per + 1) * per)
        out.append((a, e))
        a = e
    return out


def conv_window(a: dict, r0: int, rows: int, dh: int = 1) -> tuple[int, int, int, int, int]:
    """Input rows of a conv/pool piece of output rows [r0, r0 + rows) (one image):
    (image n0, first input row i0, end i1, top pad rows, bottom pad rows)."""
    oh, _ = conv_out_hw(a)
    sh = a.get("stride", (1, 1))[0]
    pt = a.get("pad", (0, 0, 0, 0))[0]
    n0, q0 = divmod(r0, oh)
    q1 = q0 + rows
    top = q0 * sh - pt
    bot = (q1 - 1) * sh - pt + dh * (a["kh"] - 1) + 1
    i0, i1 = max(0, top), min(a["h"], bot)
    return n0, i0, i1, i0 - top, bot - i1


@dataclass(slots=True)
class PlanTask:
    """One instruction of the program, as planned."""
    id: int
    kind: str  # dma-in | dma-out | dma-mem | compute | copy
    unit: str  # a Unit value
    tpb: int  # executing TPB (-1: a CCB DMA engine; a copy executes on its source TPB)
    op: str
    tensor: str
    nbytes: float
    cycles: float
    deps: list[int]
    segment: int = 0
    band: int = 0
    col: int = 0
    dst_tpbs: tuple[int, ...] = ()  # receiving TPBs (DMA into HBSM, copy); >1: a DRB broadcast
    src: str = ""  # ddr | sram | hbsm
    dst: str = ""
    engine: int = -1  # CCB DMA engine (DMA tasks)
    macs: int = 0
    role: str = ""  # act | w | bias | b | out | ... (which operand a transfer fills)
    start: float = 0.0
    end: float = 0.0
    crit_pred: int = -1  # the task whose end fixed this task's start

    @property
    def resource(self) -> tuple[str, int]:
        return ("dma", self.engine) if self.unit == "dma" else (self.unit, self.tpb)

    @property
    def tpb_mask(self) -> int:
        """The DRB mask of a broadcast (more than one receiving TPB), else 0."""
        if self.unit != "dma" or len(self.dst_tpbs) < 2:
            return 0
        m = 0
        for t in self.dst_tpbs:
            m |= 1 << t
        return m

    def to_dict(self) -> dict:
        return dict(id=self.id, kind=self.kind, unit=self.unit, tpb=self.tpb, engine=self.engine,
                    op=self.op, tensor=self.tensor, role=self.role, segment=self.segment,
                    band=self.band, col=self.col, dst_tpbs=list(self.dst_tpbs),
                    tpb_mask=self.tpb_mask, src=self.src, dst=self.dst,
                    nbytes=round(self.nbytes, 3), cycles=round(self.cycles, 3), macs=self.macs,
                    deps=list(self.deps), start=round(self.start, 3), end=round(self.end, 3))


#: the order of :class:`PlanTask`'s fields: the builder's hot call sites pass them positionally
#: (keyword arguments cost ~2 us more per task, of ~800 k tasks per ResNet-18 schedule);
#: ``test_search_builder`` checks the dataclass against it
TASK_FIELDS = ("id", "kind", "unit", "tpb", "op", "tensor", "nbytes", "cycles", "deps", "segment",
               "band", "col", "dst_tpbs", "src", "dst", "engine", "macs", "role", "start", "end",
               "crit_pred")


@dataclass(slots=True)
class PlanPiece:
    """One instruction tile of one mini-tensor: output rows ``[r0, r1)`` x cols ``[c0, c1)`` of
    ``op`` on ``tpb`` (band ``band``, column part ``col``). ``tasks`` are the ids of the
    instructions the emitter creates for it, in creation order; ``in_place`` names an input read
    in place from a producer piece on the same TPB (no copy)."""
    op: str
    band: int
    col: int
    tpb: int
    r0: int
    r1: int
    c0: int
    c1: int
    segment: int = 0
    tasks: list[int] = field(default_factory=list)
    compute: int = -1  # the task id of the last compute instruction (the piece is done)
    out_dims: tuple[int, ...] = ()  # the output buffer [rows, elems per row, cols]
    store: bool = False  # the output goes to memory (a later segment or the caller reads it)
    # lockstep groups (K-chunked / streamed contractions of a one-stage segment): consecutive
    # pieces with one ``group`` id are built and emitted K chunk by K chunk, round robin, so
    # that one DRB broadcast can fill a chunk on every TPB that reads it: the activation chunk
    # on ``a_share`` (the column parts of the row tile), the weight / B chunk on ``b_share``
    # (the TPB rows of the column part that compute a band in the same round)
    group: int = -1
    a_share: tuple[int, ...] = ()
    b_share: tuple[int, ...] = ()
    # ``StageCfg.wshare``: the TPBs whose column parts receive each weight K chunk by one DRB
    # broadcast of their columns ``w_cols`` (this piece reads its own columns out of it)
    w_share: tuple[int, ...] = ()
    w_cols: tuple[int, int] = (0, 0)
    # a K split (``StageCfg.ks``): this piece computes the partial sum of K part ``kpart`` of
    # ``kparts``; a *reduction* piece (``reduce``: the TPBs of parts 0..kparts-1, its own TPB is
    # part 0's) adds them up after the group: copies, bias load, CVU add chain, store
    kpart: int = 0
    kparts: int = 1
    reduce: tuple[int, ...] = ()
    # a clipped piece of a causal attention chain (:mod:`.causal`): ``cfull`` the end of its
    # column tile before the clip (0: not clipped; a resident second operand is loaded for the
    # whole tile), ``kx`` the end of its reduction (0: all of K)
    cfull: int = 0
    kx: int = 0
    # > 0: the first piece of a lockstep integer matmul on its TPB computed in K chunks of this
    # many columns while its whole-K activation band arrives chunk by chunk
    # (``kinds.tcu.first_k_chunk``; the band's later readers read it whole)
    kfirst: int = 0

    def to_dict(self) -> dict:
        d = dict(op=self.op, band=self.band, col=self.col, tpb=self.tpb, rows=[self.r0, self.r1],
                 cols=[self.c0, self.c1], segment=self.segment, tasks=list(self.tasks),
                 store=self.store, group=self.group, a_share=list(self.a_share),
                 b_share=list(self.b_share))
        if self.kparts > 1:
            d.update(kpart=self.kpart, kparts=self.kparts)
        if self.reduce:
            d.update(reduce=list(self.reduce))
        if self.w_share:
            d.update(w_share=list(self.w_share), w_cols=list(self.w_cols))
        if self.cfull:
            d.update(cfull=self.cfull)
        if self.kx:
            d.update(kx=self.kx)
        if self.kfirst:
            d.update(kfirst=self.kfirst)
        return d


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
class Plan:
    """The list-scheduled plan of a placement (see the module docstring)."""
    tasks: list[PlanTask] = field(default_factory=list)
    pieces: list[list[PlanPiece]] = field(default_factory=list)  # per segment, in wave order
    plans: dict[str, TilePlan] = field(default_factory=dict)  # op -> tiling
    segments: list = field(default_factory=list)  # SegmentCfg per segment
    seg_spans: list[tuple[float, float]] = field(default_factory=list)
    # weight prefetch across segments: (segment, TPB) -> the earlier segment whose end on that
    # TPB the segment's constant weight transfers into it wait for (-1: none), instead of the
    # end of the last segment that used the TPB: they load while the segments in between
    # compute, into HBSM bytes those leave free (``list_schedule.ListScheduler._prefetch``); absent = the
    # last segment (no prefetch)
    prefetch: dict[tuple[int, int], int] = field(default_factory=dict)
    # (weight transfer, TPB) -> the compute of the last segment there it waits for instead of
    # that segment's end: a first weight chunk loaded in that segment's last K step
    # (``Scheduler.tail_prefetch``: ``list_schedule.ListScheduler._prefetch``)
    tail_dma: dict[tuple[int, int], int] = field(default_factory=dict)
    # broadcast task -> the broadcasts (DMA or DTDU) whose end gave it room on the DRB: the plan
    # books the DRB (``list_schedule``: ``RateProfile``) and starts a broadcast only where its
    # rate fits; the emitted instruction waits for these, or the interpreter would run it beside
    # them and share the DRB max-min, slowing the weight streams the plan kept at full rate
    # (``ListScheduler._drb_wait``, :data:`.list_schedule.DRB_WAITS`)
    drb_wait: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # activations kept in HBSM between segments (:mod:`.keep`): the ops whose output tiles stay
    # in their producer pieces' HBSM buffers (not stored); later segments copy from them
    kept: set[str] = field(default_factory=set)
    # a lockstep conv's K chunk of a kept activation that several column parts read: one DTDU
    # broadcast per producer piece (True) or one mesh copy per reader (False); a whole-plan
    # choice (``refine.keep_activations``: the keep mode's ``+copies`` suffix)
    kept_bcast: bool = True
    # late stores (:data:`.build_segments.LATE_STORES`): segment -> how many of its last lockstep
    # group's output stores are built (and emitted) after each K-chunk step of the next
    # segment's first group, instead of at its own end: the next segment's loads and compute on
    # a TPB wait for this segment's last compute there, not for its stores
    late: dict[int, int] = field(default_factory=dict)
    # late stores read by later pipelines (:data:`.build_segments.LATE_READ_STORES`): segment ->
    # {segment j: the indices in its pieces of the stores built (and emitted) at the end of j}
    late_reads: dict[int, dict[int, list[int]]] = field(default_factory=dict)
    # lockstep segments whose groups' stores are built (and emitted) spread over the next
    # group's first steps (:data:`.build_segments.CARRY_STEPS`; whole plans only)
    carry: set[int] = field(default_factory=set)
    # per compute segment of a whole-plan build, what :attr:`buffers` is made of: (the first
    # task of its build, the task after its last, the SegmentCfg, its stages' tile plans, its
    # span) -- ``PlanBuilder.segment`` appends it, :mod:`.resume`'s copies share the tuples
    buf_segs: list[tuple] = field(default_factory=list, repr=False)
    # segment index -> the builder's state before it (:mod:`.resume`): a later build that shares
    # the segments before it starts there (``Scheduler.build(base=...)``); not part of the plan
    checkpoints: dict = field(default_factory=dict, repr=False, compare=False)
    # (the task list, how many of its tasks were scanned, their latest end): :attr:`makespan`
    # scans only the tasks appended since (a task's times are set before it is appended and
    # never change; the refinements ask a plan's makespan again and again: ResNet-50 125 scans
    # of up to ~16 k tasks)
    _ms: tuple = field(default=(None, 0, 0.0), repr=False, compare=False)

    @property
    def makespan(self) -> float:
        tasks = self.tasks
        lst, n, m = self._ms
        if lst is not tasks or n > len(tasks):
            n, m = 0, 0.0
        if n < len(tasks):
            new = max(map(_END, tasks[n:]) if n else map(_END, tasks))
            if n == 0 or new > m:
                m = new
            self._ms = (tasks, len(tasks), m)
        return m

    @property
    def buffers(self) -> list[BufferUse]:
        """The HBSM buffers every TPB of a compute segment's stage holds, per segment in build
        order, per stage, per TPB, per buffer of the stage's tile plan: from the first start to
        the last end of the segment's tasks that run on the TPB or write into it (``tpb`` or
        ``dst_tpbs``; the tasks its build created, a late store of the segment before included),
        the segment's span on a TPB without such a task. Computed when asked (session 32): only
        tests read them, and a whole-plan build made ~5 k of these a build (ResNet-50: 324 k
        ``BufferUse`` a schedule, ~4 % of the whole-plan builds), each a function of the task
        times, which never change once a task is scheduled. A fresh list each call."""
        out: list[BufferUse] = []
        tasks = self.tasks
        for start, stop, seg, plans, span in self.buf_segs:
            first: dict[int, float] = {}
            last: dict[int, float] = {}
            for t in tasks[start:stop]:
                a, e = t.start, t.end
                for tp in ((t.tpb,) if t.tpb >= 0 else ()) + tuple(t.dst_tpbs):
                    x = first.get(tp)
                    if x is None:
                        first[tp], last[tp] = a, e
                    else:
                        if a < x:
                            first[tp] = a
                        if e > last[tp]:
                            last[tp] = e
            for st, plan in zip(seg.stages, plans):
                bufs = [(f"{st.op}.{buf.role}", buf) for buf in plan.buffers]
                for tp in st.tpbs:
                    a = first.get(tp)
                    a, e = span if a is None else (a, last[tp])
                    for name, buf in bufs:
                        out.append(BufferUse(tp, name, st.op, buf.role, buf.slot_bytes, buf.slots,
                                             buf.unit, a, e))
        return out

    def dma_engine_bytes(self) -> dict[int, float]:
        """Bytes each CCB DMA engine moves (the plan's balance)."""
        out: dict[int, float] = {}
        for t in self.tasks:
            if t.unit == "dma":
                out[t.engine] = out.get(t.engine, 0.0) + t.nbytes
        return out

    def to_json(self, indent: int | None = None) -> str:
        segs = []
        for si, seg in enumerate(self.segments):
            segs.append(dict(index=si, kind=seg.kind, span=list(self.seg_spans[si])
                             if si < len(self.seg_spans) else None,
                             stages=[dict(op=st.op, tpbs=list(st.tpbs), gc=st.gc, bands=st.bands,
                                          ks=getattr(st, "ks", 1),
                                          tile=self.plans[st.op].shape_str
                                          if st.op in self.plans else "-")
                                     for st in seg.stages],
                             pieces=[p.to_dict() for p in self.pieces[si]]
                             if si < len(self.pieces) else []))
        for si, seg in enumerate(segs):
            pf = {str(x): b for (s, x), b in sorted(self.prefetch.items()) if s == si}
            if pf:
                seg["prefetch"] = pf
        return json.dumps(dict(makespan=round(self.makespan, 3), segments=segs,
                               kept=sorted(self.kept), late=sorted(self.late.items()),
                               tasks=[t.to_dict() for t in self.tasks]), indent=indent)


__all__ = ["Unit", "PlanTask", "PlanPiece", "BufferUse", "Plan", "op_family", "row_view",
           "image_rows", "image_parts", "conv_window"]

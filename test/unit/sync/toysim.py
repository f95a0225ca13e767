"""An independent, tiny TPB executor for the sync tests (not the project's interpreter).

It knows nothing of sync insertion: it runs f32 programs made of Fill / Copy / Broadcast / Dma /
elementwise CvuPipeline / MatMul, block by block (reads at block start, writes at block end), with
a discrete-event clock (optionally randomly perturbed latencies), SU counters with remote-update
latency, and a vector-clock race detector at element granularity: a monitor that sees a counter
reach ``v`` acquires the clock of the ``v``-th update issued to that counter (what the counter
guarantees), so a missing or too-weak wait is reported whatever the timing. A run that can not
finish is a deadlock. The sequential reference runs the same element semantics in list order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from m100.targets.m100 import isa
from m100.targets.m100.isa import CvuOp, RefKind, Space, Trigger, Unit

Key = tuple[int, int]


def mem_key(w: isa.Walk, tpb: int | None = None) -> Key:
    if w.space is Space.HBSM:
        return (int(Space.HBSM), w.tpb if tpb is None else tpb)
    return (int(w.space), 0)


def elems(w: isa.Walk, blocks: int = 1, b: int = 0) -> np.ndarray:
    assert w.dtype is isa.DType.F32 and w.base % 4 == 0
    off = w.offsets()
    per = off.size // blocks
    return w.base // 4 + off[b * per:(b + 1) * per]


_UN = {CvuOp.COPY: lambda x: x, CvuOp.NEG: np.negative, CvuOp.RELU: lambda x: np.maximum(x, 0)}
_BIN = {CvuOp.ADD: np.add, CvuOp.SUB: np.subtract, CvuOp.MUL: np.multiply, CvuOp.MAX: np.maximum}


def block_io(inst: isa.Instruction, b: int):
    """(reads [(key, elems)], compute(values) -> writes [(key, elems, values)]) of block b."""
    nb = inst.sync.blocks
    if isinstance(inst, isa.Fill):
        dst = [(mem_key(inst.dst), elems(inst.dst, nb, b))]
        return [], lambda vals: [(k, e, np.full(e.size, inst.value, np.float32)) for k, e in dst]
    if isinstance(inst, (isa.Copy, isa.Dma, isa.Broadcast)):
        src = (mem_key(inst.src), elems(inst.src, nb, b))
        if isinstance(inst, isa.Copy):
            keys = [mem_key(inst.dst)]
        elif isinstance(inst, isa.Broadcast):
            keys = [(int(Space.HBSM), t) for t in isa.tpbs_of(inst.tpb_mask)]
        else:
            keys = ([(int(Space.HBSM), t) for t in isa.tpbs_of(inst.tpb_mask)] if inst.tpb_mask
                    else [mem_key(inst.dst)])
        de = elems(inst.dst, nb, b)
        return [src], lambda vals: [(k, de, vals[0]) for k in keys]
    if isinstance(inst, isa.CvuPipeline):
        reads = []
        for w, shp in zip(inst.inputs, inst.in_shapes):
            assert tuple(shp) == tuple(inst.out_shape)
            reads.append((mem_key(w), elems(w, nb, b)))
        oe = elems(inst.output, nb, b)

        def cvu(vals):
            res = []
            for st in inst.stages:
                args = [vals[r.index] if r.kind is RefKind.INPUT else
                        res[r.index] if r.kind is RefKind.STAGE else np.float32(r.imm)
                        for r in st.args]
                res.append((_UN[st.op](*args) if st.op in _UN else _BIN[st.op](*args))
                           .astype(np.float32))
            return [(mem_key(inst.output), oe, res[-1])]
        return reads, cvu
    if isinstance(inst, isa.CsuCall):
        assert inst.routine is isa.Routine.MEMCPY and nb == 1
        src, dst = inst.operands
        de = elems(dst)
        return [(mem_key(src), elems(src))], lambda vals: [(mem_key(dst), de, vals[0])]
    if isinstance(inst, isa.MatMul):
        ra = (mem_key(inst.a), elems(inst.a, nb, b))
        rb = (mem_key(inst.b), elems(inst.b))
        ce = elems(inst.c, nb, b)
        rows = inst.m // nb

        def mm(vals):
            a = vals[0].reshape(rows, inst.k).astype(np.float64)
            bb = vals[1].reshape(inst.k, inst.n).astype(np.float64)
            return [(mem_key(inst.c), ce, (a @ bb).astype(np.float32).reshape(-1))]
        return [ra, rb], mm
    raise NotImplementedError(type(inst).__name__)


def sequential(insts, mem: dict[Key, np.ndarray]) -> dict[Key, np.ndarray]:
    """The reference: every instruction, every block, in list order."""
    mem = {k: v.copy() for k, v in mem.items()}
    for inst in insts:
        for b in range(inst.sync.blocks):
            reads, fn = block_io(inst, b)
            for k, e, v in fn([mem[k][e] for k, e in reads]):
                mem[k][e] = v
    return mem


def duration(inst: isa.Instruction, machine) -> float:
    nb = inst.sync.blocks
    if isinstance(inst, isa.MatMul):
        return 24 + inst.m * inst.n * inst.k / nb / (machine.tcu_macs_per_cycle("f32"))
    if isinstance(inst, isa.Dma):
        return machine.dma_setup_cycles / nb + inst.src.num_elements * 4 / nb / 64
    if isinstance(inst, isa.CsuCall):
        return 200 + inst.operands[0].num_elements * 4 / 16
    n = (inst.dst if isinstance(inst, isa.Fill) else
         inst.output if isinstance(inst, isa.CvuPipeline) else inst.src).num_elements
    return 8 + n * 4 / nb / 64


@dataclass
class Outcome:
    mem: dict[Key, np.ndarray]
    races: list[str] = field(default_factory=list)
    deadlock: str | None = None
    cycles: float = 0.0


def run(insts, machine, mem: dict[Key, np.ndarray], seed: int | None = None,
        stop_on_race: bool = False) -> Outcome:
    rng = np.random.default_rng(seed) if seed is not None else None
    mem = {k: v.copy() for k, v in mem.items()}
    execs = sorted({inst.executor for inst in insts})
    xid = {e: n for n, e in enumerate(execs)}
    nx_ = len(execs)
    queues = {x: [] for x in range(nx_)}
    for i, inst in enumerate(insts):
        queues[xid[inst.executor]].append(i)
    pos = [[0, 0] for _ in range(nx_)]
    busy = [False] * nx_
    vc = np.zeros((nx_, nx_), dtype=np.int64)
    lastw = {k: (np.full(v.size, -1, np.int64), np.zeros(v.size, np.int64)) for k, v in mem.items()}
    readc = {k: np.zeros((nx_, v.size), np.int64) for k, v in mem.items()}
    issued: dict[Key, list[tuple[int, np.ndarray]]] = {}
    arrived: dict[Key, int] = {}
    pending: dict[int, list] = {}
    out = Outcome(mem)
    heap: list = []
    seq = [0]

    def jit(x: float) -> float:
        return x * float(rng.uniform(0.25, 4.0)) if rng is not None else x

    def push(t, kind, data):
        seq[0] += 1
        heapq.heappush(heap, (t, seq[0], kind, data))

    def head(x):
        p = pos[x]
        return (queues[x][p[0]], p[1]) if p[0] < len(queues[x]) else (None, None)

    def race(msg):
        out.races.append(msg)

    def try_start(x, t):
        if busy[x]:
            return
        i, b = head(x)
        if i is None:
            return
        inst = insts[i]
        for m in inst.sync.monitors:
            if arrived.get((m.tpb, m.counter), 0) < m.expected + b * m.per_block:
                return
        for m in inst.sync.monitors:
            need = m.expected + b * m.per_block
            if need <= 0:
                continue
            tot = 0
            for amt, clock in issued[(m.tpb, m.counter)]:
                tot += amt
                if tot >= need:
                    vc[x] = np.maximum(vc[x], clock)
                    break
        vc[x, x] += 1
        me = vc[x, x]
        reads, fn = block_io(inst, b)
        vals = []
        for k, e in reads:
            w, c = lastw[k]
            bad = (w[e] >= 0) & (w[e] != x)
            if bad.any():
                ws = w[e][bad]
                cs = c[e][bad]
                late = cs > vc[x][ws]
                if late.any():
                    race(f"RAW: #{i} block {b} reads {k} element {int(e[bad][late][0])} written "
                         f"by executor {execs[int(ws[late][0])]} without happens-before")
            readc[k][x, e] = me
            vals.append(mem[k][e].copy())
        pending[x] = (i, b, fn(vals))
        busy[x] = True
        push(t + jit(duration(inst, machine)), "end", x)

    def end(x, t):
        i, b, writes = pending.pop(x)
        inst = insts[i]
        for k, e, v in writes:
            w, c = lastw[k]
            bad = (w[e] >= 0) & (w[e] != x)
            if bad.any():
                ws = w[e][bad]
                late = c[e][bad] > vc[x][ws]
                if late.any():
                    race(f"WAW: #{i} block {b} overwrites {k} element {int(e[bad][late][0])} "
                         "without happens-before")
            rc = readc[k][:, e]
            for y in range(nx_):
                if y != x and (rc[y] > vc[x, y]).any():
                    race(f"WAR: #{i} block {b} overwrites {k} bytes executor {execs[y]} reads "
                         "without happens-before")
            mem[k][e] = v
            w[e] = x
            c[e] = vc[x, x]
        last = b == inst.sync.blocks - 1
        for u in inst.sync.updates:
            if u.trigger is Trigger.BLOCK or last:
                for tp in isa.tpbs_of(u.tpb_mask):
                    issued.setdefault((tp, u.counter), []).append((u.amount, vc[x].copy()))
                    unit, idx = inst.executor
                    lat = 2 if (unit is not Unit.DMA and idx == tp) else machine.remote_update_latency
                    push(t + jit(lat), "arrive", ((tp, u.counter), u.amount))
        pos[x][1] += 1
        if pos[x][1] == inst.sync.blocks:
            pos[x] = [pos[x][0] + 1, 0]
        busy[x] = False
        try_start(x, t)

    for x in range(nx_):
        try_start(x, 0.0)
    t = 0.0
    while heap:
        t, _, kind, data = heapq.heappop(heap)
        if kind == "end":
            end(data, t)
        else:
            key, amt = data
            arrived[key] = arrived.get(key, 0) + amt
            for x in range(nx_):
                try_start(x, t)
        if stop_on_race and out.races:
            break
    out.cycles = t
    if not (stop_on_race and out.races):
        stuck = [f"{execs[x]} at #{head(x)[0]} block {head(x)[1]}" for x in range(nx_)
                 if head(x)[0] is not None]
        if stuck:
            out.deadlock = "deadlock: " + "; ".join(stuck)
    return out


def memories_for(insts, machine, rng) -> dict[Key, np.ndarray]:
    """Random initial contents for every memory the program touches (sized to the walks)."""
    top: dict[Key, int] = {}
    for inst in insts:
        for _, w, _ in inst.walks():
            keys = ([(int(Space.HBSM), t) for t in range(machine.num_tpbs)]
                    if w.space is Space.HBSM else [mem_key(w)])
            hi = w.byte_range()[1]
            for k in keys:
                top[k] = max(top.get(k, 0), hi)
    return {k: rng.standard_normal((v + 3) // 4).astype(np.float32) for k, v in top.items()}


def setup(prog, machine, seed: int = 0):
    """(memories filled at random for ``prog``, the sequential numpy result on them)."""
    mem = memories_for(prog, machine, np.random.default_rng(seed))
    return mem, sequential(prog, mem)


def ok(out: Outcome, ref) -> bool:
    """A run is right: no race, no deadlock, every memory equal to the sequential result."""
    return (not out.races and out.deadlock is None
            and all(np.array_equal(out.mem[k], ref[k]) for k in ref))

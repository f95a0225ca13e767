"""Functional and full runs replayed from the program's schedule (issue 15): the event loop, the
timing model and the race checks of a run are done once per program, the instruction semantics
every run.

Why it is exact. Without random latencies, which block starts or ends when, and in which order the
executors' ``run`` (gather the inputs, compute) and ``apply`` (write the outputs) calls come,
follow from the instructions alone. In functional mode (``mode="functional"``) every block takes
one cycle and nothing waits for a dispatch, a link or a CPU: the order follows from the
instructions' sync fields -- the counters' values are sums of the updates' amounts, never of data.
In full mode (``mode="full"``) the blocks' durations come from the timing model, whose costs are
functions of the instructions and the machine (``CostModel.cost(inst, b)``: walks, sizes, element
types -- never the data), the dispatch times from the instructions' encoded sizes, the fluid
model's rates from those costs: the same event order and the same times whatever the data. So are
the records' times, the units' busy and stall cycles (stall causes included), the bytes and MACs
of the stats and every counter overflow. The race checker's verdict follows from the same order
and from the accesses' byte sets, which are functions of the instructions too, except a CSU
routine's (a gather's or scatter's rows are index data): a program with a CSU call is never
replayed. The data decides one thing only: whether an executor faults (a CSU index out of range,
an integer CVU stage outside i32, ...), which stops the engine's run there.

So the first functional or full run of a program (``Simulator._run``, a memory holding the
program's segments and nothing else) runs the engine as always and keeps, when it ended without
any report (no race, fault, overflow or deadlock), its schedule on the program: the ``run`` /
``apply`` calls in order, every record's unit, dispatch, start, end and blocks, every unit's busy
and stall cycles, and the stats' bytes and MACs. A later run of the same program object in the
same mode, the same instructions in the same streams (by identity: instructions are immutable),
the same machine object, the same options and the same module switches (the paths the tests
compare) makes exactly those calls on its own inputs and takes the records and stats from the
schedule -- what the engine would compute again. A fault in a replay (the data decides) drops the
replay's memory and runs the engine from the start, which reports it. Timing mode (no data: the
whole run would be the kept result) and traced runs are never replayed.
:data:`REPLAY` False always runs the engine (``test/e2e/test_replay.py`` compares the two).

The first full run (the one whose schedule is kept; the first functional run too, session 30,
through ``sim/engine_untimed.py``'s loop) runs the engine's loop without the data: the
loop logs each executor's ``run`` / ``apply`` call where it would make it (``Engine.defer``) and
:func:`calls` makes them after the loop, in that order, on the same memory -- so every call reads
and writes what it would have inline (nothing else touches the memory meanwhile, and nothing the
loop decides depends on the data but a fault). A fault among the calls, or any report of the
loop, runs the engine again with the data inline on a fresh memory, which reports what it did.
The same calls cost less this way (session 30: a first full ResNet-50 run 3.71 -> 3.27 CPU-s at
load ~6.6): interleaved with the loop's Python, the executors' numpy over ~100 MB of memory
slowed both (every function ~10-20 % slower in a profile of the interleaved run).
``test/e2e/test_deferred_data.py`` compares it with the engine's run with the data inline.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING

from m100.targets.m100.isa import CsuCall

from . import cost_batch, engine, fluid, memory, mempool, race_batch, timing, twu
from .engine import InstRec
from .semantics import make_exec
from .semantics_base import SimError

if TYPE_CHECKING:
    from .simulator import Result, Simulator

#: Replay a program's functional or full schedule (False: every run runs the engine; tests
#: compare).
REPLAY = True

#: The modes whose runs are replayed.
MODES = ("functional", "full")


def _switches() -> tuple:
    """The module switches that choose between paths the tests compare: a schedule recorded
    under one setting is replayed only under the same one."""
    return (twu.STRIDED, twu.GEOMETRY, race_batch.BATCH, engine.KNOWN_CLOCKS,
            memory.WHOLE, memory.HBSM_GROUP, mempool.POOL, cost_batch.BATCH,
            fluid.SHARE_SHORTCUT, fluid.DEFER_RESHARE, fluid.NEAR,
            timing.SHARED)


def key_of(sim: Simulator) -> tuple | None:
    """The key of ``sim``'s next run's schedule, or None when that run may not be replayed (or
    recorded): functional or full mode without random latencies, trace or progress callback, a
    program whose memory holds its segments only (a faulting replay can then start again)."""
    if not REPLAY or sim.mode not in MODES or sim.random_latency is not None or sim.trace \
            or sim.progress is not None or sim.program is None or sim.memory is None \
            or sim.memory.writes != sim._pristine:
        return None
    return (sim.mode, sim.machine, sim.check_races, _switches())


@dataclass
class Schedule:
    """A functional or full run's schedule (see the module doc)."""
    streams: list  # [(stream key, (instruction, ...))] in key order: checked by identity
    calls: list  # (record index, block) for a run call, (record index, -1) for an apply
    recs: list  # per record: (index, stream, position, instruction, unit, dispatch, start,
    # end, blocks)
    units: list  # per unit: (name, busy cycles, stall cycles by cause)
    macs: dict  # the engine's MACs and peak MACs per cycle per unit, bytes per memory / link
    peak: dict
    nbytes: dict
    # the recorded run's executors, without a memory between runs: an executor keeps only
    # functions of its instruction besides ``mem`` (block chunks, conv windows), so a replay
    # binds them to its memory instead of making new ones; one replay at a time (``lock``: a
    # replay in another thread meanwhile makes its own)
    exs: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # a functional run's race log (Engine.race_log: its entries and clock rows, race-free),
    # the certificate a first full run of the same instructions may take (sim/clock_cert.py)
    race_log: tuple | None = None


def _streams(sim: Simulator) -> list:
    return [(k, tuple(sim.streams[k])) for k in sorted(sim.streams)]


def _same_streams(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for (ka, ia), (kb, ib) in zip(a, b):
        if ka != kb or len(ia) != len(ib) or any(x is not y for x, y in zip(ia, ib)):
            return False
    return True


class Recorder:
    """An executor whose ``run`` / ``apply`` calls are logged (the engine's run to record).
    Its ``reads`` / ``writes`` (the race checker's, once per block each) are the executor's
    own bound methods: through ``__getattr__`` each was a failed attribute lookup first
    (~14 700 per first ResNet-18 run, ~2-5 us each)."""
    __slots__ = ("ex", "i", "log", "reads", "writes", "_derive_views")

    def __init__(self, ex, i: int, log: list):
        self.ex, self.i, self.log = ex, i, log
        self.reads, self.writes = ex.reads, ex.writes
        # (engine_checks' pre-pass asks every executor for it: a failed lookup and an
        # AttributeError through __getattr__ for each that is not a copy)
        self._derive_views = getattr(ex, "_derive_views", None)

    def run(self, b):
        self.log.append((self.i, b))
        return self.ex.run(b)

    def apply(self, writes):
        self.log.append((self.i, -1))
        self.ex.apply(writes)

    def __getattr__(self, name):  # reads / writes (race items), ...
        return getattr(self.ex, name)


def recording(sim: Simulator, key: tuple | None, recs: list, wrap: bool = True) \
        -> tuple | None:
    """Before the engine's run of ``recs`` (their executors made; ``key``: :func:`key_of` the
    simulator before the run wrote anything): when this run's schedule may be kept, wrap the
    executors to log their calls (``wrap`` False: the engine logs them itself, see
    :func:`deferred`) and return (key, log); else None."""
    if key is None or any(isinstance(r.inst, CsuCall) for r in recs):
        return None
    got = sim.program.__dict__.get("_sim_schedule")
    if got is not None and key in got:  # (a replay that faulted: nothing to record)
        return None
    log: list = []
    if wrap:
        for r in recs:
            r.ex = Recorder(r.ex, r.index, log)
    return key, log


def keep(sim: Simulator, eng, recs: list, rec: tuple) -> None:
    """After the engine's run: keep it as the program's schedule (``rec``: what
    :func:`recording` returned) when it finished and reported nothing."""
    if eng.reports or any(r.end is None for r in recs):
        return
    key, log = rec
    exs = [r.ex.ex if type(r.ex) is Recorder else r.ex for r in recs]
    for ex in exs:
        ex.mem = None  # (the run's memory goes with the run)
    sched = Schedule(_streams(sim), log,
                     [(r.index, r.stream, r.pos, r.inst, r.unit, r.dispatch, r.start, r.end,
                       tuple(r.blocks)) for r in recs],
                     [(u.name, u.busy, dict(u.stalls)) for u in eng.units],
                     dict(eng.macs), dict(eng.peak), dict(eng.bytes), exs,
                     race_log=eng.race_log if sim.mode == "functional" else None)
    got = sim.program.__dict__.get("_sim_schedule")
    if got is None:
        got = {}
        sim.program.__dict__["_sim_schedule"] = got  # (not a dataclass field: never compared)
    got[key] = sched


def race_log_of(sim: Simulator, key: tuple) -> tuple | None:
    """The race log of the kept schedule of a functional run with race checks on ``sim``'s
    instructions, machine and switches (``key``: :func:`key_of` ``sim``, a full run's), or
    None (sim/clock_cert.py)."""
    got = sim.program.__dict__.get("_sim_schedule")
    if got is None:
        return None
    sched = got.get(("functional",) + key[1:])
    if sched is None or sched.race_log is None or not key[2] \
            or not _same_streams(sched.streams, _streams(sim)):
        return None
    return sched.race_log


def calls(exs: list, log: list, race_free: bool = False) -> None:
    """Make the executors' ``run`` / ``apply`` calls of ``log`` ((index, block) / (index,
    -1)) in order: each ``apply`` writes what the same executor's last ``run`` returned.
    ``race_free``: the log is the order of a run whose race checks found nothing (no access of
    one block meets another's bytes unless the counters order the two, so none meets a block's
    bytes between its ``run`` and its ``apply``: those are unordered with it) -- the runs are
    ``Exec.run_free`` calls, which may write their outputs at once (a copy's destinations)."""
    pending: list = [None] * len(exs)
    for i, b in log:
        if b >= 0:
            pending[i] = exs[i].run_free(b) if race_free else exs[i].run(b)
        else:
            exs[i].apply(pending[i])
            pending[i] = None


def replay(sim: Simulator, inputs) -> Result | None:
    """The run of ``inputs`` by the program's schedule; None when there is none for this run
    (the caller runs the engine) or when an executor faulted (the caller starts again on a fresh
    memory: the engine reports the fault)."""
    key = key_of(sim)
    if key is None:
        return None
    got = sim.program.__dict__.get("_sim_schedule")
    sched = got.get(key) if got is not None else None
    if sched is None or not _same_streams(sched.streams, _streams(sim)):
        return None
    from .simulator import Result

    mem = sim.memory
    mem.writes += 1  # a run changes the memory (as _run_once)
    sim._load_inputs(inputs)
    own = sched.lock.acquire(blocking=False)
    exs = sched.exs if own else [make_exec(r[3], None) for r in sched.recs]
    try:
        for ex in exs:
            ex.mem = mem
        try:
            calls(exs, sched.calls, key[2])  # (check_races: kept from a report-free run)
        except SimError:
            return None
    finally:
        for ex in exs:
            ex.mem = None
        if own:
            sched.lock.release()
    # the records: the recorded run's instructions (checked by identity above), which passed
    # Instruction.check on this machine (a run with a report keeps no schedule)
    recs = [InstRec(i, st, pos, inst, unit, dispatch, start, end, list(blocks))
            for i, st, pos, inst, unit, dispatch, start, end, blocks in sched.recs]
    outputs = {}
    for s in sim.program.symbols:
        if s.role == "output":
            outputs[s.name] = mem.read_walk(sim._symbol_walk(s)).reshape(s.shape)
    eng = SimpleNamespace(units=[SimpleNamespace(name=n, busy=b, stalls=st)
                                 for n, b, st in sched.units],
                          macs=sched.macs, peak=sched.peak, bytes=sched.nbytes, reports=[],
                          now=0.0)
    return Result(outputs, sim._stats(eng, recs), [], recs, [], sim.machine)

"""Hypothesis strategies for random *valid* TPB instructions of every kind on a given machine.

Every generated instruction passes ``inst.check(machine)`` (checked by ``test_strategies_valid``).
Validity here is the ISA's structural validity: element counts, types, placements, sync ranges.
CVU pipelines are structurally valid but their stage shapes are random (``check`` does not
require numpy-broadcast-compatible stages), so an interpreter test that executes them must filter
or build its own. Walks are small (<= a few thousand elements) so tests can enumerate them.

Load from another test folder (pytest runs in importlib mode, so use a unique module name)::

    import importlib.util, pathlib
    _p = pathlib.Path(__file__).parents[1] / "isa" / "strategies.py"
    _spec = importlib.util.spec_from_file_location("m100_isa_strategies", _p)
    S = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(S)
    # S.instructions(machine), S.walks(machine, ...), S.programs(machine), ...
"""

from __future__ import annotations

import functools
import math

from hypothesis import strategies as st

from m100.targets.m100.isa import (ROUTINE_ARITY, Act, Broadcast, Conv2D, Copy, CsuCall, CvuOp,
                                   CvuPipeline, DType, Dma, Epilogue, Fill, Level, MatMul, Monitor,
                                   Ref, RefKind, Requant, Routine, Space, Stage, Sync, Trigger,
                                   Update, Walk, space_size)
from m100.targets.m100.machine import Machine
from m100.targets.m100.program import CCB_STREAM, Program, Segment, Symbol

FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=64)
ANY_FLOATS = st.one_of(FLOATS, st.sampled_from([0.0, -0.0, float("inf"), float("-inf"), 1e-300,
                                                5e-324, 1.5]))


@functools.lru_cache(maxsize=None)
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@functools.lru_cache(maxsize=None)
def _ints(lo: int, hi: int):
    """st.integers, cached: building strategies inside composites dominates generation time."""
    return st.integers(lo, hi)


@functools.lru_cache(maxsize=None)
def _pick(options: tuple):
    return st.sampled_from(options)


_STEPS = tuple(x for x in range(-8, 9) if x)
_BOOLS = st.booleans()


@st.composite
def level_counts(draw, n: int, max_levels: int) -> list[int]:
    """A list of level counts whose product is ``n`` (at most ``max_levels`` entries)."""
    if n == 1 and draw(_BOOLS):
        return []
    k = draw(_ints(1, max_levels))
    counts = []
    rest = n
    for _ in range(k - 1):
        d = draw(_pick(tuple(_divisors(rest))))
        counts.append(d)
        rest //= d
    counts.append(rest)
    return draw(st.permutations(counts))


@st.composite
def level(draw, count: int) -> Level:
    init = draw(_ints(-16, 64))
    if draw(_ints(0, 5)) == 0:  # repeat level
        return Level(init, 0, count)
    step = draw(_pick(_STEPS))
    return Level(init, step, init + step * (count - 1))


@st.composite
def walks(draw, machine: Machine, n: int, space: Space | None = None, tpb: int | None = None,
          dtype: DType | None = None) -> Walk:
    """A valid walk of exactly ``n`` elements (space/tpb/dtype random unless given)."""
    if space is None:
        space = draw(_pick(tuple(Space)))
    if dtype is None:
        dtype = draw(_pick(tuple(DType)))
    if space is Space.HBSM:
        if tpb is None:
            tpb = draw(_ints(0, machine.num_tpbs - 1))
    else:
        tpb = 0
    counts = draw(level_counts(n, machine.twu_max_levels))
    levels = tuple(draw(level(c)) for c in counts)
    w = Walk(space, tpb, 0, dtype, levels)
    lo, hi = w.offset_range()
    bits = dtype.bits
    base_min = max(0, -((lo * bits) // 8))
    size = space_size(machine, space)
    base_max = min(size - 1, size - ((hi + 1) * bits + 7) // 8)
    if base_max < base_min:  # cannot happen for the small walks generated here
        raise AssertionError(f"walk {w} does not fit {space.name}")
    near = _ints(base_min, min(base_max, base_min + 4096))
    far = _ints(base_min, base_max)
    base = draw(st.one_of(near, far, st.just(base_max)))
    return Walk(space, tpb, base, dtype, levels)


@st.composite
def syncs(draw, machine: Machine, own_tpb: int | None, divides: int) -> Sync:
    """A valid Sync whose ``blocks`` divides ``divides``; monitors watch ``own_tpb`` (any TPB
    for ``None``, i.e. a DMA)."""
    blocks = draw(_pick(tuple(_divisors(divides)[:6])))
    cmax = machine.su_counter_max
    counter = _ints(0, machine.su_counters - 1)

    @st.composite
    def monitor(d):
        tpb = own_tpb if own_tpb is not None else d(_ints(0, machine.num_tpbs - 1))
        per = d(st.one_of(_ints(0, 4), _ints(0, cmax // blocks)))
        exp = d(st.one_of(_ints(0, 8), _ints(0, cmax - (blocks - 1) * per)))
        return Monitor(tpb, d(counter), exp, per)

    update = st.builds(Update, counter, _ints(1, machine.all_tpbs_mask),
                       st.one_of(st.just(1), _ints(1, cmax)), st.sampled_from(list(Trigger)))
    mons = draw(st.lists(monitor(), max_size=3))
    ups = draw(st.lists(update, max_size=3))
    return Sync(blocks, tuple(mons), tuple(ups))


_SMALL = _ints(1, 12)


@st.composite
def epilogues(draw, machine: Machine, tpb: int, f: int, integer: bool, requant: bool) -> Epilogue:
    acc = DType.I32 if integer else DType.F32
    bias = draw(st.none() | walks(machine, f, Space.HBSM, tpb, acc))
    acts = [Act.NONE, Act.RELU, Act.CLAMP] if integer else list(Act)
    act = draw(st.sampled_from(acts))
    if act is Act.CLAMP:
        lo, hi = sorted((draw(FLOATS), draw(FLOATS)))
    elif draw(_ints(0, 4)) == 0:
        lo, hi = draw(ANY_FLOATS), draw(ANY_FLOATS)  # ignored unless clamp, but encoded
    else:
        lo = hi = 0.0
    rq = None
    if requant:
        qmin, qmax = sorted((draw(_ints(-300, 300)), draw(_ints(-300, 300))))
        pc = draw(st.none() | walks(machine, 2 * f, Space.HBSM, tpb, DType.I32))
        rq = Requant(draw(_ints(-2**40, 2**40)), draw(_ints(0, 63)),
                     draw(_ints(-128, 127)), qmin, qmax, pc)
    return Epilogue(bias, act, lo, hi, rq)


@st.composite
def tcu_types(draw):
    """(a, b, c dtype, integer, requant, accumulate) satisfying the TCU type rules."""
    if draw(_BOOLS):
        b = draw(st.sampled_from([DType.I8, DType.I4]))
        requant = draw(_BOOLS)
        acc = False if requant else draw(_BOOLS)
        return DType.I8, b, DType.I8 if requant else DType.I32, True, requant, acc
    a = draw(st.sampled_from([DType.F16, DType.BF16, DType.F32]))
    if a is DType.F32:
        b = draw(st.sampled_from([DType.F32, DType.I4]))
    else:
        b = draw(st.sampled_from([DType.F16, DType.BF16, DType.I4]))
    acc = draw(_BOOLS)
    c = DType.F32 if acc else draw(st.sampled_from([DType.F16, DType.BF16, DType.F32]))
    return a, b, c, False, False, acc


def _tpb(machine: Machine):
    return _ints(0, machine.num_tpbs - 1)


@st.composite
def matmuls(draw, machine: Machine) -> MatMul:
    tpb = draw(_tpb(machine))
    m, n, k = draw(_SMALL), draw(_ints(1, 16)), draw(_SMALL)
    a_t, b_t, c_t, integer, requant, acc = draw(tcu_types())
    H = Space.HBSM
    return MatMul(tpb, draw(walks(machine, m * k, H, tpb, a_t)), draw(walks(machine, k * n, H, tpb, b_t)),
                  draw(walks(machine, m * n, H, tpb, c_t)), m, n, k, acc,
                  draw(epilogues(machine, tpb, n, integer, requant)), draw(syncs(machine, tpb, m)))


@st.composite
def conv2ds(draw, machine: Machine) -> Conv2D:
    tpb = draw(_tpb(machine))
    groups = draw(_ints(1, 3))
    c, f = groups * draw(_ints(1, 3)), groups * draw(_ints(1, 3))
    kh, kw = draw(_ints(1, 3)), draw(_ints(1, 3))
    dil = (draw(_ints(1, 2)), draw(_ints(1, 2)))
    stride = (draw(_ints(1, 3)), draw(_ints(1, 3)))
    pad = tuple(draw(_ints(0, 2)) for _ in range(4))
    n = draw(_ints(1, 2))
    h = dil[0] * (kh - 1) + 1 + draw(_ints(0, 4))
    w = dil[1] * (kw - 1) + 1 + draw(_ints(0, 4))
    a_t, b_t, c_t, integer, requant, acc = draw(tcu_types())
    probe = Conv2D(tpb, None, None, None, n, h, w, c, f, kh, kw, stride, pad, dil, groups)  # type: ignore[arg-type]
    oh, ow = probe.out_hw
    H = Space.HBSM
    return Conv2D(tpb, draw(walks(machine, n * h * w * c, H, tpb, a_t)),
                  draw(walks(machine, kh * kw * (c // groups) * f, H, tpb, b_t)),
                  draw(walks(machine, n * oh * ow * f, H, tpb, c_t)), n, h, w, c, f, kh, kw, stride,
                  pad, dil, groups, acc, draw(epilogues(machine, tpb, f, integer, requant)),
                  draw(syncs(machine, tpb, n * oh)))


_SHAPES = st.lists(_ints(1, 4), min_size=1, max_size=4).map(tuple)


@st.composite
def stages_for(draw, n_inputs: int, n_stages: int) -> tuple[Stage, ...]:
    out = []
    for si in range(n_stages):
        op = draw(st.sampled_from(list(CvuOp)))
        lo, hi = op.arity
        nargs = draw(_ints(lo, hi))
        kinds = [RefKind.IMM] + ([RefKind.INPUT] if n_inputs else []) + ([RefKind.STAGE] if si else [])
        args = []
        for _ in range(nargs):
            kind = draw(st.sampled_from(kinds))
            if kind is RefKind.IMM:
                args.append(Ref(kind, 0, draw(ANY_FLOATS)))
            else:
                args.append(Ref(kind, draw(_ints(0, (n_inputs if kind is RefKind.INPUT else si) - 1))))
        iparams = tuple(draw(st.lists(_ints(-5, 2**33), max_size=9)))
        fparam = draw(st.sampled_from([0.0, 1e-5, 1e-6]) | FLOATS)
        out.append(Stage(op, tuple(args), draw(_ints(-4, 3)), fparam, iparams))
    return tuple(out)


@st.composite
def cvu_pipelines(draw, machine: Machine) -> CvuPipeline:
    tpb = draw(_tpb(machine))
    n_in = draw(_ints(0, 3))
    in_shapes = tuple(draw(_SHAPES) for _ in range(n_in))
    inputs = tuple(draw(walks(machine, math.prod(s), Space.HBSM, tpb)) for s in in_shapes)
    out_shape = draw(_SHAPES)
    output = draw(walks(machine, math.prod(out_shape), Space.HBSM, tpb))
    stages = draw(stages_for(n_in, draw(_ints(1, machine.cvu_max_stages))))
    return CvuPipeline(tpb, inputs, in_shapes, output, out_shape, stages,
                       draw(syncs(machine, tpb, out_shape[0])))


@st.composite
def copies(draw, machine: Machine) -> Copy:
    tpb = draw(_tpb(machine))
    n = draw(_ints(1, 600))
    return Copy(tpb, draw(walks(machine, n, Space.HBSM, tpb)), draw(walks(machine, n, Space.HBSM)),
                draw(syncs(machine, tpb, n)))


@st.composite
def fills(draw, machine: Machine) -> Fill:
    tpb = draw(_tpb(machine))
    n = draw(_ints(1, 600))
    return Fill(tpb, draw(walks(machine, n, Space.HBSM, tpb)), draw(FLOATS),
                draw(syncs(machine, tpb, n)))


@st.composite
def broadcasts(draw, machine: Machine) -> Broadcast:
    tpb = draw(_tpb(machine))
    n = draw(_ints(1, 600))
    return Broadcast(tpb, draw(walks(machine, n, Space.HBSM, tpb)),
                     draw(walks(machine, n, Space.HBSM, tpb)),
                     draw(_ints(1, machine.all_tpbs_mask)), draw(syncs(machine, tpb, n)))


@st.composite
def csu_calls(draw, machine: Machine) -> CsuCall:
    tpb = draw(_tpb(machine))
    r = draw(st.sampled_from(list(Routine)))
    W = lambda n, dt=None: walks(machine, n, dtype=dt)  # noqa: E731
    I32 = DType.I32
    if r in (Routine.GATHER, Routine.SCATTER):
        v, d, n = draw(_SMALL), draw(_SMALL), draw(_SMALL)
        table, idx, rows = draw(W(v * d)), draw(W(n, I32)), draw(W(n * d))
        ops = (table, idx, rows) if r is Routine.GATHER else (rows, idx, table)
        params: tuple[int, ...] = (v, d, n)
    elif r is Routine.TOPK:
        rr, ln = draw(_SMALL), draw(_SMALL)
        k = draw(_ints(1, ln))
        ops = (draw(W(rr * ln)), draw(W(rr * k)), draw(W(rr * k, I32)))
        params = (rr, ln, k) + ((draw(_ints(0, 1)),) if draw(_BOOLS) else ())
    elif r is Routine.ARGMAX:
        rr, ln = draw(_SMALL), draw(_SMALL)
        ops, params = (draw(W(rr * ln)), draw(W(rr, I32))), (rr, ln)
    else:
        n = draw(_ints(1, 300))
        ops, params = (draw(W(n)), draw(W(n))), ()
    assert ROUTINE_ARITY[r][0] <= len(params) <= ROUTINE_ARITY[r][1]
    return CsuCall(tpb, r, ops, params, draw(syncs(machine, tpb, 1)))


@st.composite
def dmas(draw, machine: Machine) -> Dma:
    n = draw(_ints(1, 600))
    dt = draw(_pick(tuple(DType)))
    src = draw(walks(machine, n, dtype=dt))
    mask = draw(st.just(0) | _ints(1, machine.all_tpbs_mask))
    if mask:
        dst = draw(walks(machine, n, Space.HBSM, 0, dt))
    else:
        dst = draw(walks(machine, n, dtype=dt))
    return Dma(draw(_ints(0, machine.ccb_dma_engines - 1)), src, dst, mask,
               draw(syncs(machine, None, n)))


KIND_STRATEGIES = {MatMul: matmuls, Conv2D: conv2ds, CvuPipeline: cvu_pipelines, Copy: copies,
                   Fill: fills, Broadcast: broadcasts, CsuCall: csu_calls, Dma: dmas}


def instructions(machine: Machine, kinds=None):
    """Any valid instruction (of ``kinds``, default all eight) for ``machine``."""
    kinds = kinds or list(KIND_STRATEGIES)
    return st.one_of(*(KIND_STRATEGIES[k](machine) for k in kinds))


@st.composite
def programs(draw, machine: Machine) -> Program:
    """A valid program: instructions placed in their cluster's stream (DMAs in the CCB stream),
    non-overlapping segments, unique symbols."""
    streams: dict[int, list] = {}
    for inst in draw(st.lists(instructions(machine), max_size=6)):
        key = CCB_STREAM if isinstance(inst, Dma) else machine.cluster_of(inst.tpb)
        streams.setdefault(key, []).append(inst)
    segments = []
    addr = {Space.DDR: 0, Space.SRAM: 0}
    for i in range(draw(_ints(0, 3))):
        sp = draw(st.sampled_from([Space.DDR, Space.SRAM]))
        addr[sp] += draw(_ints(0, 4096))
        data = draw(st.binary(max_size=64))
        segments.append(Segment(sp, addr[sp], data, draw(st.sampled_from(["", f"w{i}", "bias é"]))))
        addr[sp] += len(data)
    symbols = []
    for i in range(draw(_ints(0, 3))):
        sp = draw(_pick(tuple(Space)))
        symbols.append(Symbol(f"t{i}", draw(st.sampled_from(["input", "output"])),
                              tuple(draw(st.lists(_ints(1, 5), max_size=3))),
                              draw(_pick(tuple(DType))), sp,
                              draw(_ints(0, 1024)),
                              draw(_tpb(machine)) if sp is Space.HBSM else 0))
    meta = draw(st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=3))
    return Program(machine.name, machine.fingerprint(), streams, segments, symbols, meta)

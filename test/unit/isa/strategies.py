"""Hypothesis strategies for random *valid* TPB instructions of every kind on a given machine.

Every generated instruction passes ``inst.check(machine)`` (checked by ``test_strategies_valid``).
Validity here is the ISA's structural validity: element counts, types, placements, sync ranges.
By default CVU pipelines are structurally valid but their stage shapes are random (``check`` does
not require numpy-broadcast-compatible stages); ``instructions(machine, executable=True)`` gives
instructions an interpreter can run (see its docstring). Walks are small (<= a few thousand elements) so tests can enumerate them.

Load from another test folder (pytest runs in importlib mode, so use a unique module name)::

    import importlib.util, pathlib
    _p = pathlib.Path(__file__).parents[1] / "isa" / "strategies.py"
    _spec = importlib.util.spec_from_file_location("m100_isa_strategies", _p)
    S = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(S)
    # S.instructions(machine[, kinds][, executable=True]), S.walks(machine, n, ...), S.programs(machine)
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
          dtype: DType | None = None, injective: bool = False) -> Walk:
    """A valid walk of exactly ``n`` elements (space/tpb/dtype random unless given).

    ``injective=True``: no two beats share an element offset (no repeat levels; a mixed-radix
    layout of the levels in a random order, with gaps and reversed levels), as a written operand
    must be for a result that does not depend on write order."""
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
    if injective:
        strides = [0] * len(counts)
        stride = 1
        for j in reversed(draw(st.permutations(range(len(counts))))):
            strides[j] = stride
            stride = stride * counts[j] + draw(_ints(0, 3))
        levels = tuple(Level(0, 1, 0) if c == 1 else
                       Level(sd * (c - 1), -sd, 0) if draw(_BOOLS) else Level(0, sd, sd * (c - 1))
                       for c, sd in zip(counts, strides))
    else:
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
def epilogues(draw, machine: Machine, tpb: int, f: int, integer: bool, requant: bool,
              executable: bool = False, dequant: bool = False) -> Epilogue:
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
        mult = _ints(-2**31, 2**31 - 1) if executable else _ints(-2**40, 2**40)
        rq = Requant(draw(mult), draw(_ints(0, 63)),
                     draw(_ints(-128, 127)), qmin, qmax, pc)
    dq = draw(walks(machine, f, Space.HBSM, tpb, DType.F32)) if dequant else None
    return Epilogue(bias, act, lo, hi, rq, dq)


@st.composite
def tcu_types(draw):
    """(a, b, c dtype, integer, requant, accumulate, dequant) satisfying the TCU type rules
    (a dequantized integer result is float; it accumulates only from an i32 ``acc`` walk)."""
    if draw(_BOOLS):
        b = draw(st.sampled_from([DType.I8, DType.I4]))
        mode = draw(st.sampled_from(["i32", "requant", "dequant"]))
        if mode == "dequant":
            c = draw(st.sampled_from([DType.F16, DType.BF16, DType.F32]))
            return DType.I8, b, c, True, False, draw(_BOOLS), True
        requant = mode == "requant"
        acc = False if requant else draw(_BOOLS)
        return DType.I8, b, DType.I8 if requant else DType.I32, True, requant, acc, False
    a = draw(st.sampled_from([DType.F16, DType.BF16, DType.F32]))
    if a is DType.F32:
        b = draw(st.sampled_from([DType.F32, DType.I4]))
    else:
        b = draw(st.sampled_from([DType.F16, DType.BF16, DType.I4]))
    acc = draw(_BOOLS)
    c = DType.F32 if acc else draw(st.sampled_from([DType.F16, DType.BF16, DType.F32]))
    return a, b, c, False, False, acc, False


def _tpb(machine: Machine):
    return _ints(0, machine.num_tpbs - 1)


@st.composite
def matmuls(draw, machine: Machine, executable: bool = False) -> MatMul:
    tpb = draw(_tpb(machine))
    m, n, k = draw(_SMALL), draw(_ints(1, 16)), draw(_SMALL)
    a_t, b_t, c_t, integer, requant, acc, dequant = draw(tcu_types())
    H = Space.HBSM
    scale, block = None, 0
    if b_t is DType.I4 and a_t in (DType.F16, DType.BF16) and draw(_BOOLS):
        # i4 weights dequantized on the fly: scales [k / block, n] of A's type
        block = draw(st.sampled_from(_divisors(k)))
        scale = draw(walks(machine, k // block * n, H, tpb, a_t))
    acc_in = None
    if acc and not integer and draw(_BOOLS):  # the f32 accumulator read instead of C
        acc_in = draw(walks(machine, m * n, H, tpb, DType.F32))
        c_t = draw(st.sampled_from([DType.F16, DType.BF16, DType.F32]))
    if acc and dequant:  # the i32 accumulator read instead of the float C (always)
        acc_in = draw(walks(machine, m * n, H, tpb, DType.I32))
    post, post_in = (), None
    if dequant and not executable and draw(_BOOLS):  # CVU stages after the dequantization
        n_in = draw(_ints(1, 2))
        post = draw(stages_for(n_in, draw(_ints(1, machine.cvu_max_stages)), elementwise=True))
        if n_in == 2:
            post_in = draw(walks(machine, m * n, H, tpb, draw(st.sampled_from(
                [DType.F16, DType.BF16, DType.F32]))))
        if post[-1].op is CvuOp.FTOI:
            c_t = DType.I8
    return MatMul(tpb, draw(walks(machine, m * k, H, tpb, a_t)), draw(walks(machine, k * n, H, tpb, b_t)),
                  draw(walks(machine, m * n, H, tpb, c_t, executable)), m, n, k, acc,
                  draw(epilogues(machine, tpb, n, integer, requant, executable, dequant)),
                  draw(syncs(machine, tpb, m)), scale, block, acc_in, post, post_in)


@st.composite
def conv2ds(draw, machine: Machine, executable: bool = False) -> Conv2D:
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
    a_t, b_t, c_t, integer, requant, acc, dequant = draw(tcu_types())
    acc = acc and not dequant  # (a conv has no separate accumulator walk)
    probe = Conv2D(tpb, None, None, None, n, h, w, c, f, kh, kw, stride, pad, dil, groups)  # type: ignore[arg-type]
    oh, ow = probe.out_hw
    H = Space.HBSM
    return Conv2D(tpb, draw(walks(machine, n * h * w * c, H, tpb, a_t)),
                  draw(walks(machine, kh * kw * (c // groups) * f, H, tpb, b_t)),
                  draw(walks(machine, n * oh * ow * f, H, tpb, c_t, executable)), n, h, w, c, f, kh,
                  kw, stride, pad, dil, groups, acc,
                  draw(epilogues(machine, tpb, f, integer, requant, executable, dequant)),
                  draw(syncs(machine, tpb, n * oh)))


_SHAPES = st.lists(_ints(1, 4), min_size=1, max_size=4).map(tuple)


@st.composite
def stages_for(draw, n_inputs: int, n_stages: int, elementwise: bool = False
               ) -> tuple[Stage, ...]:
    out = []
    for si in range(n_stages):
        op = draw(st.sampled_from([o for o in CvuOp if not elementwise or int(o) < 64]))
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
def cvu_pipelines(draw, machine: Machine, executable: bool = False) -> CvuPipeline:
    if executable:
        return draw(executable_cvu_pipelines(machine))
    tpb = draw(_tpb(machine))
    n_in = draw(_ints(0, 3))
    in_shapes = tuple(draw(_SHAPES) for _ in range(n_in))
    inputs = tuple(draw(walks(machine, math.prod(s), Space.HBSM, tpb)) for s in in_shapes)
    out_shape = draw(_SHAPES)
    output = draw(walks(machine, math.prod(out_shape), Space.HBSM, tpb))
    stages = draw(stages_for(n_in, draw(_ints(1, machine.cvu_max_stages))))
    return CvuPipeline(tpb, inputs, in_shapes, output, out_shape, stages,
                       draw(syncs(machine, tpb, out_shape[0])))


_SAFE_UNARY = (CvuOp.COPY, CvuOp.NEG, CvuOp.ABS, CvuOp.EXP, CvuOp.RELU, CvuOp.GELU, CvuOp.SILU,
               CvuOp.SIGMOID, CvuOp.TANH, CvuOp.SQUARE, CvuOp.ERF, CvuOp.FLOOR, CvuOp.CEIL,
               CvuOp.SIN, CvuOp.COS, CvuOp.ATAN, CvuOp.SIGN, CvuOp.ROUND)
_SAFE_BINARY = (CvuOp.ADD, CvuOp.SUB, CvuOp.MUL, CvuOp.MAX, CvuOp.MIN, CvuOp.CMP_GT, CvuOp.CMP_GE,
                CvuOp.CMP_EQ)
_REDUCE = (CvuOp.RSUM, CvuOp.RMAX, CvuOp.RMIN, CvuOp.RMEAN, CvuOp.RPROD)
_FLOAT_TYPES = (DType.F32, DType.F16, DType.BF16)


@st.composite
def executable_cvu_pipelines(draw, machine: Machine) -> CvuPipeline:
    """A CVU pipeline whose stages are shape-consistent (numpy broadcasting works and the last
    stage yields ``out_shape``) and free of domain errors (no log/sqrt/div/pow/recip), with float
    inputs, an injective output walk, reductions/softmax/norms never along axis 0 of a rank >= 2
    tensor (axis 0 is what blocks split), and ``blocks == 1`` for rank-1 pipelines that reduce."""
    tpb = draw(_tpb(machine))
    out_shape = tuple(draw(st.lists(_ints(1, 4), min_size=1, max_size=3)))
    rank = len(out_shape)
    # every value's shape is out_shape with some dims set to 1, so everything broadcasts
    shrink = lambda: tuple(1 if draw(_BOOLS) else d for d in out_shape)  # noqa: E731
    in_shapes = (out_shape,) + tuple(shrink() for _ in range(draw(_ints(0, 2))))
    inputs = tuple(draw(walks(machine, math.prod(sh), Space.HBSM, tpb, draw(_pick(_FLOAT_TYPES))))
                   for sh in in_shapes)
    values: list[tuple[Ref, tuple[int, ...]]] = [(Ref(RefKind.INPUT, i), sh)
                                                 for i, sh in enumerate(in_shapes)]
    stages: list[Stage] = []
    reduces = False
    axes = list(range(1, rank)) if rank > 1 else [0]
    for si in range(draw(_ints(0, machine.cvu_max_stages - 1))):
        kind = draw(_ints(0, 3))
        x, xs = draw(_pick(tuple(values)))
        if kind == 0:
            st_, shape = Stage(draw(_pick(_SAFE_UNARY)), (x,)), xs
        elif kind == 1:
            if draw(_BOOLS):
                y, ys = Ref(RefKind.IMM, 0, draw(st.floats(-4, 4, width=32))), xs
            else:
                y, ys = draw(_pick(tuple(values)))
            shape = tuple(max(a, b) for a, b in zip(xs, ys))
            st_ = Stage(draw(_pick(_SAFE_BINARY)), (x, y) if draw(_BOOLS) else (y, x))
        elif kind == 2:
            ax = draw(_pick(tuple(axes)))
            reduces = True
            st_ = Stage(draw(_pick(_REDUCE)), (x,), axis=ax)
            shape = tuple(1 if i == ax else d for i, d in enumerate(xs))
        else:
            reduces = True
            op = draw(_pick((CvuOp.SOFTMAX, CvuOp.LAYERNORM, CvuOp.RMSNORM)))
            st_ = Stage(op, (x,), axis=draw(_pick(tuple(axes))),
                        fparam=1e-5 if op is not CvuOp.SOFTMAX else 0.0)
            shape = xs
        stages.append(st_)
        values.append((Ref(RefKind.STAGE, si), shape))
    # the last stage combines the last value with input 0 (shape out_shape)
    last = values[-1][0]
    stages.append(Stage(draw(_pick((CvuOp.ADD, CvuOp.MUL, CvuOp.MAX))), (last, Ref(RefKind.INPUT, 0))))
    out_t = draw(_pick(_FLOAT_TYPES + (DType.I8, DType.I32)))
    output = draw(walks(machine, math.prod(out_shape), Space.HBSM, tpb, out_t, injective=True))
    sync = draw(syncs(machine, tpb, 1 if reduces and rank == 1 else out_shape[0]))
    return CvuPipeline(tpb, inputs, in_shapes, output, out_shape, tuple(stages), sync)


@st.composite
def copies(draw, machine: Machine, executable: bool = False) -> Copy:
    tpb = draw(_tpb(machine))
    n = draw(_ints(1, 600))
    return Copy(tpb, draw(walks(machine, n, Space.HBSM, tpb)),
                draw(walks(machine, n, Space.HBSM, injective=executable)),
                draw(syncs(machine, tpb, n)))


@st.composite
def fills(draw, machine: Machine, executable: bool = False) -> Fill:
    tpb = draw(_tpb(machine))
    n = draw(_ints(1, 600))
    return Fill(tpb, draw(walks(machine, n, Space.HBSM, tpb, injective=executable)), draw(FLOATS),
                draw(syncs(machine, tpb, n)))


@st.composite
def broadcasts(draw, machine: Machine, executable: bool = False) -> Broadcast:
    tpb = draw(_tpb(machine))
    n = draw(_ints(1, 600))
    return Broadcast(tpb, draw(walks(machine, n, Space.HBSM, tpb)),
                     draw(walks(machine, n, Space.HBSM, tpb, injective=executable)),
                     draw(_ints(1, machine.all_tpbs_mask)), draw(syncs(machine, tpb, n)))


@st.composite
def csu_calls(draw, machine: Machine, executable: bool = False) -> CsuCall:
    tpb = draw(_tpb(machine))
    r = draw(st.sampled_from(list(Routine)))
    W = lambda n, dt=None: walks(machine, n, dtype=dt)  # noqa: E731
    O = lambda n, dt=None: walks(machine, n, dtype=dt, injective=executable)  # noqa: E731  (written)
    I32 = DType.I32
    if r in (Routine.GATHER, Routine.SCATTER):
        v, d, n = draw(_SMALL), draw(_SMALL), draw(_SMALL)
        if r is Routine.GATHER:
            ops = (draw(W(v * d)), draw(W(n, I32)), draw(O(n * d)))
        else:
            ops = (draw(W(n * d)), draw(W(n, I32)), draw(O(v * d)))
        params: tuple[int, ...] = (v, d, n)
    elif r is Routine.TOPK:
        rr, ln = draw(_SMALL), draw(_SMALL)
        k = draw(_ints(1, ln))
        ops = (draw(W(rr * ln)), draw(O(rr * k)), draw(O(rr * k, I32)))
        params = (rr, ln, k) + ((draw(_ints(0, 1)),) if draw(_BOOLS) else ())
    elif r is Routine.ARGMAX:
        rr, ln = draw(_SMALL), draw(_SMALL)
        ops, params = (draw(W(rr * ln)), draw(O(rr, I32))), (rr, ln)
    else:
        n = draw(_ints(1, 300))
        ops, params = (draw(W(n)), draw(O(n))), ()
    assert ROUTINE_ARITY[r][0] <= len(params) <= ROUTINE_ARITY[r][1]
    return CsuCall(tpb, r, ops, params, draw(syncs(machine, tpb, 1)))


@st.composite
def dmas(draw, machine: Machine, executable: bool = False) -> Dma:
    n = draw(_ints(1, 600))
    dt = draw(_pick(tuple(DType)))
    src = draw(walks(machine, n, dtype=dt))
    mask = draw(st.just(0) | _ints(1, machine.all_tpbs_mask))
    if mask:
        dst = draw(walks(machine, n, Space.HBSM, 0, dt, injective=executable))
    else:
        dst = draw(walks(machine, n, dtype=dt, injective=executable))
    return Dma(draw(_ints(0, machine.ccb_dma_engines - 1)), src, dst, mask,
               draw(syncs(machine, None, n)))


KIND_STRATEGIES = {MatMul: matmuls, Conv2D: conv2ds, CvuPipeline: cvu_pipelines, Copy: copies,
                   Fill: fills, Broadcast: broadcasts, CsuCall: csu_calls, Dma: dmas}


def instructions(machine: Machine, kinds=None, executable: bool = False):
    """Any valid instruction (of ``kinds``, default all eight) for ``machine``.

    ``executable=True`` narrows to instructions an interpreter can run and compare with an oracle:
    written operands are injective walks, CVU pipelines are shape-consistent
    (:func:`executable_cvu_pipelines`), requant multipliers are int32. Still the test's job: the
    *contents* of memory (gather/scatter indices in range, per-channel requant shifts in [0, 63])
    and overlaps between different operands (an output may alias an input or another output)."""
    kinds = kinds or list(KIND_STRATEGIES)
    return st.one_of(*(KIND_STRATEGIES[k](machine, executable) for k in kinds))


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

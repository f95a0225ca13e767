"""A float CVU pipeline's ``run_free`` (session 35: add / sub / mul / max / min / relu stages of
float32 inputs evaluated without ``cvu_eval``'s lane tests and copies, the result stored at once)
writes the bytes of ``run`` + ``apply`` -- on random pipelines (stage chains referring to inputs,
earlier stages and immediates; inputs broadcast against each other) over random bytes and over
NaNs of several payloads, infinities, signed zeros and denormals; pipelines outside that set
(another op, iparams, an integer input, blocks) take ``run``."""

from __future__ import annotations

import numpy as np
import pytest

from m100.sim import Simulator
from m100.sim.semantics import make_exec
from m100.sim.semantics_base import quiet_run
from m100.targets.m100.isa import (CvuOp, CvuPipeline, DType, Ref, RefKind, Space, Stage, Sync,
                                   Walk)
from m100.targets.m100.machine import get_machine

TINY = get_machine("tiny")
_OPS = [CvuOp.ADD, CvuOp.SUB, CvuOp.MUL, CvuOp.MAX, CvuOp.MIN, CvuOp.RELU]
_SPECIAL = np.concatenate([np.array(
    [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.4e38, 1.5, -2.25],
    dtype=np.float32), np.frombuffer(np.array([0x7FC00001, 0xFFA00000, 0x7F800001],
                                              dtype=np.uint32).tobytes(), dtype=np.float32)])


def _pipeline(r, op_set=_OPS, dtype=DType.F32, iparams=(), blocks=1):
    shape = (int(r.integers(1, 4)), int(r.integers(1, 5)), int(r.integers(1, 6)))
    n_in = int(r.integers(1, 4))
    in_shapes = [shape if k == 0 or r.random() < 0.6 else
                 (1, 1, shape[2]) if r.random() < 0.5 else (shape[0], 1, 1) for k in range(n_in)]
    inputs, at = [], int(r.integers(0, 4))
    for k, s in enumerate(in_shapes):
        n = int(np.prod(s))
        inputs.append(Walk.strided(Space.HBSM, 0, at, dtype if k == 0 else DType.F32, s))
        at += 4 * n + int(r.integers(0, 3))
    out = Walk.strided(Space.HBSM, 0, at + 8, DType.F32, shape)
    stages = []
    for j in range(int(r.integers(1, 4))):
        op = op_set[int(r.integers(0, len(op_set)))]
        refs = [Ref(RefKind.INPUT, int(r.integers(0, n_in)))] + \
            ([Ref(RefKind.STAGE, int(r.integers(0, j)))] if j else [])

        def arg():
            x = r.random()
            if x < 0.2:
                return Ref(RefKind.IMM, imm=float(r.choice([0.5, -3.0, 0.0, -0.0, 1e30])))
            return refs[int(r.integers(0, len(refs)))]
        if op is CvuOp.RELU:
            stages.append(Stage(op, (refs[int(r.integers(0, len(refs)))],), iparams=iparams))
        else:
            a = arg()
            b = arg() if a.kind is not RefKind.IMM else refs[-1]
            stages.append(Stage(op, (a, b) if r.random() < 0.5 else (b, a), iparams=iparams))
    # the last stage produces the output's shape: input 0's (a relu of it, or a sum with it)
    if r.random() < 0.2:
        stages.append(Stage(CvuOp.RELU, (Ref(RefKind.INPUT, 0),)))
    else:
        op = [CvuOp.ADD, CvuOp.MAX, CvuOp.SUB][int(r.integers(0, 3))]
        stages.append(Stage(op, (Ref(RefKind.STAGE, len(stages) - 1), Ref(RefKind.INPUT, 0))))
    return CvuPipeline(0, tuple(inputs), tuple(in_shapes), out, shape, tuple(stages),
                       sync=Sync(blocks=blocks))


def _run(inst, data, free):
    sim = Simulator([inst], TINY, mode="functional")
    sim.memory.write_bytes(Space.HBSM, 0, 0, data)
    ex = make_exec(inst, sim.memory)
    with quiet_run():
        for b in range(inst.sync.blocks):
            ex.apply(ex.run_free(b) if free else ex.run(b))
    return bytes(sim.memory.space(Space.HBSM, 0).read_range(0, 4096))


def _data(r, seed: int) -> np.ndarray:
    """4 KiB of HBSM bytes: random, or (even seeds) float specials (NaN, inf, -0, ...)."""
    return r.integers(0, 256, 4096, dtype=np.uint8) if seed % 2 else \
        r.choice(_SPECIAL, 1024).view(np.uint8)


def _same_as_run(inst, data) -> bool:
    """Assert ``run_free`` leaves the bytes ``run`` + ``apply`` leave, or raises what they raise
    (a shape the pipeline cannot produce: the same fault); True when bytes were compared."""
    try:
        want = _run(inst, data, False)
    except Exception as e:  # noqa: BLE001 - the same fault either way
        with pytest.raises(type(e)):
            _run(inst, data, True)
        return False
    assert _run(inst, data, True) == want
    return True


@pytest.mark.parametrize("seed", range(60))
def test_float_pipelines_write_what_run_and_apply_write(seed):
    r = np.random.default_rng(seed)
    inst = _pipeline(r)
    if not _same_as_run(inst, _data(r, seed)):
        return
    assert inst.__dict__.get("_sim_cvufree") is True  # (the fast path ran: not vacuous)


@pytest.mark.parametrize("case", ["op", "iparams", "int-input", "blocks"])
def test_what_it_does_not_take_runs_run(case):
    r = np.random.default_rng(3)
    kw = {"op": {"op_set": [CvuOp.DIV]}, "iparams": {"iparams": (2,)},
          "int-input": {"dtype": DType.I16}, "blocks": {"blocks": 1}}[case]
    inst = _pipeline(r, **kw)
    if case == "blocks":
        inst = CvuPipeline(0, inst.inputs, tuple(inst.out_shape for _ in inst.inputs),
                           inst.output, inst.out_shape, inst.stages,
                           sync=Sync(blocks=inst.out_shape[0]))
    if not _same_as_run(inst, r.integers(0, 256, 4096, dtype=np.uint8)):
        return
    if case != "blocks":
        assert inst.__dict__.get("_sim_cvufree") is False


# --- session 36: the last stage written straight into the output's bytes ----------------------
@pytest.fixture
def into(monkeypatch):
    """How many pipelines wrote their last stage into the output's bytes (``_into`` gave an
    array)."""
    from m100.sim.semantics_cvu import CvuExec
    got = [0]
    real = CvuExec._into

    def counted(self, args, ins, spans):
        y = real(self, args, ins, spans)
        got[0] += y is not None
        return y
    monkeypatch.setattr(CvuExec, "_into", counted)
    return got


def test_the_last_stage_into_the_output_is_taken(into):
    """Over the random pipelines above (an output after the inputs, contiguous, aligned or
    not), most write their last stage into the output: the comparison is of that path."""
    for seed in range(60):
        test_float_pipelines_write_what_run_and_apply_write(seed)
    assert into[0] >= 30


def _moved_output(inst, base, shape=None, strides=None):
    out = Walk.strided(Space.HBSM, 0, base, DType.F32, inst.out_shape if shape is None
                       else shape, strides)
    return CvuPipeline(0, inst.inputs, inst.in_shapes, out, inst.out_shape, inst.stages,
                       sync=inst.sync)


@pytest.mark.parametrize("seed", range(24))
def test_an_output_over_an_input_or_not_contiguous(seed, into):
    """The output's bytes over an input's (at its base or a few elements on: the inputs are
    read before any output byte is written) or a row-padded output walk: ``run`` + ``apply``'s
    bytes; none of them writes into the output."""
    r = np.random.default_rng(700 + seed)
    inst = _pipeline(r)
    k = int(r.integers(0, len(inst.inputs)))
    if seed % 3 == 2 and inst.out_shape[0] * inst.out_shape[1] > 1:  # row-padded: not contiguous
        s = inst.out_shape
        inst = _moved_output(inst, inst.output.base, s,
                             (s[1] * (s[2] + 1), s[2] + 1, 1))
    else:
        inst = _moved_output(inst, inst.inputs[k].base + 4 * int(r.integers(0, 3)) * (seed % 3))
    if not _same_as_run(inst, _data(r, seed)):
        return
    assert into[0] == 0


@pytest.mark.parametrize("seed", range(32))
def test_an_input_that_is_not_contiguous(seed, into):
    """An input that is not contiguous, read by ``read_walk`` as before -- row-padded (a copy)
    or every other element (a strided view) --, apart from the output or around it: ``run`` +
    ``apply``'s bytes; a strided view around the output's bytes keeps the old store."""
    r = np.random.default_rng(900 + seed)
    inst = _pipeline(r)
    s = inst.in_shapes[0]
    strided = seed % 4 >= 2
    if strided:  # every other element: read_walk's view of it is a view
        st = (2 * s[1] * s[2], 2 * s[2], 2)
    else:  # rows of s[2] + 2 elements: read_walk copies it
        st = (s[1] * (s[2] + 2), s[2] + 2, 1)
    x0 = Walk.strided(Space.HBSM, 0, 2048, DType.F32, s, st)
    pad = CvuPipeline(0, (x0,) + inst.inputs[1:], inst.in_shapes, inst.output, inst.out_shape,
                      inst.stages, sync=inst.sync)
    around = seed % 2 == 1
    if around:  # the output inside the input's span, from its second element on
        pad = _moved_output(pad, 2048 + 4)
    data = r.integers(0, 256, 4096, dtype=np.uint8) if seed % 8 < 4 else \
        r.choice(_SPECIAL, 1024).view(np.uint8)
    try:
        want = _run(pad, data, False)
    except Exception as e:  # noqa: BLE001 - a shape the pipeline cannot produce: the same fault
        with pytest.raises(type(e)):
            _run(pad, data, True)
        return
    assert _run(pad, data, True) == want
    if around and strided and int(np.prod(s)) > 1:
        assert into[0] == 0

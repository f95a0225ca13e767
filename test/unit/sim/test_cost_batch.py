"""A timed run derives its block costs in one batch (``m100.sim.cost_batch``): every
derived field equals the one-cost-at-a-time derivation, bit for bit."""

import copy

import numpy as np

from m100.sim import cost_batch
from m100.sim.testing import hb, run
from m100.sim.timing import _terms
from m100.targets.m100.isa import (Broadcast, Copy, CvuOp, CvuPipeline, DType, Dma, Fill, Level,
                                   MatMul, Ref, RefKind, Space, Stage, Sync, Walk, mask_of)
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")
FIELDS = ("alone", "crit", "cols_of")
ARRAYS = ("cols", "use")


def _program():
    out = [Dma(0, Walk.strided(Space.DDR, 0, 0, DType.I8, (1 << 14,)),
               Walk.strided(Space.HBSM, 2, 1 << 16, DType.I8, (1 << 14,)))]
    for t, base in ((0, 96), (3, 0), (17, 4000)):  # matmuls: bank histograms at residues
        A, B = hb(t, base, DType.I8, (64, 32)), hb(t, 8192 + 32 * t, DType.I8, (32, 64))
        out.append(MatMul(t, A, B, hb(t, 65536, DType.I32, (64, 64)), 64, 64, 32,
                          sync=Sync(blocks=2)))
    # a walk on one bank (a strided column), a local and a remote copy, a fill, a broadcast
    col = Walk(Space.HBSM, 5, 64, DType.I8, (Level(0, 1024, 1024 * 15), Level(0, 1, 31)))
    out.append(Copy(5, col, hb(5, 1 << 18, DType.I8, (16, 32))))
    out.append(Copy(3, hb(3, 200, DType.I8, (64, 30), (64, 1)), hb(6, 4096, DType.I8, (64, 30))))
    out.append(Fill(7, hb(7, 0, DType.F32, (8, 8)), 0.5))
    out.append(Broadcast(9, hb(9, 1 << 18, DType.F16, (16, 64)), hb(9, 1 << 19, DType.F16, (16, 64)),
                         mask_of(0, 1, 9)))
    x = hb(4, 0, DType.F32, (32, 64))
    out.append(CvuPipeline(4, (x,), ((32, 64),), hb(4, 1 << 15, DType.F32, (32, 64)), (32, 64),
                           (Stage(CvuOp.RELU, (Ref(RefKind.INPUT, 0),)),)))
    return out


def _costs(insts):
    return [c for i in insts for c in i.__dict__["_sim_costs"][1] if c is not None]


def test_batch_fields_equal_one_cost_at_a_time(monkeypatch):
    batched = _program()
    single = copy.deepcopy(batched)
    a, _ = run(batched, machine=M100, mode="timing")
    monkeypatch.setattr(cost_batch, "BATCH", False)
    b, _ = run(single, machine=M100, mode="timing")
    assert a.ok and b.ok, (a.reports, b.reports)
    assert a.stats == b.stats and [r.blocks for r in a.records] == [r.blocks for r in b.records]
    ca, cb = _costs(batched), _costs(single)
    assert len(ca) == len(cb) >= len(batched)
    for x, y in zip(ca, cb):
        for f in FIELDS:
            assert getattr(x, f) == getattr(y, f), f
        for f in ARRAYS:
            assert getattr(x, f).dtype == getattr(y, f).dtype
            assert getattr(x, f).tobytes() == getattr(y, f).tobytes(), f
        tx, ty = _terms(x, M100.hbsm_banks), _terms(y, M100.hbsm_banks)  # (share's)
        assert tx[0].tolist() == ty[0].tolist() and tx[1].tobytes() == ty[1].tobytes()
        assert np.float64(x.alone).tobytes() == np.float64(y.alone).tobytes()


def test_batch_takes_every_cost_without_derived_fields():
    insts = _program()
    from m100.sim.engine import Engine  # (a bare engine: its registry and capacities)

    run(insts, machine=M100, mode="timing")  # builds (and derives) the costs
    fresh = [copy.deepcopy(c) for c in _costs(insts)]
    for c in fresh[::2]:  # forget what was derived
        c.alone = c.nzb = c.terms = c.cols = c.use = None
        c.crit, c.cols_of = False, 0
    eng = Engine(M100, [], None, "timing", None, False, False)
    derive = (eng.cap, eng._col, lambda: eng.col_cap, eng.columns.token, M100.hbsm_banks)
    assert cost_batch.derive_batch(fresh, *derive) == len(fresh[::2])
    assert all(c.alone is not None for c in fresh)
    assert cost_batch.derive_batch(fresh, *derive) == 0

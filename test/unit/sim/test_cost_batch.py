"""Block cost derivations: a timed run derives its block costs in one batch
(``m100.sim.cost_batch``) -- every derived field equals the one-cost-at-a-time derivation, bit
for bit -- and each derivation equals its definition written out."""

import copy

import numpy as np
import pytest

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


def _dma(engine, n, base):
    return Dma(engine, Walk.strided(Space.DDR, 0, base, DType.I8, (n,)),
               Walk.strided(Space.SRAM, 0, base % (1 << 24), DType.I8, (n,)))


def test_cost_derivations_equal_their_definitions():
    """A cost's nonzero bank demands are found once (``timing.bank_terms``) and serve both its
    share terms (``_terms``) and its engine columns (``Fluid._add_use``); the bank histograms
    are shared read-only arrays (``twu._accesses``). Each equals its definition written out
    here (per TPB ``np.flatnonzero`` of the demands, share terms by TPB ascending then links
    by name, engine columns in the cost's TPB order then its links' registry columns), on the
    costs of a run with single-TPB, multi-TPB (broadcast) and linked (DMA, remote copy) jobs."""
    import numpy as np

    from m100.sim import timing, twu
    from m100.sim.fluid import columns_of
    from m100.targets.m100.isa import Broadcast

    m = M100
    banks = m.hbsm_banks
    insts = [_dma(0, 1 << 14, 0), _dma(1, 1 << 12, 1 << 22)]  # DDR -> SRAM
    for t in (0, 3, 17):
        A, B = hb(t, 96, DType.I8, (64, 32)), hb(t, 8192 + 32 * t, DType.I8, (32, 64))
        insts.append(MatMul(t, A, B, hb(t, 65536, DType.I32, (64, 64)), 64, 64, 32,
                            sync=Sync(blocks=2)))
    insts.append(Copy(3, hb(3, 200, DType.I8, (64, 30), (64, 1)), hb(5, 4096, DType.I8, (64, 30))))
    # from TPB 9 to 0, 1, 9: its banks dict is in the order 9, 0, 1
    insts.append(Broadcast(9, hb(9, 1 << 18, DType.F16, (16, 64)), hb(9, 1 << 19, DType.F16, (16, 64)),
                           mask_of(0, 1, 9)))
    res, _ = run(insts, machine=m, mode="timing")
    assert res.ok, res.reports
    cols = columns_of(m)
    seen, unsorted = 0, False
    for inst in insts:
        for c in inst.__dict__["_sim_costs"][1]:
            if c is None:
                continue
            seen += 1
            unsorted |= list(c.banks) != sorted(c.banks)
            want_idx, want_val = [], []
            for t in sorted(c.banks):
                nz = np.flatnonzero(c.banks[t])
                want_idx.append(t * banks + nz)
                want_val.append(c.banks[t][nz])
            lk = sorted((k for k, x in c.links.items() if x != 0), key=str)
            want_idx.append(np.array([timing._link_code(k) for k in lk], dtype=np.int64))
            want_val.append(np.array([c.links[k] for k in lk], dtype=np.float64))
            idx, val, _ = timing._terms(c, banks)
            assert idx.tolist() == np.concatenate(want_idx).tolist()
            assert val.tobytes() == np.concatenate(want_val).tobytes()
            w = c.alone
            e_cols = [t * banks + np.flatnonzero(a) for t, a in c.banks.items()]
            e_use = [w * a[np.flatnonzero(a)] for a in c.banks.values()]
            e_cols.append(np.array([cols.ids[k] for k, v in c.links.items() if v != 0], dtype=np.int64))
            e_use.append(np.array([w * v for v in c.links.values() if v != 0], dtype=np.float64))
            assert c.cols_of == cols.token
            assert c.cols.tolist() == np.concatenate(e_cols).tolist()
            assert c.use.tobytes() == np.concatenate(e_use).tobytes()
    assert seen >= len(insts) and unsorted
    for inst in insts:  # the shared histograms: the definition's values, read-only
        for _, wk, _ in inst.walks():
            if wk.space is Space.HBSM:
                got = twu.bank_accesses(wk, m)
                assert got.tolist() == twu._walk_bank_accesses(wk, m.hbsm_bank_width, banks).tolist()
                with pytest.raises(ValueError):
                    got[0] = 1.0

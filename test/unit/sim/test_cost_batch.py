"""Block cost derivations: a timed run derives its block costs in one batch
(``m100.sim.cost_batch``) -- every derived field equals the one-cost-at-a-time derivation, bit
for bit -- and each derivation equals its definition written out."""

import copy
from dataclasses import replace

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


def _remote_copies():
    """Remote copies: one geometry on TPB pairs in one cluster and across clusters (two mesh
    capacities), at two source residues, with two blocks (first and later block costs), and a
    one-block neighbour of each."""
    c = M100.tpbs_per_cluster
    pairs = [(0, 1), (2, 5), (1, 0), (c, c + 3), (0, c), (c + 1, 2), (3, 2 * c % M100.num_tpbs)]
    sweep = M100.hbsm_bank_width * M100.hbsm_banks
    # (one levels tuple per shape, as a decoded program has: the key names levels by identity)
    src, dst = hb(0, 0, DType.I8, (64, 30), (64, 1)), hb(0, 0, DType.I8, (64, 30))
    out = []
    for k, (t, u) in enumerate(pairs):
        for base, blocks in ((200, 2), (200 + sweep * (k + 1), 2), (232, 1)):
            out.append(Copy(t, replace(src, tpb=t, base=base),
                            replace(dst, tpb=u, base=4096 + 64 * (blocks - 1)),
                            sync=Sync(blocks=blocks)))
    return out


def test_remote_copies_shared_by_geometry_equal_their_builds(monkeypatch):
    """A remote copy's cost moved from another TPB pair (``timing.moved_remote``, derived by
    ``cost_batch``) equals the cost built and derived for its own instruction: every field, the
    dicts' orders, the engine columns; whole timing runs the same."""
    from m100.sim import timing
    from m100.sim.timing import CostModel

    shared = _remote_copies()
    built = copy.deepcopy(shared)
    a, _ = run(shared, machine=M100, mode="timing")
    monkeypatch.setattr(timing, "SHARED", False)
    b, _ = run(built, machine=M100, mode="timing")
    assert a.ok and b.ok and a.stats == b.stats
    assert [(r.start, r.end, r.blocks) for r in a.records] == \
        [(r.start, r.end, r.blocks) for r in b.records]
    model = CostModel(M100)
    ca, cb = _costs(shared), _costs(built)
    assert len(ca) == len(cb)
    n_moved = 0
    for inst, x, y in zip([i for i in shared for c in i.__dict__["_sim_costs"][1] if c],
                          ca, cb):
        n_moved += x.moved is not None
        z = model.cost(inst, 1 if x is inst.__dict__["_sim_costs"][1][1] else 0)
        for want in (y, z):  # the run's build and the definition
            for f in ("latency", "cycles", "macs", "peak_macs", "exclusive"):
                assert getattr(x, f) == getattr(want, f), f
            assert list(x.banks) == list(want.banks)
            assert all(x.banks[t].tobytes() == want.banks[t].tobytes() for t in x.banks)
            assert list(x.links.items()) == list(want.links.items())
            assert list(x.bytes.items()) == list(want.bytes.items())
        for f in FIELDS:
            assert getattr(x, f) == getattr(y, f), f
        for f in ARRAYS:
            assert getattr(x, f).tobytes() == getattr(y, f).tobytes(), f
    assert n_moved >= 8


def test_remote_copy_key_names_what_its_cost_depends_on():
    """Remote copies share a cost only with the same residues, types, levels and mesh capacity;
    a local copy or one from another TPB's HBSM never takes a remote key."""
    from m100.sim.timing import CostModel

    model = CostModel(M100)
    c = M100.tpbs_per_cluster
    sweep = M100.hbsm_bank_width * M100.hbsm_banks
    src, dst = hb(0, 96, DType.I8, (64, 30), (64, 1)), hb(1, 4096, DType.I8, (64, 30))
    c0 = model.cost(Copy(0, src, dst), 0)
    same = Copy(c + 1, replace(src, tpb=c + 1, base=96 + sweep),
                replace(dst, tpb=c + 2, base=4096 + 2 * sweep))
    got = model.cost(same, 0)
    assert got.moved is not None and got.moved[0] is c0 and list(got.banks) == [c + 1, c + 2]
    assert list(got.links) == [("mesh", c + 1, c + 2)]
    assert list(got.bytes) == [f"hbsm{c + 1}", f"hbsm{c + 2}", f"mesh.{c + 1}.{c + 2}"]
    t, u = c + 1, c + 2
    # another source residue, destination residue, element type, levels; another cluster
    for other in (Copy(t, replace(src, tpb=t, base=97), replace(dst, tpb=u)),
                  Copy(t, replace(src, tpb=t), replace(dst, tpb=u, base=4097)),
                  Copy(t, replace(src, tpb=t), replace(dst, tpb=u, dtype=DType.I16)),
                  Copy(t, replace(src, tpb=t), hb(u, 4096, DType.I8, (30, 64))),
                  Copy(1, replace(src, tpb=1), replace(dst, tpb=u))):
        assert model.cost(other, 0).moved is None
    assert model.cost(Copy(c + 1, replace(src, tpb=c + 1), replace(dst, tpb=c + 2)),
                      1).moved is None  # (a later block: its own key)
    assert model.cost(Copy(c + 3, replace(src, tpb=c + 3), replace(dst, tpb=c)),
                      0).moved is not None
    assert model._remote_geometry(Copy(3, replace(src, tpb=3), replace(dst, tpb=3)), 0) is None
    assert model._remote_geometry(Copy(3, src, replace(dst, tpb=5)), 0) is None  # src not in 3


def test_remote_columns_moved_by_parts_equal_the_definition():
    """``cost_batch._remote_parts`` + two additions and a concatenation (how ``derive_batch``
    moves a remote copy's engine columns) give ``moved_remote_cols``' values (the definition,
    position by position); columns in another order, or without the mesh column last, are not
    split (the definition then). (A mutant of ``derive_batch`` that moves both parts by one
    TPB's shift fails ``test_remote_copies_shared_by_geometry_equal_their_builds``.)"""
    from m100.sim.cost_batch import _remote_parts, moved_remote_cols
    banks = M100.hbsm_banks
    rng = np.random.default_rng(3)
    links = {}

    def col(key):
        return links.setdefault(key, 10_000 + len(links))

    for _ in range(200):
        t0, t1, t, u = (int(x) for x in rng.choice(M100.num_tpbs, 4, replace=False))
        b0 = np.sort(rng.choice(banks, int(rng.integers(1, banks + 1)), replace=False))
        b1 = np.sort(rng.choice(banks, int(rng.integers(1, banks + 1)), replace=False))
        bc = np.concatenate((t0 * banks + b0, t1 * banks + b1, [col(("mesh", t0, t1))]))
        parts = _remote_parts(bc, t0, t1, col(("mesh", t0, t1)), banks)
        assert parts is not False
        got = np.concatenate((parts[0] + (t - t0) * banks, parts[1] + (u - t1) * banks,
                              [col(("mesh", t, u))]))
        want = moved_remote_cols(bc, t0, t1, t, u, col, banks)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
        swapped = np.concatenate((t1 * banks + b1, t0 * banks + b0, [col(("mesh", t0, t1))]))
        assert _remote_parts(swapped, t0, t1, col(("mesh", t0, t1)), banks) is False
        assert _remote_parts(bc[:-1], t0, t1, col(("mesh", t0, t1)), banks) is False

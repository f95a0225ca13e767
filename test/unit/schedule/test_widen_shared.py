"""Int4 GEMVs widened with shared weight chunks in the whole plan (``widen_shared.py``, issue 13).

Oracles: the refinement's plan against a fresh build of the segments it returns, the plan before
it (kept only when shorter), and what may change (a GEMV's TPBs, column split, share, K
chunking). The widened and shared GEMVs' numerics are those of ``test_wshare.py`` (widen, then
share: the same configurations)."""

from dataclasses import replace

import numpy as np

from m100.passes.schedule import gemv_runs, placement, widen_shared
from m100.targets.m100.machine import get_machine
from m100.targets.m100.isa import Dma, Space
from m100.tools import driver

from .test_widen_gemvs import DIMS, _w4_chain, _w4_reference
from .test_wshare import _graph

M100 = get_machine("m100")


def _after_share(monkeypatch, dims=None):
    seen = []
    share = placement.share_gemv_chunks

    def spy(s, segs, tl, keep, *a, **k):
        out = share(s, segs, tl, keep, *a, **k)
        seen.append((s, out[0], out[1], keep))
        return out
    pools = []
    widen = placement.widen_gemvs

    def wspy(s, segs, tl, keep, pool):
        pools.append(pool)
        return widen(s, segs, tl, keep, pool)
    monkeypatch.setattr(placement, "share_gemv_chunks", spy)
    monkeypatch.setattr(placement, "widen_gemvs", wspy)
    placement.schedule(_graph(*([dims] if dims else [])), M100)
    return seen[-1], pools[-1]


def test_widened_share_kept_only_when_shorter_and_plan_is_a_fresh_build(monkeypatch):
    (s, segs, tl, keep), pool = _after_share(monkeypatch)
    s.budget = float("inf")  # (the trials are not skipped for a spent search budget)
    builds = []
    build = s.sched.build
    monkeypatch.setattr(s.sched, "build", lambda trial, *a, **k: builds.append(trial) or
                        build(trial, *a, **k))
    segs2, tl2 = widen_shared.widen_shared_gemvs(s, segs, tl, keep, pool)
    assert tl2.makespan <= tl.makespan
    assert build(segs2, keep=keep).makespan == tl2.makespan
    narrow = [si for si, st, op in gemv_runs.gemv_segments(s, segs)
              if "w4" in op.attrs and len(segs[si].stages[0].tpbs) < len(pool)]
    assert narrow and builds  # (this graph's GEMVs are on fewer TPBs than the pool)
    for a, b in zip(segs, segs2):
        if a != b:  # only where the GEMV runs and how its chunks go, and the plan got shorter
            sa, sb = a.stages[0], b.stages[0]
            assert replace(sb, tpbs=sa.tpbs, gc=sa.gc, bands=sa.bands, wshare=sa.wshare,
                           chunked=sa.chunked) == sa
            assert len(sb.tpbs) > len(sa.tpbs) and tl2.makespan < tl.makespan


def test_no_int4_gemv_no_build(monkeypatch):
    (s, segs, tl, keep), pool = _after_share(monkeypatch)
    # (both widening refinements find their GEMVs through gemv_runs.int4_gemvs_by_weight)
    monkeypatch.setattr(gemv_runs, "gemv_segments", lambda *a: [])
    monkeypatch.setattr(s.sched, "build", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    assert widen_shared.widen_shared_gemvs(s, segs, tl, keep, pool) == (segs, tl)


def test_widened_shared_program_matches_numpy_and_reads_every_int4_byte_once(monkeypatch):
    """The chain compiled with whatever the refinement keeps (on this chain, when written: both
    GEMVs widened and shared, 78.6 k -> 77.2 k predicted cycles) against numpy from the
    ``DequantizeLinear`` definition, every int4 weight element read from DDR by one DMA."""
    kept = []
    ref = placement.widen_shared_gemvs

    def spy(s, segs, tl, keep, pool):
        out = ref(s, segs, tl, keep, pool)
        kept.append(out[0] != segs)
        return out
    monkeypatch.setattr(placement, "widen_shared_gemvs", spy)
    cr = driver.compile(_w4_chain(), machine="m100")
    assert kept
    prog = cr.program
    dmas = [i for st in prog.streams.values() for i in st if isinstance(i, Dma)
            and i.src.space is Space.DDR]
    for i, (k, n) in enumerate(zip(DIMS, DIMS[1:])):
        sym = next(s for s in prog.symbols if s.name == f"q{i}")
        el = np.zeros(k * n, np.int64)
        for d in dmas:
            if sym.address <= d.src.base < sym.address + sym.nbytes:
                np.add.at(el, (d.src.base - sym.address) * 2 + d.src.offsets(), 1)
        assert el.min() == 1 and el.max() == 1
    rng = np.random.default_rng(3)
    feed = {"x": rng.standard_normal((1, DIMS[0])).astype(np.float16)}
    want = _w4_reference(rng, feed)
    got = driver.run(prog, feed, machine=cr.machine).outputs["y"].reshape(want.shape)
    d = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert np.all(d <= 4 * np.abs(np.spacing(want)) + 2e-3 * np.abs(want).max())

"""Causal attention bands cut by work (``StageCfg.wcut``, ``segment.work_cuts``) and the mask's
iotas resident (``Op.attrs["resident"]``, ``kinds/cvu``), issue 13.

A band of rows ``[a, e)`` of ``q @ kT -> softmax(. + triu(-1e4, 1)) -> @ v`` keeps the score columns
``[0, e)`` (``causal.py``), so the bands of a pipeline are cut at whole TCU row tiles into
near-equal work instead of equal rows. Oracles: exhaustive enumeration of every cut (the largest
band's work), numpy written from the ONNX definitions and the program compiled without the skip
(``causal.ENABLED = False``: every column, equal bands): the same bits.
"""

from __future__ import annotations

import itertools
import os
import sys

import numpy as np
import pytest

from m100.passes.schedule.search import Search
from m100.passes.schedule.segment import work_cuts
from m100.targets.m100.isa import CvuPipeline, Dma
from m100.tools import driver

sys.path.insert(0, os.path.dirname(__file__))

from test_causal_skip import HD, _attention, _feed, _oracle  # noqa: E402


def _work(cuts, cols, k):
    return [(e - a) * min(cols, e - 1 + k) for a, e in zip(cuts, cuts[1:])]


@pytest.mark.parametrize("rows,bands,cols,k,align", [
    (256, 3, 256, 1, 32), (256, 4, 256, 1, 32), (320, 5, 320, 1, 32), (200, 3, 200, 1, 32),
    (256, 4, 256, 3, 32), (256, 2, 100, 1, 32), (256, 8, 256, 1, 32), (96, 1, 96, 1, 32)])
def test_work_cuts_minimize_the_largest_band(rows, bands, cols, k, align):
    """Whole row tiles, contiguous, ending at ``rows``; the largest band's work (padded rows x
    kept columns) is the least of every way to cut the tiles into ``bands`` bands."""
    cuts = work_cuts(rows, bands, cols, k, align)
    n = -(-rows // align)
    assert len(cuts) == bands + 1 and cuts[0] == 0 and cuts[-1] == rows
    assert all(a < e for a, e in zip(cuts, cuts[1:]))
    assert all(c % align == 0 for c in cuts[:-1])
    # padded rows: a band of e - a rows computes whole tiles (the last one may be partial)
    pad = lambda cs: [(-(-(e - a) // align) * align, e) for a, e in zip(cs, cs[1:])]  # noqa
    got = max(r * min(cols, e - 1 + k) for r, e in pad(cuts))
    best = min(max(r * min(cols, e - 1 + k) for r, e in pad(
        (0,) + tuple(min(rows, t * align) for t in inner) + (rows,)))
        for inner in itertools.combinations(range(1, n), bands - 1))
    assert got == best


def test_work_cuts_give_late_bands_fewer_rows():
    cuts = work_cuts(1024, 12, 1024, 1, 32)
    sizes = [e - a for a, e in zip(cuts, cuts[1:])]
    assert sizes[0] > 86 > sizes[-1]  # equal rows would be ~86 each
    w = _work(cuts, 1024, 1)
    eq = [round(1024 * b / 12) for b in range(13)]
    # equal rows padded to whole tiles (86 -> 96): the largest band does 1.4x the work
    w_eq = [-(-(e - a) // 32) * 32 * e for a, e in zip(eq, eq[1:])]
    assert max(w) * 1.4 < max(w_eq)


def _force_pipeline(monkeypatch, bands: int, alloc=(2, 2, 2)) -> None:
    """The pipeline search returns its start with ``alloc`` TPBs per stage and ``bands`` bands
    (no local-search moves)."""
    def start(self, ops):
        n = len(ops)
        return (list(alloc[:n]), [False] * n, [1] * n, bands), bands

    monkeypatch.setattr(Search, "_pipe_start", start)
    monkeypatch.setattr(Search, "_pipe_move", lambda self, *a: None)


def _compile(model, on: bool, monkeypatch, work: bool = True):
    from m100.passes.schedule import search
    from m100.passes.schedule.from_ir import causal
    monkeypatch.setattr(causal, "ENABLED", on)
    monkeypatch.setattr(search, "WORK_BANDS", work)
    return driver.compile(model, machine="m100", strategy="pipeline").program


def _softmax_rows(prog):
    return sorted(i.out_shape[0] for _, i in prog.instructions() if isinstance(i, CvuPipeline))


@pytest.mark.parametrize("T,bands", [(256, 4), (1024, 4)])
def test_work_bands_give_the_bits_of_every_column(T, bands, monkeypatch):
    """A causal attention pipeline of ``bands`` bands, cut by work (the first band the most
    rows): the bits of the same bands computing every column (``causal.clips`` off: the same
    tiles), numpy's values. At 1024 tokens the softmax's tile cuts the large first bands into
    smaller pieces than QK's: the pieces keep the columns of their band's last row
    (``causal.clips``, per band).

    At 1024 tokens the scores are all 0 (``kT = 0``) and ``v`` small integers, so that every f32
    sum is exact whatever its order: the interpreter's ``np.matmul`` and ``np.sum`` group the
    terms of a row by its length, and a row of 512 kept columns is summed in another order
    than the same terms followed by 512 zeros (1-2 f16 ulps of 32 k elements differ on random
    data, with equal bands too: a property of the skip's PV / softmax sums, docs/llm.md)."""
    from m100.passes.schedule import causal as sched_causal
    _force_pipeline(monkeypatch, bands)
    rng = np.random.default_rng(7)
    mask = np.triu(np.full((T, T), -1e4), 1).astype(np.float16)
    model, feed = _attention(mask, T), _feed(T, rng)
    if T > 256:
        feed["kT"][:] = 0
        feed["v"] = rng.integers(-3, 4, (T, HD)).astype(np.float16)
    outs, progs = {}, {}
    real = sched_causal.clips
    for clip in (False, True):
        monkeypatch.setattr(sched_causal, "clips", real if clip else lambda *a: {})
        progs[clip] = prog = _compile(model, True, monkeypatch)
        res = driver.run(prog, feed)
        assert res.ok and not res.reports
        outs[clip] = res.outputs["o"].reshape(T, HD)
    np.testing.assert_array_equal(outs[True].view(np.uint16), outs[False].view(np.uint16))
    np.testing.assert_allclose(outs[True].astype(np.float64), _oracle(feed, mask), rtol=2e-3,
                               atol=2e-3)
    # the bands by work (whole 32-row tiles, the first band the largest): every softmax piece
    # keeps the columns of its band's last row, all of them without the clip
    cuts = work_cuts(T, bands, T, 1, 32)
    assert {i.out_shape[-1] for _, i in progs[False].instructions()
            if isinstance(i, CvuPipeline)} == {T}
    widths = {}  # rows of the softmax pieces, by their score columns
    for _, i in progs[True].instructions():
        if isinstance(i, CvuPipeline):
            widths.setdefault(i.out_shape[-1], []).append(i.out_shape[0])
    assert sorted(widths) == [min(T, e) for e in cuts[1:]]
    assert all(sum(widths[min(T, e)]) == e - a for a, e in zip(cuts, cuts[1:]))
    if T == 1024:  # pieces smaller than their band (the per-band clip was taken)
        assert any(len(v) > 1 for v in widths.values())


def test_equal_bands_without_work_cut(monkeypatch):
    """The guard of the test above: with ``search.WORK_BANDS = False`` the bands keep equal rows
    (each piece keeps the columns of its own last row)."""
    _force_pipeline(monkeypatch, 4)
    T = 256
    mask = np.triu(np.full((T, T), -1e4), 1).astype(np.float16)
    prog = _compile(_attention(mask, T), True, monkeypatch, work=False)
    assert _softmax_rows(prog) == [64, 64, 64, 64]


def test_iotas_are_loaded_once_per_tpb(monkeypatch):
    """The causal mask's two iotas are resident: one load (or DRB broadcast) per TPB of the
    softmax, not two DMAs per piece; the bits are those of the program of every column."""
    _force_pipeline(monkeypatch, 8)
    T = 256
    rng = np.random.default_rng(3)
    mask = np.triu(np.full((T, T), -1e4), 1).astype(np.float16)
    model, feed = _attention(mask, T), _feed(T, rng)
    prog = _compile(model, True, monkeypatch)
    segs = [(s.space, s.address, s.address + len(s.data)) for s in prog.segments]
    assert segs  # the iotas are the program's only constants
    iota_dmas = [i for _, i in prog.instructions() if isinstance(i, Dma) and any(
        sp == i.src.space and a <= i.src.base < e for sp, a, e in segs)]
    pieces = [i for _, i in prog.instructions() if isinstance(i, CvuPipeline)]
    assert len(pieces) == 8
    # 2 softmax TPBs (alloc 2, 2, 2): each iota once to them (a broadcast or one load per TPB)
    assert 2 <= len(iota_dmas) <= 4 < 2 * len(pieces)
    res = driver.run(prog, feed)
    assert res.ok and not res.reports
    on = res.outputs["o"].reshape(T, HD)
    np.testing.assert_allclose(on.astype(np.float64), _oracle(feed, mask), rtol=2e-3, atol=2e-3)
    off = driver.run(_compile(model, False, monkeypatch), feed)
    np.testing.assert_array_equal(on.view(np.uint16), off.outputs["o"].reshape(T, HD).view(
        np.uint16))


def _attention_quantized(mask: np.ndarray, T: int, scale: float):
    """The causal attention of :func:`_attention` with its output quantized to int8 as the next
    op (the W8A8 prefill heads' ``QuantizeLinear``, ``llm.PREFILL_O_QUANT = "heads"``); ``o``
    is an output too."""
    from onnx import TensorProto as TP
    from onnx import helper, numpy_helper as nph
    m = _attention(mask, T)
    g = m.graph
    g.initializer.extend([nph.from_array(np.asarray(scale, np.float16), "qs"),
                          nph.from_array(np.asarray(0, np.int8), "qz")])
    g.node.append(helper.make_node("QuantizeLinear", ["o", "qs", "qz"], ["oq"]))
    g.output.append(helper.make_tensor_value_info("oq", TP.INT8, [T, HD]))
    return m


def test_band_order_takes_a_stage_after_the_chain(monkeypatch):
    """A pipeline of the causal chain and the quantize of its output (4 stages of 2 TPBs, 4
    work-cut bands): the causal band order (``causal.band_order``: band b computes the rows of
    band ``order[b]``, odd rounds reversed) is taken with the quantize stage in the segment
    (session 18; before, any stage outside the chain turned it off). The quantize's bits are
    numpy's ``QuantizeLinear`` of the program's own ``o`` (round half to even, saturated), ``o``
    is numpy's attention, and both are the bits of the same pipeline without the order. The
    quantize's bands are cut like the chain's (``search.work_cut``): with equal rows its band 2
    (rows 192-255) was built before PV's band 3 (rows 192-223 by work) and read them unwritten."""
    from m100.passes.schedule import causal as sched_causal
    _force_pipeline(monkeypatch, 4, alloc=(2, 2, 2, 2))
    T, scale = 256, 0.02
    rng = np.random.default_rng(11)
    mask = np.triu(np.full((T, T), -1e4), 1).astype(np.float16)
    model, feed = _attention_quantized(mask, T, scale), _feed(T, rng)
    real = sched_causal.band_order
    orders = []

    def spy(seg, clip):
        out = real(seg, clip)
        if len(seg.stages) == 4:
            orders.append(out)
        return out
    outs = {}
    for on in (True, False):
        monkeypatch.setattr(sched_causal, "band_order", spy if on else lambda *a: None)
        res = driver.run(_compile(model, True, monkeypatch), feed)
        assert res.ok and not res.reports  # (races checked)
        outs[on] = res.outputs
    assert orders and all(o == [0, 1, 3, 2] for o in orders)
    o = outs[True]["o"].reshape(T, HD)
    np.testing.assert_allclose(o.astype(np.float64), _oracle(feed, mask), rtol=2e-3, atol=2e-3)
    # (a quotient within an ulp of .5 may round either way: o / scale in f16 or f32)
    want = np.clip(np.rint(o.astype(np.float64) / np.float16(scale)), -128, 127)
    got = outs[True]["oq"].reshape(T, HD).astype(np.int64)
    assert np.abs(got - want).max() <= 1 and np.mean(got != want) < 0.01
    for k in ("o", "oq"):
        np.testing.assert_array_equal(outs[True][k], outs[False][k])

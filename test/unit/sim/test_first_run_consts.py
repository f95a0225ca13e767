"""Values a first run derives once per geometry or mask (session 33), each against the derivation
it replaced, written out here as the reference: a copy's view geometry (``semantics_move._view_geo``)
against a probe walk's own properties, and a broadcast's or DMA's TPBs (``semantics_move._tpbs``)
against ``tpbs_of``."""

import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

from m100.sim import semantics_move as sm
from m100.sim import twu
from m100.targets.m100.isa import DType, Level, Space, Walk, tpbs_of

level = st.tuples(st.integers(0, 40), st.sampled_from([0, 1, 2, 3, -1, -2, 5, 8, 17, 64]),
                  st.integers(1, 6))


def _levels(spec):
    lv = []
    for i, s, n in spec:
        if s < 0:
            i += -s * (n - 1)
        lv.append(Level(i, s, i + s * (n - 1)) if s else Level(i, 0, n))
    return tuple(lv)


def _view_geo_reference(levels, sz):
    """The session-32 ``_view_geo``: a probe walk's ``num_elements`` and ``injective``."""
    lo, hi, counts, steps = twu._box(levels)
    probe = Walk(Space.DDR, 0, 0, DType.I8, levels)
    return (probe.num_elements, probe.injective, lo * sz, (hi + 1) * sz,
            sum(lv.initial for lv in levels) * sz, counts, tuple(st * sz for st in steps))


@settings(max_examples=200, deadline=None)
@given(st.lists(level, min_size=1, max_size=5), st.sampled_from([1, 2, 4]))
@example([(0, 2, 3), (1, 0, 2)], 4)  # a repeat level: not injective
@example([(0, 1, 4), (0, 2, 3)], 4)  # overlapping strides: not injective
@example([(0, 4, 3), (0, 1, 4)], 1)  # a mixed-radix box: injective
def test_view_geo_equals_the_probe_walk(spec, sz):
    levels = _levels(spec)
    assert sm._view_geo(levels, sz) == _view_geo_reference(levels, sz)


def test_view_geo_sees_both_answers():
    """The random levels above reach both ``injective`` answers (not a vacuous comparison)."""
    seen = {sm._view_geo(_levels(s), 4)[1] for s in ([(0, 1, 4), (0, 4, 3)], [(0, 1, 4), (0, 2, 3)])}
    assert seen == {True, False}


def test_tpbs_equals_tpbs_of():
    rng = random.Random(33)
    masks = [0, 1, 1 << 55, (1 << 56) - 1] + [rng.getrandbits(56) for _ in range(300)]
    sm._TPBS.clear()
    for m in masks + masks:  # made, then kept
        assert sm._tpbs(m) == tuple(tpbs_of(m))
    assert set(sm._TPBS) == set(masks)


def test_broadcast_and_dma_writes_list_every_tpb_of_the_mask():
    """``writes`` of a broadcast and of a DMA with a mask: one access per TPB of the mask, in
    ``tpbs_of``'s order, all of the same chunk (the lists made before ``_tpbs``)."""
    from m100.sim.semantics import make_exec
    from m100.targets.m100.isa import Broadcast, Dma, Sync

    mask = 0b1011_0010_0000_1101
    src = Walk(Space.HBSM, 3, 0, DType.F32, (Level(0, 1, 63),))
    dst = Walk(Space.HBSM, 0, 256, DType.F32, (Level(0, 1, 63),))
    sync = Sync(blocks=2)
    for inst in (Broadcast(sync=sync, tpb=3, src=src, dst=dst, tpb_mask=mask),
                 Dma(sync=sync, engine=0, src=Walk(Space.DDR, 0, 0, DType.F32,
                                                   (Level(0, 1, 63),)),
                     dst=dst, tpb_mask=mask)):
        ex = make_exec(inst, None)
        for b in range(2):
            got = ex.writes(b)
            chunk = sm._chunk(dst, dst.tpb, 2, b)
            assert [a.tpb for a in got] == tpbs_of(mask)
            assert all(a.walk == chunk.walk and a.offsets is None for a in got)

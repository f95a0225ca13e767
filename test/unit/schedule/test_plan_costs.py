"""What the plan charges beyond each instruction's own cycles (issue 9, session 10).

* The sync update a CCB DMA sends at its end reaches its consumer's counter after
  ``remote_update_latency_inter`` cycles (the interpreter: ``sim/engine.py`` ``_update_latency``;
  the CCB is no TPB's cluster). A DMA waits on its producer's TPB (a local update) and a DMA after
  one of its own engine waits for nothing. Oracle: the machine's latency field, added by hand.
* The tiler charges the weight DMAs a tiling implies: a streamed weight is loaded again for every
  row tile. Oracle: the transfers counted from the plan's tasks, against the instruction count.
"""

from __future__ import annotations

import pytest

from m100.passes.schedule import timeline as T
from m100.passes.schedule.cost import CostModel
from m100.passes.schedule.examples import GraphBuilder
from m100.passes.schedule.partition import tile_piece
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")
LAT = M100.remote_update_latency_inter


def _builder():
    b = GraphBuilder()
    x = b.input((1, 16, 16, 32))
    g = b.output(b.conv(x, 32, 3))
    s = T.Scheduler(CostModel(M100), g)
    segs = [T.SegmentCfg((T.StageCfg(g.ops[0].name, (0, 1)),))]
    bld = T.PlanBuilder(s, T.Plan(segments=segs))
    bld.piece = None  # tasks outside a piece
    return bld


def _dma(bld, deps=(), nb=4096.0):
    return bld.add(kind="dma-in", unit="dma", tpb=-1, op="w", tensor="w", nbytes=nb,
                   cycles=bld.cm.dma_cycles(nb, "ddr"), deps=list(deps), dst_tpbs=(0,),
                   src="ddr", dst="hbsm", role="w")


def _compute(bld, tpb, deps=(), cycles=100.0):
    return bld.add(kind="compute", unit="tcu", tpb=tpb, op="c", tensor="y", nbytes=0.0,
                   cycles=cycles, deps=list(deps))


def test_dma_to_tpb_unit_waits_for_the_sync_update():
    bld = _builder()
    d = _dma(bld)
    c = _compute(bld, 0, [d.id])
    assert c.start == pytest.approx(d.end + LAT)
    assert c.crit_pred == d.id


def test_tpb_unit_to_dma_is_a_local_update():
    bld = _builder()
    c = _compute(bld, 0)
    d = _dma(bld, [c.id])
    assert d.start == pytest.approx(c.end)


def test_dma_after_dma_same_engine_free_other_engine_pays_the_latency():
    bld = _builder()
    a = _dma(bld)
    # the same engine can start it at a's end: no wait (queue order)
    b = _dma(bld, [a.id])
    assert b.engine == a.engine and b.start == pytest.approx(a.end)
    # x holds one engine until just after a ends on the other, y then holds a's engine: a
    # consumer of a runs on x's engine, after the sync update from a's
    bld = _builder()
    x = _dma(bld, nb=6144.0)
    a = _dma(bld)
    assert a.engine != x.engine and a.end < x.end < a.end + LAT
    y = _dma(bld, nb=4 * 1024 * 1024.0)
    assert y.engine == a.engine
    c = _dma(bld, [a.id])
    assert c.engine == x.engine and c.start == pytest.approx(a.end + LAT)


def _late_conv():
    """A ResNet layer-4 conv (3x3, 512 -> 512 channels on 7 x 7): 7 image rows of 7 pixels."""
    b = GraphBuilder()
    x = b.input((1, 7, 7, 512))
    g = b.output(b.conv(x, 512, 3))
    return g, g.ops[0]


def test_tiler_charges_streamed_weights_per_row_tile():
    """On the 8-row granule a 1-row tile (7 pixels -> 8 rows) computes less than the 7-row one (49
    pixels -> 2 whole 32-row tiles) but loads the weight chunk once per row tile. Alone (one
    weight stream) the tiler takes the cheaper compute; with the 56 streams of a K split over
    all TPBs (8 column parts x 7 K parts) it keeps the rows whole."""
    g, op = _late_conv()
    cm = CostModel(M100)
    alone = tile_piece(cm, g, op, 7, 64, kparts=7)
    shared = tile_piece(cm, g, op, 7, 64, kparts=7, wstreams=56)
    assert alone.tr < 7 and alone.tk < alone.k  # streamed, several row tiles
    assert shared.tr == 7
    assert alone.cycles < shared.cycles  # the compute alone prefers the small rows
    # the weight bytes each loads per part: one chunk set per row tile
    def wbytes(p):
        chunks = -(-p.k // p.tk) // 7  # a part's chunks (k_part_range deals them evenly here)
        rows_tiles = -(-p.rows // p.tr)
        return rows_tiles * chunks * p.tk * p.tc * 4
    assert wbytes(alone) >= 2 * wbytes(shared)


def test_scheduler_passes_the_stage_weight_streams():
    """``Scheduler.stage_plan`` gives a one-stage segment ``gc * ks`` streams (its chunks are
    broadcast to the TPB rows) and keeps the rows whole on the whole machine."""
    g, op = _late_conv()
    s = T.Scheduler(CostModel(M100), g)
    seg = T.SegmentCfg((T.StageCfg(op.name, tuple(range(56)), gc=8, bands=1, ks=7),))
    assert s.stage_plan(seg, seg.stages[0]).tr == 7

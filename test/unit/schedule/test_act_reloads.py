"""The tiler and the activation a one-stage contraction moves (``partition.tile_piece``'s
``astreams`` and ``once``; ``timeline.ACT_RELOADS`` / ``ONE_SLOT``; docs/schedule.md "The
tiler and the activation").

Oracles: the bytes a tiling loads, counted here from its loop structure (a K-chunked activation
is loaded again for every column tile of a piece, a whole-K one once per row tile), and the
buffers a piece fills, from the shapes and the machine's HBSM alignment.
"""

from __future__ import annotations

from m100.passes.schedule.cost import CostModel
from m100.passes.schedule.examples import GraphBuilder
from m100.passes.schedule.partition import tile_piece
from m100.targets.m100.machine import get_machine

CM = CostModel(get_machine("m100"))


def _matmul(m: int, k: int, n: int, dtype: str = "i8", epilogue: tuple[str, ...] = ()):
    b = GraphBuilder(dtype)
    x = b.input((m, k))
    g = b.output(b.matmul(x, n, epilogue=epilogue))
    return g, g.ops[0]


def _act_bytes(p, ab: int) -> int:
    """Activation bytes a piece of tiling ``p`` loads: every row tile, and per row tile each K
    chunk once per column tile (all of K once when K is whole)."""
    nr, nc, nk = -(-p.rows // p.tr), -(-p.cols // p.tc), -(-p.k // p.tk)
    return nr * (nc * nk if p.tk < p.k else 1) * p.tr * p.tk * ab


def test_tiler_counts_activation_reloads():
    """A 64 x 586 piece of an int8 [512, 4096] x [4096, 2344] GEMM (the 8 TPB rows of a
    one-stage segment share the engines): counting only the weight DMAs the tiler takes two
    column tiles of 320 (the activation's K chunks loaded twice); with the activation's DMAs
    counted it takes one column tile of the same compute cycles and loads the activation once."""
    g, op = _matmul(512, 4096, 2344)
    alone = tile_piece(CM, g, op, 64, 586, chunked=True, wstreams=4)
    counted = tile_piece(CM, g, op, 64, 586, chunked=True, wstreams=4, astreams=8)
    assert alone.tc < alone.cols and alone.tk < alone.k  # reloads: the case the test is about
    assert counted.cycles == alone.cycles
    assert _act_bytes(counted, 1) == 64 * 4096  # each activation byte once
    assert _act_bytes(alone, 1) >= 2 * _act_bytes(counted, 1)


def test_once_filled_buffers_hold_one_slot_and_keep_the_tiling():
    """``once`` (one piece per TPB): the tiling is the one chosen without it; the footprint the
    plan holds drops by exactly one slot of each buffer the piece fills once -- the output (and
    its f32 accumulator) of a one-tile piece, the activation of a one-row-tile whole-K piece --
    and nothing else."""
    align = CM.align
    # one tile (128 x 586, K in chunks): the i32 accumulator once instead of twice
    g, op = _matmul(1024, 4096, 4102)
    two = tile_piece(CM, g, op, 128, 586, chunked=True, wstreams=7)
    one = tile_piece(CM, g, op, 128, 586, chunked=True, wstreams=7, once=True)
    assert (one.tr, one.tc, one.tk) == (two.tr, two.tc, two.tk) == (128, 586, one.tk)
    assert one.tk < one.k
    assert two.footprint - one.footprint == align(128 * 586 * 4)
    # whole K (a requantized result: K is not chunked), several column tiles (147 rows of 4096
    # int8 columns read by every column tile): the activation once instead of twice, the
    # output tiles still two
    g, op = _matmul(1029, 4096, 11008, epilogue=("requant",))
    two = tile_piece(CM, g, op, 147, 1376, wstreams=8)
    one = tile_piece(CM, g, op, 147, 1376, wstreams=8, once=True)
    assert (one.tr, one.tc, one.tk) == (two.tr, two.tc, two.tk)
    assert one.tr == 147 and one.tk == one.k and one.tc < one.cols
    assert two.footprint - one.footprint == align(147 * 4096)
    slots = {b.role: b.slots for b in one.buffers}
    assert slots["act"] == 1 and slots["out"] == 2 and slots["weight"] == 2

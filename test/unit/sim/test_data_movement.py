"""DTDU (copy/transpose/pad/fill/broadcast), CSU routines and CCB DMA vs numpy oracles."""

import numpy as np
import pytest

from m100.sim.testing import hb, run
from m100.targets.m100 import numerics
from m100.targets.m100.isa import (Broadcast, Copy, CsuCall, DType, Dma, Fill, Level, Routine,
                                   Space, Sync, Walk, mask_of)


def test_copy_transpose_via_walk(rng):
    x = rng.integers(-128, 128, (6, 10))
    src = hb(0, 0, DType.I8, (10, 6), strides=(1, 10))  # read column-major = the transpose
    dst = hb(0, 1024, DType.I8, (10, 6))
    res, (y,) = run([Copy(0, src, dst, sync=Sync(blocks=5))], [(hb(0, 0, DType.I8, (6, 10)), x)], [dst])
    assert res.ok
    assert np.array_equal(y.reshape(10, 6), x.T)


def test_copy_pad_via_fill_and_offset_walk(rng):
    x = rng.integers(-128, 128, (4, 5))
    big = hb(0, 1024, DType.I8, (6, 7))
    inner = hb(0, 1024, DType.I8, (4, 5), strides=(7, 1), offset=8)  # rows 1..4, cols 1..5
    res, (y,) = run([Fill(0, big, -1.0), Copy(0, hb(0, 0, DType.I8, (4, 5)), inner)],
                    [(hb(0, 0, DType.I8, (4, 5)), x)], [big])
    assert res.ok
    assert np.array_equal(y.reshape(6, 7), np.pad(x, 1, constant_values=-1))


@pytest.mark.parametrize("src_t,dst_t", [(DType.F32, DType.I8), (DType.F32, DType.BF16),
                                         (DType.I32, DType.I8), (DType.I8, DType.F16),
                                         (DType.F32, DType.F16), (DType.F32, DType.I4)])
def test_copy_converts(rng, src_t, dst_t):
    x = rng.standard_normal(64) * 300 if src_t.is_float else rng.integers(-1000, 1000, 64)
    if src_t is DType.I8:
        x = rng.integers(-128, 128, 64)
    x[:4] = [2.5, -2.5, 3.5, 0.5] if src_t.is_float else x[:4]
    src = hb(0, 0, src_t, (64,))
    dst = hb(0, 4096, dst_t, (64,))
    res, (y, xs) = run([Copy(0, src, dst)], [(src, x)], [dst, src])
    xs = xs.astype(np.float64)
    if dst_t.is_int:
        lo, hi = {DType.I8: (-128, 127), DType.I4: (-8, 7)}[dst_t]
        want = np.clip(np.round(xs), lo, hi)  # np.round is half-to-even
        assert np.array_equal(y.astype(np.float64), want)
    elif dst_t is DType.F16:
        assert np.array_equal(y, xs.astype(np.float32).astype(np.float16))
    else:
        # bf16: round to nearest even on the float32 bit pattern (oracle with Python ints)
        bits = xs.astype(np.float32).view(np.uint32).astype(np.int64)
        r = [(int(b) + 0x7FFF + ((int(b) >> 16) & 1)) >> 16 for b in bits]
        want = (np.array(r, dtype=np.uint32) << 16).view(np.float32)
        assert np.array_equal(y.astype(np.float32), want)


def test_fill_types():
    w = hb(0, 0, DType.I8, (8,))
    res, (y,) = run([Fill(0, w, 300.7)], [], [w])
    assert np.array_equal(y, np.full(8, 127))
    w = hb(0, 64, DType.BF16, (4,))
    res, (y,) = run([Fill(0, w, 1.00390625)], [], [w])  # 1 + 2^-8: a tie, rounds to even (1.0)
    assert np.array_equal(y, np.ones(4, np.float32))


def test_broadcast_to_two_tpbs(rng):
    x = rng.integers(-128, 128, 40)
    src, dst = hb(0, 0, DType.I8, (40,)), hb(0, 512, DType.I8, (40,))
    res, (y0, y1) = run([Broadcast(0, src, dst, mask_of(0, 1), sync=Sync(blocks=4))], [(src, x)],
                        [dst, hb(1, 512, DType.I8, (40,))])
    assert res.ok
    assert np.array_equal(y0, x) and np.array_equal(y1, x)


def test_remote_copy(rng):
    x = rng.standard_normal(16).astype(np.float32)
    src, dst = hb(0, 0, DType.F32, (16,)), hb(1, 256, DType.F32, (16,))
    res, (y,) = run([Copy(0, src, dst)], [(src, x)], [dst])
    assert np.array_equal(y, x)


def test_dma_ddr_to_hbsm_broadcast_and_back(rng):
    x = rng.integers(-128, 128, (8, 16))
    ddr = Walk.strided(Space.DDR, 0, 1 << 28, DType.I8, (8, 16))
    dst = hb(0, 0, DType.I8, (8, 16))
    back = Walk.strided(Space.SRAM, 0, 4096, DType.I8, (16, 8), strides=(1, 16))
    insts = [Dma(0, ddr, hb(0, 0, DType.I8, (8, 16)), tpb_mask=mask_of(0, 1), sync=Sync(blocks=2))]
    res, (h0, h1) = run(insts, [(ddr, x)], [dst, hb(1, 0, DType.I8, (8, 16))])
    assert res.ok and np.array_equal(h0, x.reshape(-1)) and np.array_equal(h1, x.reshape(-1))
    # HBSM -> SRAM with a transposing walk on the SRAM side
    res, (s,) = run([Dma(1, dst, back)], [(dst, x)], [Walk.strided(Space.SRAM, 0, 4096, DType.I8,
                                                                   (8 * 16,))])
    # the k-th element of dst goes to the k-th beat of back: back beat k = (k % 8) * 16 + k // 8
    k = np.arange(128)
    assert np.array_equal(s[(k % 8) * 16 + k // 8], x.reshape(-1))


def _csu(routine, ops, params):
    return CsuCall(0, routine, tuple(ops), tuple(params))


def test_csu_gather(rng):
    V, D, N = 10, 6, 7
    table = rng.standard_normal((V, D)).astype(np.float32)
    idx = rng.integers(0, V, N)
    T, I, O = hb(0, 0, DType.F32, (V, D)), hb(0, 1024, DType.I32, (N,)), hb(0, 2048, DType.F32, (N, D))
    res, (o,) = run([_csu(Routine.GATHER, (T, I, O), (V, D, N))], [(T, table), (I, idx)], [O])
    assert res.ok and np.array_equal(o.reshape(N, D), table[idx])


def test_csu_gather_out_of_range_is_reported(rng):
    T, I, O = hb(0, 0, DType.F32, (4, 2)), hb(0, 1024, DType.I32, (3,)), hb(0, 2048, DType.F32, (3, 2))
    res, _ = run([_csu(Routine.GATHER, (T, I, O), (4, 2, 3))], [(I, [0, 4, 1])], [])
    assert [r.kind for r in res.reports] == ["fault"]
    assert "index 4" in res.reports[0].message and "TPB 0" in res.reports[0].message


def test_csu_scatter_last_wins(rng):
    V, D, N = 8, 3, 5
    table = rng.integers(-100, 100, (V, D))
    upd = rng.integers(-100, 100, (N, D))
    idx = np.array([1, 5, 1, 7, 0])
    U, I, T = hb(0, 0, DType.I32, (N, D)), hb(0, 512, DType.I32, (N,)), hb(0, 1024, DType.I32, (V, D))
    res, (t,) = run([_csu(Routine.SCATTER, (U, I, T), (V, D, N))], [(U, upd), (I, idx), (T, table)], [T])
    want = table.copy()
    for i, j in enumerate(idx):
        want[j] = upd[i]
    assert res.ok and np.array_equal(t.reshape(V, D), want)


@pytest.mark.parametrize("largest", [1, 0])
def test_csu_topk(rng, largest):
    R, L, K = 3, 12, 4
    x = rng.integers(-5, 5, (R, L)).astype(np.float32)  # many ties: lower index first
    X, VV, II = hb(0, 0, DType.F32, (R, L)), hb(0, 512, DType.F32, (R, K)), hb(0, 1024, DType.I32, (R, K))
    res, (v, i) = run([_csu(Routine.TOPK, (X, VV, II), (R, L, K, largest))], [(X, x)], [VV, II])
    for r in range(R):
        order = sorted(range(L), key=lambda j: ((-x[r, j]) if largest else x[r, j], j))[:K]
        assert list(i.reshape(R, K)[r]) == order
        assert list(v.reshape(R, K)[r]) == [x[r, j] for j in order]


def test_csu_argmax_and_memcpy(rng):
    x = rng.integers(-3, 3, (5, 9))
    X, O = hb(0, 0, DType.I8, (5, 9)), hb(0, 256, DType.I32, (5,))
    res, (o,) = run([_csu(Routine.ARGMAX, (X, O), (5, 9))], [(X, x)], [O])
    assert list(o) == [int(np.flatnonzero(row == row.max())[0]) for row in x]
    ddr = Walk.strided(Space.DDR, 0, 4096, DType.F32, (45,))
    res, (d,) = run([_csu(Routine.MEMCPY, (X, ddr), ())], [(X, x)], [ddr])
    assert res.ok and np.array_equal(d, x.reshape(-1).astype(np.float32))


def test_i4_nibble_order():
    w = hb(0, 0, DType.I4, (5,))
    res, (y,) = run([Fill(0, w, 0.0)], [(hb(0, 0, DType.I8, (4,)), [0x21, 0x43, 0x65, 0x7F])], [w])
    assert list(y) == [0, 0, 0, 0, 0]
    from m100.sim import Simulator
    from m100.targets.m100.machine import get_machine
    sim = Simulator([], get_machine("tiny"))
    sim.memory.write_bytes(Space.HBSM, 0, 0, bytes([0x21, 0x43, 0xF5]))
    assert list(sim.read(hb(0, 0, DType.I4, (6,)))) == [1, 2, 3, 4, 5, -1]
    assert list(numerics.to_bytes(np.array([1, 2, 3, 4, 5, -1]), DType.I4)) == [0x21, 0x43, 0xF5]


def _walk_offsets_by_loops(levels):
    """The TWU definition, literally: nested counters from Initial by Step to Final."""
    out = []

    def rec(i, acc):
        if i == len(levels):
            out.append(acc)
            return
        ini, step, fin = levels[i]
        if step == 0:
            for _ in range(fin):
                rec(i + 1, acc + ini)
            return
        v = ini
        while True:
            rec(i + 1, acc + v)
            if v == fin:
                break
            v += step

    rec(0, 0)
    return out


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0, 1, 2, 5, 17]), st.integers(1, 5)),
                min_size=1, max_size=4),
       st.sampled_from([DType.I8, DType.I32, DType.F16, DType.I4]))
def test_copy_with_random_walks_gathers_per_twu_definition(levels, dt):
    lv = tuple(Level(i, s, i + s * (n - 1)) if s else Level(i, 0, n) for i, s, n in levels)
    src = Walk(Space.HBSM, 0, 64, dt, lv)
    n = src.num_elements
    lo, hi = -8, 7
    mem_vals = np.arange(4096) % (hi - lo + 1) + lo  # distinct-ish values in every element slot
    whole = hb(0, 64, dt, (4096,))
    dst = hb(0, 32768, dt, (n,))
    res, (y,) = run([Copy(0, src, dst)], [(whole, mem_vals)], [dst])
    assert res.ok
    offs = _walk_offsets_by_loops([(lv_.initial, lv_.step, lv_.final) for lv_ in lv])
    assert list(y) == [mem_vals[o] for o in offs]


@pytest.mark.parametrize("dt", [DType.I8, DType.F32, DType.I4])
def test_sparse_ddr_walks(rng, dt):
    """Walks spread over GiBs of DDR (page by page, not one dense range)."""
    vals = rng.integers(-8, 8, (3, 5))
    w = Walk(Space.DDR, 0, 1 << 20, dt, (Level(0, 1 << 28, 2 << 28), Level(0, 3, 12)))
    dst = hb(0, 0, dt, (15,))
    res, (back, y) = run([Dma(0, w, dst)], [(w, vals)], [w, dst], machine="m100")
    assert res.ok
    assert list(back) == list(vals.reshape(-1)) and list(y) == list(vals.reshape(-1))


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("last", [0, 1])
def test_csu_argmax_min_first_last(rng, largest, last):
    # ONNX ArgMax/ArgMin: the index of the first (select_last_index=0) or last (=1) extreme
    x = rng.integers(-3, 3, (6, 11))  # many ties
    X, O = hb(0, 0, DType.I8, (6, 11)), hb(0, 256, DType.I32, (6,))
    res, (o,) = run([_csu(Routine.ARGMAX, (X, O), (6, 11, largest, last))], [(X, x)], [O])
    assert res.ok
    for r, row in enumerate(x):
        ext = row.max() if largest else row.min()
        hits = [j for j in range(11) if row[j] == ext]
        assert o[r] == (hits[-1] if last else hits[0])

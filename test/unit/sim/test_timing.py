"""Cycle tests that are exact by construction (every number derived from the machine here)."""

import math

import pytest

from m100.sim.testing import hb, run
from m100.targets.m100.encoding import instruction_bits
from m100.targets.m100.isa import (Copy, CsuCall, DType, Dma, Fill, Level, MatMul, Monitor, Routine,
                                   Space, Sync, Update, Walk, mask_of)
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def dur(rec):
    return rec.end - rec.start


@pytest.mark.parametrize("dt,rate", [(DType.I8, "i8"), (DType.F16, "f16"), (DType.F32, "f32")])
def test_one_tcu_matmul(dt, rate):
    m = M100
    A = hb(0, 0, dt, (32, 32))
    B = hb(0, 8192, dt, (32, 64))
    C = hb(0, 65536, DType.I32 if dt is DType.I8 else DType.F32, (32, 64))
    res, _ = run([MatMul(0, A, B, C, 32, 64, 32)], machine=m, mode="timing")
    compute = 32 * 32 * 64 / m.tcu_macs_per_cycle(rate)
    if dt is DType.I8:
        assert compute == 32  # the paper's figure
    assert dur(res.records[0]) == compute + m.tcu_pipeline_latency
    # dispatch over the ICB: the encoded size at icb_bits_per_cycle
    bits = instruction_bits(res.records[0].inst, m)
    assert res.records[0].start == math.ceil(bits / m.icb_bits_per_cycle)
    u = res.stats["units"]["TPB0.TCU"]
    assert u["mac_util_busy_pct"] == pytest.approx(100 * compute / (compute + m.tcu_pipeline_latency))


def test_tcu_tiles_round_up():
    m = M100
    A, B, C = hb(0, 0, DType.I8, (33, 32)), hb(0, 8192, DType.I8, (32, 64)), hb(0, 65536, DType.I32, (33, 64))
    res, _ = run([MatMul(0, A, B, C, 33, 64, 32)], machine=m, mode="timing")
    assert dur(res.records[0]) == 2 * 32 + m.tcu_pipeline_latency  # 33 rows = two row tiles


def _rows_computed(m, rows: int) -> int:
    """The rows the TCU array works on, from its shape (paper: 8 x 64 MACs, 32-row tiles)."""
    if rows < m.tcu_tile_m:
        return 8 * math.ceil(rows / 8)
    return 32 * math.ceil(rows / 32)


@pytest.mark.parametrize("rows", [1, 2, 7, 8, 9, 16, 17, 31, 32, 33, 40])
def test_tcu_row_granule_of_a_w4_gemv(rows):
    """Below one natural tile (32 rows) the TCU computes whole row granules of 8 rows (lead
    decision, session 9: the paper's 8 x 64 array): a 1..8-row f16 x i4 matmul costs the 8-row
    count, 9..16 rows 16, ...; from 32 rows on whole 32-row tiles (33 rows = 64). K and N are
    whole tiles and the operand ports are below the compute here (weights 8 KB + scales 1 KB
    over a 64 B/cycle port: 144 cycles < 256)."""
    m = M100
    assert m.tcu_row_granule == 8 and m.tcu_tile_m == 32
    k, n, block = 128, 128, 32
    A = hb(0, 0, DType.F16, (rows, k))
    B = hb(0, 16384, DType.I4, (k, n))
    S = hb(0, 32768, DType.F16, (k // block, n))
    C = hb(0, 65536, DType.F16, (rows, n))
    res, _ = run([MatMul(0, A, B, C, rows, n, k, scale=S, block=block)], machine=m, mode="timing")
    compute = _rows_computed(m, rows) * k * n / m.tcu_macs_per_cycle("f16")
    assert dur(res.records[0]) == compute + m.tcu_pipeline_latency
    # a machine whose granule is the whole tile pads every row count below 32 to 32
    g32 = m.replace(tcu_row_granule=32)
    res, _ = run([MatMul(0, A, B, C, rows, n, k, scale=S, block=block)], machine=g32,
                 mode="timing")
    padded = 32 * math.ceil(rows / 32)
    assert dur(res.records[0]) == padded * k * n / m.tcu_macs_per_cycle("f16") \
        + m.tcu_pipeline_latency


def _dma(engine, n, base):
    return Dma(engine, Walk.strided(Space.DDR, 0, base, DType.I8, (n,)),
               Walk.strided(Space.SRAM, 0, base % (1 << 24), DType.I8, (n,)))


def test_two_dmas_sharing_ddr_take_twice_as_long():
    m = M100.with_overrides(name="ddr-bound", ddr_bandwidth=64e9)  # DDR < one AXI master
    n = 1 << 20
    fixed = m.dma_setup_cycles + m.ddr_latency
    one, _ = run([_dma(0, n, 0)], machine=m, mode="timing")
    two, _ = run([_dma(0, n, 0), _dma(1, n, 1 << 22)], machine=m, mode="timing")
    t1 = dur(one.records[0]) - fixed
    assert t1 == pytest.approx(n / m.ddr_bytes_per_cycle)
    for r in two.records:
        assert dur(r) - fixed == pytest.approx(2 * t1)
    assert two.stats["units"]["DMA0"]["stall_cycles"]["ddr"] == pytest.approx(t1)


def test_two_dmas_on_default_machine_are_axi_bound():
    m = M100  # 2 x 128 GB/s AXI < 273 GB/s DDR: each engine keeps its own master's rate
    n = 1 << 20
    fixed = m.dma_setup_cycles + m.ddr_latency
    two, _ = run([_dma(0, n, 0), _dma(1, n, 1 << 22)], machine=m, mode="timing")
    for r in two.records:
        assert dur(r) - fixed == pytest.approx(n / m.bytes_per_cycle(m.axi_bandwidth))


@pytest.mark.parametrize("stride,expect", [(256, 64), (8, 32)])
def test_walk_on_one_bank_serializes(stride, expect):
    """64 i32 reads 1024 B apart all hit bank 0: 64 cycles; 32 B apart they spread over 32 banks
    and the DTDU read port (dtdu_bytes_per_cycle / bank width = 2 granules/cycle) bounds: 32."""
    m = M100
    assert m.dtdu_bytes_per_cycle // m.hbsm_bank_width == 2
    src = hb(0, 0, DType.I32, (64,), (stride,))
    dst = hb(0, 1 << 20 | 8 * m.hbsm_bank_width, DType.I32, (64,))  # banks 8..15
    res, _ = run([Copy(0, src, dst)], machine=m, mode="timing")
    assert dur(res.records[0]) == expect + m.hbsm_latency


def test_concurrent_units_share_banks():
    """Two DTDUs (TPB0 local, TPB1 remote into TPB0) both hammering bank 0 of TPB0, released by
    the same update at the same cycle, take twice as long together as alone."""
    m = M100
    go = Fill(2, hb(2, 0, DType.I8, (64,)), 0.0, sync=Sync(updates=(Update(0, mask_of(0, 1)),)))
    local = Copy(0, hb(0, 0, DType.I32, (64,), (256,)), hb(0, 1 << 20 | 256, DType.I32, (64,)),
                 sync=Sync(monitors=(Monitor(0, 0, 1),)))
    remote = Copy(1, hb(1, 0, DType.I32, (64,)), hb(0, 4, DType.I32, (64,), (256,)),
                  sync=Sync(monitors=(Monitor(1, 0, 1),)))
    alone, _ = run([go, local], machine=m, mode="timing")
    both, _ = run([go, local, remote], machine=m, mode="timing")
    assert dur(alone.records[1]) == 64 + m.hbsm_latency
    _, a, b = both.records
    assert a.start == b.start
    assert dur(a) == dur(b) == 128 + m.hbsm_latency


def test_dtdu_rate_and_remote_update_latency():
    m = M100
    n = 1 << 16
    prod = Copy(0, hb(0, 0, DType.I8, (n,)), hb(0, 1 << 17, DType.I8, (n,)),
                sync=Sync(updates=(Update(0, mask_of(1)),)))
    cons = Fill(1, hb(1, 0, DType.I8, (64,)), 0.0, sync=Sync(monitors=(Monitor(1, 0, 1),)))
    far = Fill(4, hb(4, 0, DType.I8, (64,)), 0.0, sync=Sync(monitors=(Monitor(4, 0, 1),)))
    prod2 = Copy(0, hb(0, 0, DType.I8, (64,)), hb(0, 1 << 18, DType.I8, (64,)),
                 sync=Sync(updates=(Update(0, mask_of(4)),)))
    res, _ = run([prod, cons, prod2, far], machine=m, mode="timing")
    p, c, p2, f = res.records[0], res.records[1], res.records[2], res.records[3]
    assert dur(p) == n / m.dtdu_bytes_per_cycle + m.hbsm_latency
    assert c.start == p.end + m.remote_update_latency  # same cluster
    assert f.start == p2.end + m.remote_update_latency_inter  # TPB 4 is in cluster 1


def test_csu_one_cpu_per_cluster():
    m = M100

    def call(t):
        return CsuCall(t, Routine.MEMCPY, (hb(t, 0, DType.I8, (1600,)), hb(t, 4096, DType.I8, (1600,))))

    res, _ = run([call(0), call(1), call(4)], machine=m, mode="timing")
    a, b, c = res.records
    one = m.csu_overhead_cycles + 3200 / m.csu_bytes_per_cycle
    assert dur(a) == one and dur(c) == one
    assert b.start == a.end and dur(b) == one  # TPB1 shares cluster 0's CPU with TPB0
    assert c.start < a.end  # TPB4 is in cluster 1: its own CPU
    assert res.stats["units"]["TPB1.CSU"]["stall_cycles"]["csu_cpu"] == a.end - b.dispatch


def test_functional_and_timing_modes_agree_on_order():
    m = get_machine("tiny")
    insts = [Fill(0, hb(0, 0, DType.I8, (64,)), 3.0, sync=Sync(updates=(Update(1, mask_of(0)),))),
             Copy(0, hb(0, 0, DType.I8, (64,)), hb(1, 0, DType.I8, (64,)),
                  sync=Sync(monitors=(Monitor(0, 1, 1),)))]
    for mode in ("functional", "full", "timing"):
        res, outs = run(insts, (), [hb(1, 0, DType.I8, (64,))] if mode != "timing" else [],
                        machine=m, mode=mode)
        assert res.ok
        assert res.records[1].start >= res.records[0].end
        if outs:
            assert list(outs[0]) == [3] * 64


def test_bank_contention_is_named_in_stalls():
    m = M100
    go = Fill(2, hb(2, 0, DType.I8, (64,)), 0.0, sync=Sync(updates=(Update(0, mask_of(0, 1)),)))
    local = Copy(0, hb(0, 0, DType.I32, (64,), (256,)), hb(0, 1 << 20 | 256, DType.I32, (64,)),
                 sync=Sync(monitors=(Monitor(0, 0, 1),)))
    remote = Copy(1, hb(1, 0, DType.I32, (64,)), hb(0, 4, DType.I32, (64,), (256,)),
                  sync=Sync(monitors=(Monitor(1, 0, 1),)))
    res, _ = run([go, local, remote], machine=m, mode="timing")
    assert res.stats["units"]["TPB0.DTDU"]["stall_cycles"]["hbsm_bank"] == pytest.approx(64)
    assert res.stats["stall_cycles"]["hbsm_bank"] == pytest.approx(128)


def test_inter_cluster_mesh_is_slower():
    m = M100
    n = 1 << 16

    def copy(dst):
        return Copy(0, hb(0, 0, DType.I8, (n,)), hb(dst, 0, DType.I8, (n,)))

    near, _ = run([copy(1)], machine=m, mode="timing")
    far, _ = run([copy(4)], machine=m, mode="timing")
    assert dur(near.records[0]) == n / m.dtdu_bytes_per_cycle + m.hbsm_latency
    assert dur(far.records[0]) == pytest.approx(
        n / m.bytes_per_cycle(m.mesh_inter_cluster_bandwidth) + m.hbsm_latency)


def test_timing_only_handles_huge_transfers_without_data():
    """--timing-only never materializes data or address arrays: a 1 GiB DDR->DDR DMA is timed
    from the walk levels alone."""
    m = M100
    n = 1 << 30
    d = Dma(0, Walk.strided(Space.DDR, 0, 0, DType.I8, (1 << 14, 1 << 16)),
            Walk.strided(Space.DDR, 0, 8 << 30, DType.I8, (1 << 14, 1 << 16)))
    res, _ = run([d], machine=m, mode="timing")
    # both ends on DDR and on AXI master 0: 2n bytes through the tighter of the two
    bw = min(m.ddr_bytes_per_cycle, m.bytes_per_cycle(m.axi_bandwidth))
    assert dur(res.records[0]) == pytest.approx(m.dma_setup_cycles + m.ddr_latency + 2 * n / bw)


def test_back_to_back_matmuls_pipeline():
    """The TCU is pipelined: n back-to-back 32x32 @ 32x64 int8 matmuls take n * 32 cycles plus one
    pipeline latency; each result is visible tcu_pipeline_latency after its streaming ends. (A
    long DMA holds the first matmul until all four are dispatched.)"""
    m = M100
    gate = Dma(0, Walk.strided(Space.DDR, 0, 0, DType.I8, (1 << 20,)),
               Walk.strided(Space.SRAM, 0, 0, DType.I8, (1 << 20,)),
               sync=Sync(updates=(Update(0, mask_of(0)),)))
    insts = [MatMul(0, hb(0, 0, DType.I8, (32, 32)), hb(0, 8192, DType.I8, (32, 64)),
                    hb(0, 65536 + i * 8192, DType.I32, (32, 64)), 32, 64, 32,
                    sync=Sync(monitors=(Monitor(0, 0, 1),) if i == 0 else ()))
             for i in range(4)]
    res, _ = run([gate] + insts, machine=m, mode="timing")
    dma, recs = res.records[0], res.records[1:]
    t0 = dma.end + m.remote_update_latency_inter
    assert max(r.dispatch for r in recs) < t0
    for i, r in enumerate(recs):
        assert r.start == t0 + 32 * i
        assert r.end == t0 + 32 * (i + 1) + m.tcu_pipeline_latency
    assert res.stats["units"]["TPB0.TCU"]["busy_cycles"] == 4 * 32 + m.tcu_pipeline_latency


def test_sram_banks():
    """CCB SRAM: 4 banks interleaved every 4 KiB, each a quarter of the SRAM bandwidth. A DMA
    whose SRAM walk stays in one bank is bank-bound; one spread over all banks is AXI-bound."""
    m = M100
    il, nb = m.ccb_sram_interleave, m.ccb_sram_banks
    n = 64 * il
    one = Walk(Space.SRAM, 0, 0, DType.I8, (Level(0, nb * il, (n // il - 1) * nb * il),
                                            Level(0, 1, il - 1)))  # bank 0's granules only
    spread = Walk.strided(Space.SRAM, 0, 0, DType.I8, (n,))
    src = Walk.strided(Space.DDR, 0, 0, DType.I8, (n,))
    fixed = m.dma_setup_cycles + m.ddr_latency
    r1, _ = run([Dma(0, src, one)], machine=m, mode="timing")
    r2, _ = run([Dma(0, src, spread)], machine=m, mode="timing")
    bank_bw = m.bytes_per_cycle(m.ccb_sram_bandwidth) / nb
    axi_bw = m.bytes_per_cycle(m.axi_bandwidth)
    assert bank_bw < axi_bw < nb * bank_bw
    assert dur(r1.records[0]) - fixed == pytest.approx(n / bank_bw)
    assert dur(r2.records[0]) - fixed == pytest.approx(n / axi_bw)
    assert r1.stats["units"]["DMA0"]["stall_cycles"] == {}  # alone: slow, but not contended


def test_cvu_rates():
    """CVU: elementwise at cvu_bytes_per_cycle of the widest type; softmax three passes; pooling
    kh*kw beats per output; latency hbsm_latency + stages * cvu_stage_latency (a drain tail)."""
    from m100.targets.m100.isa import CvuOp, CvuPipeline, Ref, RefKind, Stage
    m = M100
    x0 = Ref(RefKind.INPUT, 0)

    def cvu(in_shape, out_shape, stages, dt=DType.F32):
        inst = CvuPipeline(0, (hb(0, 0, dt, in_shape),), (in_shape,), hb(0, 1 << 20, dt, out_shape),
                           out_shape, tuple(stages))
        r, _ = run([inst], machine=m, mode="timing")
        return dur(r.records[0]) - m.hbsm_latency - len(stages) * m.cvu_stage_latency

    n = 4096
    assert cvu((n,), (n,), [Stage(CvuOp.EXP, (x0,))]) == n * 4 / m.cvu_bytes_per_cycle
    assert cvu((64, 64), (64, 64), [Stage(CvuOp.SOFTMAX, (x0,))]) == 3 * n * 4 / m.cvu_bytes_per_cycle
    pool = Stage(CvuOp.MAXPOOL, (x0,), iparams=(2, 2, 2, 2, 0, 0, 0, 0))
    assert cvu((1, 64, 64, 1), (1, 32, 32, 1), [pool], DType.I8) == n / m.cvu_bytes_per_cycle
    pool3 = Stage(CvuOp.MAXPOOL, (x0,), iparams=(3, 3, 1, 1, 1, 1, 1, 1))
    assert cvu((1, 64, 64, 1), (1, 64, 64, 1), [pool3], DType.I8) == 9 * n / m.cvu_bytes_per_cycle


def test_costs_kept_on_instructions_give_the_same_run():
    """Block costs are kept on the instruction for its machine (``Engine._cost``): running the
    same instructions again, or on another machine object, gives exactly the stats and block
    times of a run on fresh (equal) instructions, whose costs are computed anew."""
    import copy

    def mm(t, blocks):
        A, B = hb(t, 0, DType.I8, (64, 32)), hb(t, 8192, DType.I8, (32, 64))
        return MatMul(t, A, B, hb(t, 65536, DType.I32, (64, 64)), 64, 64, 32,
                      sync=Sync(blocks=blocks))

    def prog():
        return [_dma(0, 1 << 16, 0), _dma(1, 1 << 16, 1 << 22), mm(0, 4), mm(1, 2)]

    insts = prog()
    other = M100.with_overrides(name="slower-ddr", ddr_bandwidth=32e9)
    for m in (M100, M100, other, other):  # again on one machine: kept; another: its own
        again, _ = run(insts, machine=m, mode="timing")
        fresh, _ = run(copy.deepcopy(prog()), machine=m, mode="timing")
        assert again.ok and fresh.ok, again.reports
        assert again.stats == fresh.stats
        assert [r.blocks for r in again.records] == [r.blocks for r in fresh.records]
    slow, _ = run(prog(), machine=other, mode="timing")
    fast, _ = run(prog(), machine=M100, mode="timing")
    assert slow.stats["total_cycles"] > fast.stats["total_cycles"]  # the machine matters


def test_column_registry_order_does_not_change_a_run():
    """The fluid model's resource columns are one registry per machine object
    (``sim/fluid.py: Columns``, links numbered in the order they first appear, kept by the
    costs across runs). A run on a machine whose registry first saw other links (another
    program's, in another order) gives exactly the stats and block times of the same run on a
    fresh machine object with a fresh registry."""
    def mm(t, blocks):
        A, B = hb(t, 0, DType.I8, (64, 32)), hb(t, 8192, DType.I8, (32, 64))
        return MatMul(t, A, B, hb(t, 65536, DType.I32, (64, 64)), 64, 64, 32,
                      sync=Sync(blocks=blocks))

    def to_hbsm(engine, t, n):  # DDR -> HBSM of TPB t: other links (mesh, banks of t)
        return Dma(engine, Walk.strided(Space.DDR, 0, 1 << 23, DType.I8, (n,)),
                   Walk.strided(Space.HBSM, t, 1 << 17, DType.I8, (n,)))

    def prog():  # two DMAs sharing DDR and SRAM, matmuls on two TPBs
        return [_dma(0, 1 << 16, 0), _dma(1, 1 << 16, 1 << 22), mm(0, 4), mm(1, 2)]

    seen = M100.with_overrides(name="registry")  # equal machines, separate registries
    fresh = M100.with_overrides(name="registry")
    first, _ = run([to_hbsm(0, 5, 1 << 15), to_hbsm(1, 3, 1 << 15)] + list(reversed(prog())),
                   machine=seen, mode="timing")
    assert first.ok, first.reports
    a, _ = run(prog(), machine=seen, mode="timing")
    b, _ = run(prog(), machine=fresh, mode="timing")
    assert a.ok and b.ok, a.reports
    assert a.stats == b.stats
    assert [r.blocks for r in a.records] == [r.blocks for r in b.records]
    assert a.stats["stall_cycles"]  # the DMAs do contend (share is used)


def _share_reference(costs, caps, banks, causes):  # -> (rates, causes)
    """max-min progressive filling over the demand matrix exactly as ``share``'s docstring
    defines it (a row per job; the used bank columns ascending, then the links sorted by name),
    built entry by entry; a column's demand is summed in job order, one Python float at a time."""
    import numpy as np

    n = len(costs)
    w = np.array([c.alone for c in costs])
    finite = np.isfinite(w)
    causes[:] = [""] * n
    if n == 0 or not finite.any():
        return np.where(finite, 0.0, np.inf), causes
    used = sorted({t * banks + b for c in costs for t, acc in c.banks.items()
                   for b in range(banks) if acc[b] != 0})
    links = sorted({k for c in costs for k, x in c.links.items() if x != 0}, key=str)
    if not used and not links:
        return np.where(finite, w, np.inf), causes
    col = {u: i for i, u in enumerate(used)}
    D = np.zeros((n, len(used) + len(links)))
    for j, c in enumerate(costs):
        for t, acc in c.banks.items():
            for b in range(banks):
                if acc[b] != 0:
                    D[j, col[t * banks + b]] = acc[b]
        for i, k in enumerate(links):
            if c.links.get(k, 0):
                D[j, len(used) + i] = c.links[k]
    nb = len(used)
    cols = np.concatenate([np.ones(nb), np.array([caps[k] for k in links], dtype=np.float64)])
    rem, lam, frozen = cols.copy(), np.zeros(n), ~finite
    while not frozen.all():
        act = ~frozen
        use = np.zeros(D.shape[1])
        for c in range(D.shape[1]):  # per column, in job order from 0.0 (Python floats)
            s = 0.0
            for j in np.flatnonzero(act).tolist():
                s += float(w[j]) * float(D[j, c])
            use[c] = s
        inc = np.divide(rem, use, out=np.full(use.shape, np.inf), where=use > 1e-12)
        d = min(float(inc.min()), float((1.0 - lam[act]).min()))
        lam[act] += d
        rem -= d * use
        done = lam >= 1.0 - 1e-12
        if done[act].all():
            break
        sat = rem <= 1e-9 * cols
        hit = (D[:, sat] > 0).any(axis=1) if sat.any() else np.zeros(n, bool)
        for j in np.nonzero(act & hit & ~done)[0]:
            c_ = int(np.flatnonzero(sat)[int(np.argmax(D[j, sat] > 0))])
            causes[j] = "hbsm_bank" if c_ < nb else str(links[c_ - nb][0])
        frozen |= act & (hit | done)
        rem = np.maximum(rem, 0.0)
    return np.where(finite, lam * w, np.inf), causes


@pytest.mark.parametrize("seed", range(40))
def test_share_equals_its_definition_bit_for_bit(seed):
    """``share`` builds its demand matrix from per-cost cached terms at once; the rates (bytes)
    and causes equal the matrix built entry by entry from the definition, on random job sets
    (sparse bank histograms over several TPBs, shared and private links, idle jobs)."""
    import numpy as np

    from m100.sim.timing import Cost, alone_rate, share

    rng = np.random.default_rng(seed)
    banks, link_keys = 8, [("ddr",), ("axi", 0), ("axi", 1), ("mesh", 0, 1), ("sram", 2)]
    caps = {k: float(rng.uniform(8, 64)) for k in link_keys}
    costs = []
    for _ in range(int(rng.integers(1, 30))):
        c = Cost(cycles=float(rng.choice([0.0, rng.uniform(1, 500)])))
        if rng.random() < 0.8 and c.cycles:
            for t in rng.choice(6, size=int(rng.integers(1, 3)), replace=False):
                acc = rng.integers(0, 40, banks).astype(np.float64)
                acc[rng.random(banks) < 0.5] = 0
                c.banks[int(t)] = acc
            for k in link_keys:
                if rng.random() < 0.4:
                    c.links[k] = float(rng.uniform(1, 5000))
        alone_rate(c, caps)
        costs.append(c)
    with np.errstate(invalid="ignore"):  # 0 * inf of idle jobs (the simulator runs quiet)
        want, wc = _share_reference(costs, caps, banks, [])
        for _ in range(2):  # the second call uses the cached terms
            gc_: list[str] = []
            got = share(costs, caps, banks, gc_)
            assert np.asarray(got).tobytes() == want.tobytes() and gc_ == wc


def random_cost(rng, caps, banks, *, busy_draws: int = 1, dma: float = 0.4, tpbs: int = 3):
    """A random job as the engine hands them to ``share``, often at a capacity: a DMA (with
    probability ``dma``) on its AXI master and the DRB (and maybe DDR), same bytes; or bank
    histograms on up to 2 of ``tpbs`` TPBs, often one bank at the job's own rate, maybe a mesh
    link; or idle (no streaming work: ``cycles`` 0 with odds 1 : ``busy_draws``)."""
    import numpy as np

    from m100.sim.timing import Cost, alone_rate

    c = Cost(cycles=float(rng.choice([0.0] + [rng.uniform(1, 500) for _ in range(busy_draws)])))
    kind = rng.random()
    if kind < dma:  # a DMA: an AXI master, the DRB and maybe DDR, same bytes
        nbytes = float(rng.integers(64, 1 << 16))
        for k in [("axi", int(rng.integers(0, 2))), ("drb",)] + \
                ([("ddr",)] if rng.random() < 0.5 else []):
            c.links[k] = nbytes
        c.cycles = 0.0
    if kind > 0.3 and c.cycles:  # bank histograms, often one bank at the job's own rate
        for t in rng.choice(tpbs, size=int(rng.integers(1, 3)), replace=False):
            acc = rng.integers(0, 40, banks).astype(np.float64)
            acc[rng.random(banks) < 0.5] = 0
            if rng.random() < 0.5:
                acc[int(rng.integers(0, banks))] = c.cycles
            c.banks[int(t)] = acc
        if rng.random() < 0.3:
            c.links[("mesh", 0, 1)] = float(rng.uniform(1, 5000))
    alone_rate(c, caps)
    return c


@pytest.mark.parametrize("seed", range(40))
def test_share_at_capacity_equals_its_definition_bit_for_bit(seed):
    """``share`` runs its elementwise steps only on the columns whose first-step demand is within
    1e-6 of their capacity or above. The job sets the engine hands it are mostly at a capacity
    *exactly* (each DMA at its own AXI master's capacity, two of them on one DRB of twice that;
    jobs alone at their busiest bank's rate, a second job on that bank), and some need several
    freezing steps: the rates (bytes) and causes equal the definition's on such sets."""
    import numpy as np

    from m100.sim.timing import share

    rng = np.random.default_rng(1000 + seed)
    banks = 8
    axi = float(rng.choice([85.33333333333333, 64.0, 42.666666666666664, 7.3]))
    caps = {("axi", 0): axi, ("axi", 1): axi, ("drb",): 2 * axi,
            ("ddr",): float(rng.choice([2 * axi, 3 * axi, 1.5 * axi])), ("mesh", 0, 1): axi}
    costs = [random_cost(rng, caps, banks) for _ in range(int(rng.integers(1, 40)))]
    with np.errstate(invalid="ignore"):
        want, wc = _share_reference(costs, caps, banks, [])
        got_causes: list[str] = []
        got = share(costs, caps, banks, got_causes)
    assert np.asarray(got).tobytes() == want.tobytes() and got_causes == wc



@pytest.mark.parametrize("seed", range(60))
def test_alone_on_columns_is_share_returning_the_alone_rates(seed):
    """``timing.alone_on_columns`` (the engine's exact shortcut for job sets at a capacity,
    ``Fluid._alone_at_capacity``): given every used column, it is True exactly when ``share``
    returns every job's alone rate (bytes) with no cause, on at-capacity job sets (DMAs at
    their AXI master's rate on a DRB of twice it, jobs at their busiest bank's rate)."""
    import numpy as np

    from m100.sim.timing import Cost, alone_on_columns, alone_on_entries, alone_rate, share

    rng = np.random.default_rng(5000 + seed)
    banks = 8
    axi = float(rng.choice([85.33333333333333, 64.0, 42.666666666666664, 7.3]))
    caps = {("axi", 0): axi, ("axi", 1): axi, ("drb",): 2 * axi,
            ("ddr",): float(rng.choice([2 * axi, 3 * axi, 1.5 * axi])), ("mesh", 0, 1): axi}
    costs = []
    for _ in range(int(rng.integers(1, 12))):
        c = Cost(cycles=float(rng.uniform(1, 500)))
        if rng.random() < 0.6:  # a DMA at its AXI master's rate
            nbytes = float(rng.integers(64, 1 << 16))
            for k in [("axi", int(rng.integers(0, 2))), ("drb",)] + \
                    ([("ddr",)] if rng.random() < 0.3 else []):
                c.links[k] = nbytes
            c.cycles = 0.0
        else:
            acc = np.zeros(banks)
            acc[int(rng.integers(0, banks))] = c.cycles if rng.random() < 0.7 else c.cycles / 3
            c.banks[int(rng.integers(0, 2))] = acc
        alone_rate(c, caps)
        costs.append(c)
    demands, columns = [], {}
    for c in costs:  # each job's demand at its alone rate per column, as the engine keeps them
        d = {}
        for t, acc in c.banks.items():
            for b in np.flatnonzero(acc).tolist():
                d[("bank", t, b)] = c.alone * float(acc[b])
                columns[("bank", t, b)] = 1.0
        for k, v in c.links.items():
            d[k] = c.alone * v
            columns[k] = caps[k]
        demands.append(d)
    causes: list[str] = []
    rates = np.asarray(share(costs, caps, banks, causes))
    alone = rates.tobytes() == np.array([c.alone for c in costs]).tobytes() and not any(causes)
    assert alone_on_columns(demands, list(columns.items())) == alone
    ents = [(c, d[c]) for d in demands for c in columns if c in d]  # (job order)
    assert alone_on_entries([e[0] for e in ents], [e[1] for e in ents],
                            list(columns.items())) == alone


def test_share_terms_of_a_copied_cost_are_recomputed():
    """A cost keeps its nonzero demands with column codes of this process's link registry; a
    cost pickled (another process's registry) or deep-copied computes them again, so ``share``
    gives the same rates and causes as on the original."""
    import copy
    import pickle

    from m100.sim import timing
    from m100.sim.timing import Cost, alone_rate, share

    caps = {("ddr",): 32.0, ("axi", 0): 16.0, ("axi", 1): 16.0, ("drb",): 32.0}
    costs = []
    for j in range(4):
        c = Cost()
        c.links[("axi", j % 2)] = 4096.0
        c.links[("drb",)] = 4096.0
        if j == 3:
            c.links[("ddr",)] = 4096.0
        alone_rate(c, caps)
        costs.append(c)
    want_causes: list[str] = []
    want = share(costs, caps, 8, want_causes)
    assert any(want_causes)  # the jobs do contend
    assert all(c.terms is not None for c in costs)
    for copied in (pickle.loads(pickle.dumps(costs)), copy.deepcopy(costs)):
        assert all(c.terms[2] is not timing._CODES for c in copied)
        got_causes: list[str] = []
        got = share(copied, caps, 8, got_causes)
        assert got.tobytes() == want.tobytes() and got_causes == want_causes
        assert all(c.terms[2] is timing._CODES for c in copied)


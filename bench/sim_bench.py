"""Benchmark of the reference interpreter (m100-sim): speed of simulation, not of the NPU.

Workload: C[M,N] = A[M,K] @ B[K,N] in int8 (i32 result), M = N = K = 1024 by default, tiled across
8 TPBs (clusters 0-1 of the ``m100`` machine): every TPB owns M/8 rows of A and C; B streams in
K-chunks broadcast over the DRB into a 2-slot ring in every TPB's HBSM, with back-pressure counters
(the DMA waits until all 8 TPBs freed the slot); each TPB accumulates C over the chunks with
``tcu.matmul accumulate``; C goes back to DDR by DMA. The result is checked against numpy.

Rows reported:

* ``functional``: ``--functional-only`` (data, no timing) wall time, simulated GMAC/s;
* ``full``: data + cycle model + race checks, wall time;
* ``timing``: ``--timing-only`` on a finer tiling (more, smaller instructions), instructions/s;

plus the simulated cycles and TCU MAC utilization of the program.

    .venv/bin/python bench/sim_bench.py [--size 1024] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from m100.sim import Simulator
from m100.targets.m100.isa import DType, Dma, MatMul, Monitor, Space, Sync, Update, Walk, mask_of
from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import CCB_STREAM, Program, Symbol

TPBS = 8
READY_A, DONE, READY_B = 0, 1, 2  # counters per TPB


def build(size: int, kc: int, mt: int, machine) -> Program:
    """The tiled program: K-chunks of ``kc`` rows of B, row tiles of ``mt`` rows per TPB."""
    M = N = K = size
    rows = M // TPBS
    nk, nm = K // kc, rows // mt
    A_DDR, B_DDR, C_DDR = 0, 1 << 28, 1 << 29
    A_H, B_H = 0, rows * K
    C_H = B_H + 2 * kc * N
    assert C_H + rows * N * 4 <= machine.hbsm_bytes, "tiles do not fit HBSM"
    ddr = lambda a, shape, dt=DType.I8: Walk.strided(Space.DDR, 0, a, dt, shape)  # noqa: E731
    hb = lambda t, a, shape, dt=DType.I8, st=None: Walk.strided(Space.HBSM, t, a, dt, shape, st)  # noqa: E731
    ccb: list = []
    clusters: dict[int, list] = {}
    all_mask = mask_of(*range(TPBS))
    for t in range(TPBS):  # A stripes
        ccb.append(Dma(t % 2, ddr(A_DDR + t * rows * K, (rows * K,)), hb(t, A_H, (rows * K,)),
                       sync=Sync(updates=(Update(READY_A, mask_of(t)),))))
    per_chunk = nm  # matmuls per TPB per chunk
    for j in range(nk):  # B chunks, broadcast into slot j % 2, after all TPBs freed the slot
        mons = tuple(Monitor(t, DONE, (j - 1) * per_chunk) for t in range(TPBS)) if j >= 2 else ()
        ccb.append(Dma(j % 2, ddr(B_DDR + j * kc * N, (kc * N,)), hb(0, B_H + (j % 2) * kc * N,
                                                                     (kc * N,)),
                       tpb_mask=all_mask, sync=Sync(monitors=mons,
                                                    updates=(Update(READY_B, all_mask),))))
    for t in range(TPBS):
        insts = clusters.setdefault(machine.cluster_of(t), [])
        for j in range(nk):
            for i in range(nm):
                a = hb(t, A_H + i * mt * K + j * kc, (mt, kc), st=(K, 1))
                b = hb(t, B_H + (j % 2) * kc * N, (kc, N))
                c = hb(t, C_H + i * mt * N * 4, (mt, N), DType.I32)
                mons = (Monitor(t, READY_A, 1), Monitor(t, READY_B, j + 1))
                insts.append(MatMul(t, a, b, c, mt, N, kc, accumulate=j > 0,
                                    sync=Sync(monitors=mons, updates=(Update(DONE, mask_of(t)),))))
    for t in range(TPBS):  # C out
        ccb.append(Dma(t % 2, hb(t, C_H, (rows * N,), DType.I32),
                       ddr(C_DDR + t * rows * N * 4, (rows * N,), DType.I32),
                       sync=Sync(monitors=(Monitor(t, DONE, nk * nm),))))
    p = Program.empty(machine)
    p.streams = {CCB_STREAM: ccb, **clusters}
    p.symbols = [Symbol("a", "input", (M, K), DType.I8, Space.DDR, A_DDR),
                 Symbol("b", "input", (K, N), DType.I8, Space.DDR, B_DDR),
                 Symbol("c", "output", (M, N), DType.I32, Space.DDR, C_DDR)]
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--kc", type=int, default=128, help="K-chunk of the functional runs")
    ap.add_argument("--timing-kc", type=int, default=32, help="K-chunk of the timing-only run")
    ap.add_argument("--timing-mt", type=int, default=32, help="row tile of the timing-only run")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    m = get_machine("m100")
    n = args.size
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (n, n)).astype(np.int8)
    b = rng.integers(-128, 128, (n, n)).astype(np.int8)
    want = a.astype(np.float64) @ b.astype(np.float64)
    rows = []
    prog = build(n, args.kc, n // TPBS, m)
    ninst = sum(len(v) for v in prog.streams.values())
    for mode in ("functional", "full"):
        t0, c0 = time.perf_counter(), time.process_time()
        res = Simulator(prog, m, mode=mode).run({"a": a, "b": b})
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert res.ok, [str(r) for r in res.reports[:3]]
        assert np.array_equal(res.outputs["c"], want.astype(np.int64)), "wrong result"
        rows.append({"run": mode, "instructions": ninst, "wall_s": dt, "cpu_s": cpu,
                     "sim_gmac_per_s": n ** 3 / dt / 1e9, "inst_per_s": ninst / dt,
                     "inst_per_cpu_s": ninst / cpu, "sim_gmac_per_cpu_s": n ** 3 / cpu / 1e9,
                     "sim_cycles": res.stats["total_cycles"],
                     "tcu_util_pct": res.stats["tcu_mac_util_pct"]})
    prog = build(n, args.timing_kc, args.timing_mt, m)
    ninst = sum(len(v) for v in prog.streams.values())
    t0, c0 = time.perf_counter(), time.process_time()
    res = Simulator(prog, m, mode="timing").run({"a": a, "b": b})
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert res.ok, [str(r) for r in res.reports[:3]]
    rows.append({"run": "timing", "instructions": ninst, "wall_s": dt, "cpu_s": cpu,
                 "sim_gmac_per_s": n ** 3 / dt / 1e9, "inst_per_s": ninst / dt,
                     "inst_per_cpu_s": ninst / cpu, "sim_gmac_per_cpu_s": n ** 3 / cpu / 1e9,
                 "sim_cycles": res.stats["total_cycles"],
                 "tcu_util_pct": res.stats["tcu_mac_util_pct"]})
    print(f"m100-sim benchmark: {n}x{n}x{n} int8 matmul on {TPBS} TPBs of '{m.name}'")
    print("(wall time on a loaded machine can exceed CPU time: both are given)")
    print(f"{'run':<11}{'insts':>7}{'wall s':>9}{'cpu s':>8}{'GMAC/s':>9}{'GMAC/cpu-s':>11}{'inst/s':>9}"
          f"{'inst/cpu-s':>11}{'sim cycles':>12}{'TCU util':>10}")
    for r in rows:
        print(f"{r['run']:<11}{r['instructions']:>7}{r['wall_s']:>9.2f}{r['cpu_s']:>8.2f}"
              f"{r['sim_gmac_per_s']:>9.2f}{r['sim_gmac_per_cpu_s']:>11.2f}{r['inst_per_s']:>9.0f}{r['inst_per_cpu_s']:>11.0f}"
              f"{r['sim_cycles']:>12.0f}{r['tcu_util_pct']:>9.1f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": n, "tpbs": TPBS, "machine": m.name, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()

"""Benchmark: sync-insert dataflow vs barrier-all, run on the reference interpreter.

Prints one row per (workload, mode): instructions, orderings needed / implied / synchronized,
monitors, max counters per TPB, insertion time, interpreter cycles (timing mode) and the speed-up
of dataflow over barrier-all.

    .venv/bin/python bench/sync_modes.py [--json out.json] [--tiles N]
"""

from __future__ import annotations

import argparse
import json
import time

from m100.passes.backend.sync_insert import insert_sync
from m100.sim.simulator import Simulator
from m100.targets.m100 import isa
from m100.targets.m100.isa import CvuOp, DType, Ref, RefKind, Space, Stage, Walk
from m100.targets.m100.machine import get_machine


def _cvu(tpb, op, ins, out, rows, cols, blocks):
    return isa.CvuPipeline(tpb=tpb, inputs=tuple(ins), in_shapes=((rows, cols),) * len(ins),
                           output=out, out_shape=(rows, cols),
                           stages=(isa.Stage(op, tuple(Ref(RefKind.INPUT, k)
                                                       for k in range(len(ins)))),),
                           sync=isa.Sync(blocks=blocks))


def pipeline(machine, tiles: int, slots: int, blocks: int, tpbs: int, rows=32, cols=256):
    """DMA in -> CVU on TPB0 -> DTDU copy to TPB1 -> CVU ... -> DMA out, tile by tile, rings of
    ``slots`` buffers in every HBSM (f32 tiles of rows x cols)."""
    n = rows * cols
    nbytes = n * 4

    def hb(t, s):
        return Walk.strided(Space.HBSM, t, s * nbytes, DType.F32, (n,))

    def ddr(s):
        return Walk.strided(Space.DDR, 0, s * nbytes, DType.F32, (n,))

    sy = isa.Sync(blocks=blocks)
    out = []
    for k in range(tiles):
        r = k % slots
        out.append(isa.Dma(engine=0, src=ddr(k), dst=hb(0, r), sync=sy))
        for t in range(tpbs):
            out.append(_cvu(t, CvuOp.ADD if t % 2 == 0 else CvuOp.MUL, [hb(t, r), hb(t, r)],
                            hb(t, slots + r), rows, cols, blocks))
            if t + 1 < tpbs:
                out.append(isa.Copy(tpb=t, src=hb(t, slots + r), dst=hb(t + 1, r), sync=sy))
        out.append(isa.Dma(engine=1, src=hb(tpbs - 1, slots + r), dst=ddr(tiles + k), sync=sy))
    return out


def matmul_tiles(machine, tiles: int, tpbs: int, blocks: int, m=64, k=64, n=64):
    """Weights broadcast once by DMA; each TPB streams input tiles through TCU then CVU relu."""
    def hb(t, off, cnt):
        return Walk.strided(Space.HBSM, t, off, DType.F32, (cnt,))

    wbytes, abytes, cbytes = k * n * 4, m * k * 4, m * n * 4
    out = [isa.Dma(engine=0, src=Walk.strided(Space.DDR, 0, 0, DType.F32, (k * n,)),
                   dst=hb(0, 0, k * n), tpb_mask=(1 << tpbs) - 1, sync=isa.Sync(blocks=4))]
    ddr_off = wbytes
    for i in range(tiles):
        t = i % tpbs
        r = (i // tpbs) % 2
        a = hb(t, wbytes + r * abytes, m * k)
        c = hb(t, wbytes + 2 * abytes + r * cbytes, m * n)
        y = hb(t, wbytes + 2 * abytes + 2 * cbytes + r * cbytes, m * n)
        src = Walk.strided(Space.DDR, 0, ddr_off, DType.F32, (m * k,))
        ddr_off += abytes
        out.append(isa.Dma(engine=0, src=src, dst=a, sync=isa.Sync(blocks=blocks)))
        out.append(isa.MatMul(tpb=t, a=a, b=hb(t, 0, k * n), c=c, m=m, n=n, k=k,
                              sync=isa.Sync(blocks=blocks)))
        out.append(isa.CvuPipeline(tpb=t, inputs=(c,), in_shapes=((m, n),), output=y,
                                   out_shape=(m, n), stages=(Stage(CvuOp.RELU, (Ref(RefKind.INPUT),)),),
                                   sync=isa.Sync(blocks=blocks)))
        out.append(isa.Dma(engine=1, src=y,
                           dst=Walk.strided(Space.DDR, 0, (1 << 24) + i * cbytes, DType.F32,
                                            (m * n,)), sync=isa.Sync(blocks=blocks)))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--tiles", type=int, default=16)
    args = ap.parse_args(argv)
    m100 = get_machine("m100")
    tiny = get_machine("tiny")
    work = [
        ("pipeline tiny 2 TPBs", tiny, pipeline(tiny, args.tiles, 2, 4, 2, rows=16, cols=64)),
        ("pipeline m100 4 TPBs", m100, pipeline(m100, args.tiles, 2, 4, 4)),
        ("matmul tiles m100 4 TPBs", m100, matmul_tiles(m100, args.tiles, 4, 4)),
    ]
    rows = []
    for name, machine, prog in work:
        cyc = {}
        for mode in ("dataflow", "barrier-all"):
            t0 = time.perf_counter()
            res = insert_sync(prog, machine, sync_mode=mode)
            dt = time.perf_counter() - t0
            sim = Simulator(res.instructions, machine, mode="timing")
            r = sim.run()
            if r.reports:
                raise SystemExit(f"{name} {mode}: interpreter reports {r.reports[0]}")
            cyc[mode] = r.total_cycles
            s = res.stats
            rows.append({"workload": name, "mode": mode, "instructions": s["instructions"],
                         "needs": s["needs"], "implied": s["redundant"], "synchronized": s["kept"],
                         "monitors": s["monitors"], "max_counters_per_tpb":
                         max(res.counters_used.values(), default=0),
                         "insert_s": round(dt, 3), "cycles": r.total_cycles})
        rows[-2]["speedup_vs_barrier"] = round(cyc["barrier-all"] / cyc["dataflow"], 2)
    cols = ["workload", "mode", "instructions", "needs", "implied", "synchronized", "monitors",
            "max_counters_per_tpb", "insert_s", "cycles", "speedup_vs_barrier"]
    w = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    print("  ".join(c.ljust(w[c]) for c in cols))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(w[c]) for c in cols))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

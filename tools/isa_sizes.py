"""Encoded size of a typical instance of every TPB instruction kind (the table in docs/isa.md).

    python -m m100.tools.isa_sizes [--machine m100] [--markdown]

Each instance is what the compiler emits for a common case (an int8 32x64x32 TCU tile, a 3x3
conv, a 5-stage softmax pipeline, ...), with one monitor and one update.
"""

from __future__ import annotations

import argparse
import sys

from m100.errors import M100Error
from m100.targets.m100.encoding import encode_instruction, field_widths, instruction_bits
from m100.targets.m100.isa import (Act, Broadcast, Conv2D, Copy, CsuCall, CvuOp, CvuPipeline, DType,
                                   Dma, Epilogue, Fill, Instruction, MatMul, Monitor, Ref, RefKind,
                                   Requant, Routine, Space, Stage, Sync, Update, Walk)
from m100.targets.m100.machine import Machine, get_machine

H = Space.HBSM


def _sync(tpb: int | None, mask: int) -> Sync:
    return Sync(1, (Monitor(0 if tpb is None else tpb, 3, 1),), (Update(4, mask),))


def typical_instructions(m: Machine) -> list[tuple[str, Instruction]]:
    """(description, instruction) for each kind, placed on TPB 0 of ``m``."""
    t = 0
    cl = (1 << m.tpbs_per_cluster) - 1  # the TPBs of cluster 0
    mm = MatMul(t, Walk.strided(H, t, 0x0000, DType.I8, (32, 32)),
                Walk.strided(H, t, 0x0400, DType.I8, (32, 64)),
                Walk.strided(H, t, 0x0c00, DType.I8, (32, 64)), 32, 64, 32,
                epilogue=Epilogue(bias=Walk.strided(H, t, 0x1400, DType.I32, (64,)), act=Act.RELU,
                                  requant=Requant(1 << 30, 37, 0)),
                sync=_sync(t, 1))
    conv = Conv2D(t, Walk.strided(H, t, 0x0000, DType.I8, (1, 16, 16, 32)),
                  Walk.strided(H, t, 0x2000, DType.I8, (3, 3, 32, 64)),
                  Walk.strided(H, t, 0x6800, DType.I8, (1, 16, 16, 64)), 1, 16, 16, 32, 64, 3, 3,
                  pad=(1, 1, 1, 1), epilogue=Epilogue(act=Act.RELU, requant=Requant(1 << 30, 38, -3)),
                  sync=_sync(t, 1))
    x = Walk.strided(H, t, 0x0000, DType.F16, (32, 64))
    soft = CvuPipeline(t, (x,), ((32, 64),), Walk.strided(H, t, 0x1000, DType.F16, (32, 64)), (32, 64),
                       (Stage(CvuOp.RMAX, (Ref(RefKind.INPUT, 0),), axis=1),
                        Stage(CvuOp.SUB, (Ref(RefKind.INPUT, 0), Ref(RefKind.STAGE, 0))),
                        Stage(CvuOp.EXP, (Ref(RefKind.STAGE, 1),)),
                        Stage(CvuOp.RSUM, (Ref(RefKind.STAGE, 2),), axis=1),
                        Stage(CvuOp.DIV, (Ref(RefKind.STAGE, 2), Ref(RefKind.STAGE, 3)))),
                       sync=_sync(t, 1))
    copy = Copy(t, Walk.strided(H, t, 0x0, DType.I8, (32, 64), (1, 32)),
                Walk.strided(H, t, 0x800, DType.I8, (32, 64)), sync=_sync(t, 1))
    fill = Fill(t, Walk.strided(H, t, 0x0, DType.F16, (32, 64)), 0.0, sync=_sync(t, 1))
    bcast = Broadcast(t, Walk.strided(H, t, 0x0, DType.I8, (4096,)),
                      Walk.strided(H, t, 0x1000, DType.I8, (4096,)), cl, sync=_sync(t, cl))
    csu = CsuCall(t, Routine.GATHER, (Walk.strided(Space.DDR, 0, 0x100000, DType.F16, (32000, 64)),
                                      Walk.strided(H, t, 0x0, DType.I32, (16,)),
                                      Walk.strided(H, t, 0x100, DType.F16, (16, 64))),
                  (32000, 64, 16), sync=_sync(t, 1))
    dma = Dma(0, Walk.strided(Space.DDR, 0, 0x100000, DType.I8, (4, 32, 64), (64, 256, 1)),
              Walk.strided(H, 0, 0x0, DType.I8, (4, 32, 64)), cl, sync=_sync(None, cl))
    return [("int8 32x64x32 tile, bias+relu+requant", mm),
            ("int8 3x3 conv 16x16x32->64, pad 1, relu+requant", conv),
            ("f16 softmax [32,64], 5 stages", soft),
            ("i8 transpose [64,32]->[32,64]", copy),
            ("f16 zero fill [32,64]", fill),
            ("4 KiB to the cluster's TPBs", bcast),
            ("gather 16 rows of a [32000,64] f16 table", csu),
            ("DDR -> HBSM, 3 levels, DRB broadcast", dma)]


def size_rows(m: Machine) -> list[tuple[str, str, int, int]]:
    rows = []
    for what, inst in typical_instructions(m):
        rows.append((inst.MNEMONIC, what, instruction_bits(inst, m), len(encode_instruction(inst, m))))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="isa_sizes", description=__doc__.splitlines()[0])
    ap.add_argument("--machine", default="m100")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = ap.parse_args(argv)
    try:
        m = get_machine(args.machine)
        rows = size_rows(m)
    except M100Error as e:
        print(f"isa_sizes: error: {e}", file=sys.stderr)
        return 1
    if args.markdown:
        print(f"| kind | typical instance ({m.name}) | bits | bytes |")
        print("|---|---|---:|---:|")
        for mn, what, bits, nbytes in rows:
            print(f"| `{mn}` | {what} | {bits} | {nbytes} |")
    else:
        print(f"machine {m.name}: field widths {field_widths(m)}")
        for mn, what, bits, nbytes in rows:
            print(f"  {mn:15s} {bits:6d} bits {nbytes:5d} bytes  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

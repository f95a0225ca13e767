"""Write a small valid program file for the `tiny` machine (used by the m100-translate tests).

usage: make_program.py OUT.m100 [MACHINE]   (MACHINE: a preset or .json/.toml file; default tiny)

A DMA brings 64 int8 weights from DDR into TPB 0's HBSM and bumps counter 1; TPB 0 waits for it,
fills a buffer and copies it into TPB 1's HBSM. One data segment and two symbols.
"""
import sys

from m100.targets.m100.isa import (Copy, DType, Dma, Fill, Monitor, Space, Sync, Trigger, Update,
                                    Walk)
from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import CCB_STREAM, Program, Segment, Symbol

m = get_machine(sys.argv[2] if len(sys.argv) > 2 else "tiny")
w_ddr = Walk.strided(Space.DDR, 0, 4096, DType.I8, (64,))
w_hbsm = Walk.strided(Space.HBSM, 0, 0, DType.I8, (64,))
buf = Walk.strided(Space.HBSM, 0, 256, DType.F32, (4, 8))
remote = Walk.strided(Space.HBSM, 1, 512, DType.F32, (4, 8))
dma = Dma(0, w_ddr, w_hbsm, sync=Sync(updates=(Update(1, 0b01),)))
fill = Fill(0, buf, 1.5, sync=Sync(monitors=(Monitor(0, 1, 1),)))
copy = Copy(0, buf, remote, sync=Sync(blocks=4, updates=(Update(2, 0b10, trigger=Trigger.BLOCK),)))
prog = Program.empty(m)
prog.streams = {CCB_STREAM: [dma], 0: [fill, copy]}
prog.segments = [Segment(Space.DDR, 4096, bytes(range(64)), "weights")]
prog.symbols = [Symbol("x", "input", (64,), DType.I8, Space.DDR, 4096),
                Symbol("y", "output", (4, 8), DType.F32, Space.HBSM, 512, tpb=1)]
prog.metadata = {"source": "make_program.py"}
prog.validate(m)
prog.save(sys.argv[1], m)

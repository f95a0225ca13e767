"""The ISA demo: build, validate, encode, decode and print a small TPB program.

    python -m m100.tools.isa_demo [-o prog.m100]

The program runs ``y = softmax(relu(x @ w))`` on TPB 0 of the ``tiny`` machine: two DMAs bring
``x`` (an input symbol) and ``w`` (a DDR data segment) into HBSM, a TCU matmul, a CVU softmax
pipeline and a DMA of ``y`` back to DDR, chained by SU counters. It prints the assembly, the size of
every encoded instruction, checks that binary -> program -> assembly -> program -> binary is exact,
and runs the program on the reference interpreter against numpy. (``make demo`` runs the
end-to-end demo, ``tools/demo.py``.)
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from m100.errors import M100Error
from m100.targets.m100.asm import format_instruction, format_program, parse_program
from m100.targets.m100.encoding import ENCODING_VERSION, field_widths, instruction_bits
from m100.targets.m100.isa import (Act, CvuOp, CvuPipeline, DType, Dma, Epilogue, MatMul, Monitor,
                                   Ref, RefKind, Space, Stage, Sync, Trigger, Update, Walk,
                                   mask_of)
from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import CCB_STREAM, Program, Segment, Symbol

H, DDR = Space.HBSM, Space.DDR
M, K, N = 4, 32, 16
X_DDR, W_DDR, Y_DDR = 0x2000, 0x1000, 0x3000
X_H, W_H, T_H, Y_H = 0x0000, 0x0200, 0x0a00, 0x0b00


def build_program() -> Program:
    m = get_machine("tiny")
    t0 = mask_of(0)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((K, N)).astype(np.float32)
    f32 = DType.F32
    dma_x = Dma(0, Walk.strided(DDR, 0, X_DDR, f32, (M * K,)), Walk.strided(H, 0, X_H, f32, (M * K,)),
                sync=Sync(updates=(Update(counter=1, tpb_mask=t0),)))
    dma_w = Dma(1, Walk.strided(DDR, 0, W_DDR, f32, (K * N,)), Walk.strided(H, 0, W_H, f32, (K * N,)),
                sync=Sync(updates=(Update(counter=1, tpb_mask=t0),)))
    mm = MatMul(0, Walk.strided(H, 0, X_H, f32, (M, K)), Walk.strided(H, 0, W_H, f32, (K, N)),
                Walk.strided(H, 0, T_H, f32, (M, N)), M, N, K, epilogue=Epilogue(act=Act.RELU),
                # 2 blocks of 2 rows; each block's rows signal counter 2 when written
                sync=Sync(2, (Monitor(0, 1, 2),), (Update(2, t0, 1, Trigger.BLOCK),)))
    soft = CvuPipeline(0, (Walk.strided(H, 0, T_H, f32, (M, N)),), ((M, N),),
                       Walk.strided(H, 0, Y_H, f32, (M, N)), (M, N),
                       (Stage(CvuOp.SOFTMAX, (Ref(RefKind.INPUT, 0),), axis=1),),
                       # streams behind the matmul: block b waits for counter 2 >= 1 + b
                       sync=Sync(2, (Monitor(0, 2, 1, 1),), (Update(3, t0),)))
    dma_y = Dma(0, Walk.strided(H, 0, Y_H, f32, (M * N,)), Walk.strided(DDR, 0, Y_DDR, f32, (M * N,)),
                sync=Sync(1, (Monitor(0, 3, 1),)))
    return Program(m.name, m.fingerprint(), {CCB_STREAM: [dma_x, dma_w, dma_y], 0: [mm, soft]},
                   [Segment(DDR, W_DDR, w.tobytes(), "w")],
                   [Symbol("x", "input", (M, K), f32, DDR, X_DDR),
                    Symbol("y", "output", (M, N), f32, DDR, Y_DDR)],
                   {"source": "m100.tools.isa_demo", "what": "y = softmax(relu(x @ w))"})


def _simulate(prog: Program) -> bool:
    """Run the program on the reference interpreter and compare y with numpy."""
    from m100.sim.simulator import Simulator
    rng = np.random.default_rng(1)
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = np.frombuffer(prog.segments[0].data, dtype=np.float32).reshape(K, N)
    z = np.maximum(x @ w, 0)
    want = np.exp(z - z.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    res = Simulator(prog).run({"x": x})
    err = float(np.abs(res.outputs["y"] - want).max())
    good = res.ok and err < 1e-5
    print(f"== m100-sim: {res.total_cycles:.0f} cycles, max |y - numpy| = {err:.2e}, "
          f"{len(res.reports)} reports: {'ok' if good else 'FAILED'}")
    return good


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="demo", description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", help="also write the program file here")
    args = ap.parse_args(argv)
    try:
        prog = build_program()
        m = prog.machine_obj()
        prog.validate(m)
        data = prog.to_bytes(m)
        back = Program.from_bytes(data)
        text = format_program(back)
        again = parse_program(text, "<demo>")
        ok = back == prog and again == prog and again.to_bytes(m) == data
        print(f"== machine '{m.name}' (fingerprint {prog.fingerprint:#018x}), "
              f"encoding v{ENCODING_VERSION}")
        print(f"   field widths: {field_widths(m)}")
        print("== assembly (decoded from the binary)")
        lines = text.splitlines()
        data_lines = [ln for ln in lines if ln.startswith(".data")]
        for ln in lines:
            if ln.startswith(".data") and ln is not data_lines[0]:
                continue
            print(ln[:118] + " ..." if ln.startswith(".data") and len(ln) > 118 else ln)
            if ln is data_lines[0] and len(data_lines) > 1:
                print(f"; ... {len(data_lines) - 1} more .data lines")
        print("== encoded sizes")
        total = 0
        for key, inst in back.instructions():
            bits = instruction_bits(inst, m)
            total += bits
            where = "ccb" if key == CCB_STREAM else f"cluster {key}"
            print(f"   {where:9s} {inst.MNEMONIC:14s} {bits:5d} bits = {(bits + 7) // 8:4d} bytes, "
                  f"{len(format_instruction(inst))} characters of assembly")
        print(f"   {total} instruction bits; program file {len(data)} bytes")
        print(f"== round trip bin -> program -> asm -> program -> bin: {'exact' if ok else 'MISMATCH'}")
        ok = _simulate(prog) and ok
        if args.output:
            prog.save(args.output, m)
            print(f"== wrote {args.output}")
        return 0 if ok else 1
    except M100Error as e:
        print(f"demo: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""Random and hand-made f32 programs for the sync tests (tiny machine: 2 TPBs, 2 DMA engines)."""

from __future__ import annotations

import numpy as np

from m100.targets.m100 import isa
from m100.targets.m100.isa import CvuOp, DType, Ref, RefKind, Space, Stage, Walk

N = 256  # elements per buffer (16 x 16 f32 = 1 KiB)
BUF = N * 4


def hw(tpb: int, slot: int, shape=(N,), strides=None, offset=0) -> Walk:
    return Walk.strided(Space.HBSM, tpb, slot * BUF, DType.F32, shape, strides, offset)


def ddr(slot: int, shape=(N,), strides=None, offset=0) -> Walk:
    return Walk.strided(Space.DDR, 0, slot * BUF, DType.F32, shape, strides, offset)


def half(mk, *args, parity: int) -> Walk:
    """Every other element of a buffer (exact-overlap analysis: the two halves never conflict)."""
    return mk(*args, shape=(N // 2,), strides=(2,), offset=parity)


def cvu(tpb: int, op: CvuOp, ins: list[Walk], out: Walk, blocks: int = 1) -> isa.CvuPipeline:
    args = tuple(Ref(RefKind.INPUT, k) for k in range(len(ins)))
    return isa.CvuPipeline(tpb=tpb, inputs=tuple(ins), in_shapes=((16, 16),) * len(ins),
                           output=out, out_shape=(16, 16), stages=(Stage(op, args),),
                           sync=isa.Sync(blocks=blocks))


def sram(slot: int) -> Walk:
    return Walk.strided(Space.SRAM, 0, slot * BUF, DType.F32, (N,))


def random_program(seed: int, n: int = 16, slots: int = 6, ddr_slots: int = 4,
                   extra: bool = False) -> list:
    """Random f32 programs on 2 TPBs + 2 DMA engines; ``extra`` adds CSU memcpy (the cluster CPU)
    and CCB SRAM traffic."""
    rng = np.random.default_rng(seed)
    out = []
    kinds = ["fill", "copy", "copy_remote", "cvu", "dma_in", "dma_out", "dma_bcast", "matmul",
             "half_copy", "bcast"]
    probs = [.08, .14, .14, .16, .1, .08, .05, .1, .1, .05]
    if extra:
        kinds += ["csu", "sram_in", "sram_out"]
        probs = [x * .85 for x in probs] + [.05, .05, .05]
    for _ in range(n):
        kind = rng.choice(kinds, p=probs)
        t = int(rng.integers(2))
        blocks = int(rng.choice([1, 2, 4]))
        s = [int(x) for x in rng.choice(slots, size=3, replace=False)]
        sy = isa.Sync(blocks=blocks)
        if kind == "fill":
            out.append(isa.Fill(tpb=t, dst=hw(t, s[0]), value=float(rng.integers(1, 9)), sync=sy))
        elif kind == "copy":
            out.append(isa.Copy(tpb=t, src=hw(t, s[0]), dst=hw(t, s[1]), sync=sy))
        elif kind == "copy_remote":
            out.append(isa.Copy(tpb=t, src=hw(t, s[0]), dst=hw(1 - t, s[1]), sync=sy))
        elif kind == "half_copy":
            p = int(rng.integers(2))
            out.append(isa.Copy(tpb=t, src=half(hw, t, s[0], parity=p),
                                dst=half(hw, int(rng.integers(2)), s[1], parity=p), sync=sy))
        elif kind == "cvu":
            op = CvuOp(rng.choice([CvuOp.ADD, CvuOp.MUL, CvuOp.SUB, CvuOp.MAX]))
            out.append(cvu(t, op, [hw(t, s[0]), hw(t, s[1])], hw(t, s[2]), blocks))
        elif kind == "matmul":
            w = lambda sl: hw(t, sl)  # noqa: E731
            out.append(isa.MatMul(tpb=t, a=w(s[0]), b=w(s[1]), c=w(s[2]), m=16, n=16, k=16,
                                  sync=isa.Sync(blocks=blocks)))
        elif kind == "dma_in":
            out.append(isa.Dma(engine=int(rng.integers(2)), src=ddr(int(rng.integers(ddr_slots))),
                               dst=hw(t, s[0]), sync=sy))
        elif kind == "dma_out":
            out.append(isa.Dma(engine=int(rng.integers(2)), src=hw(t, s[0]),
                               dst=ddr(int(rng.integers(ddr_slots))), sync=sy))
        elif kind == "dma_bcast":
            out.append(isa.Dma(engine=int(rng.integers(2)), src=ddr(int(rng.integers(ddr_slots))),
                               dst=hw(0, s[0]), tpb_mask=0b11, sync=sy))
        elif kind == "csu":
            dst = (hw(int(rng.integers(2)), s[1]) if rng.random() < .5
                   else ddr(int(rng.integers(ddr_slots))))
            out.append(isa.CsuCall(tpb=t, routine=isa.Routine.MEMCPY, operands=(hw(t, s[0]), dst)))
        elif kind == "sram_in":
            out.append(isa.Dma(engine=int(rng.integers(2)), src=ddr(int(rng.integers(ddr_slots))),
                               dst=sram(int(rng.integers(2))), sync=sy))
        elif kind == "sram_out":
            out.append(isa.Dma(engine=int(rng.integers(2)), src=sram(int(rng.integers(2))),
                               dst=hw(t, s[0]), sync=sy))
        else:
            out.append(isa.Broadcast(tpb=t, src=hw(t, s[0]), dst=hw(t, s[1]), tpb_mask=0b11,
                                     sync=sy))
    return out


def pipeline(tiles: int = 6, slots: int = 2, blocks: int = 4) -> list:
    """DMA in -> CVU (TPB0) -> remote copy to TPB1 -> CVU (TPB1) -> DMA out, tile by tile, every
    stage through a ring of ``slots`` buffers (the sequential order is tile-major)."""
    out = []
    sy = isa.Sync(blocks=blocks)
    for k in range(tiles):
        r = k % slots
        out.append(isa.Dma(engine=0, src=ddr(k), dst=hw(0, r), sync=sy))
        out.append(cvu(0, CvuOp.RELU if False else CvuOp.ADD, [hw(0, r), hw(0, r)],
                       hw(0, slots + r), blocks))
        out.append(isa.Copy(tpb=0, src=hw(0, slots + r), dst=hw(1, r), sync=sy))
        out.append(cvu(1, CvuOp.MUL, [hw(1, r), hw(1, r)], hw(1, slots + r), blocks))
        out.append(isa.Dma(engine=1, src=hw(1, slots + r), dst=ddr(tiles + k), sync=sy))
    return out


def isa_strategies(name: str):
    """The ISA's hypothesis strategies (``test/unit/isa/strategies.py``), loaded as module
    ``name`` (it is not a package)."""
    import importlib.util
    import pathlib
    p = pathlib.Path(__file__).parents[1] / "isa" / "strategies.py"
    spec = importlib.util.spec_from_file_location(name, p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

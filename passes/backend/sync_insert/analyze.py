"""Stage 2: the input model, its validation, and the set of required orderings ("needs").

Input (see ``docs/sync.md``): instructions in their global order -- a valid *sequential*
execution of the program -- each executed by ``inst.executor`` ((unit, TPB) or (DMA, engine)); an
executor runs its own instructions in list order. Optional :class:`DataEdge`\\ s and
:class:`RingBuffer`\\ s add orderings the addresses may not show; the orderings derived from the
walks (RAW/WAR/WAW) are always added, so an input with no edges at all still comes out race-free.

Modes: ``dataflow`` keeps every needed ordering at block granularity; ``barrier-all`` ignores the
analysis and orders every instruction after the whole of the one before it in the global order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from m100.errors import M100Error
from m100.sim.certificate import SYNC_MODES
from m100.targets.m100 import isa
from m100.targets.m100.isa import Unit

from . import hazards
from .footprint import _AXIS0_OPS
from .hazards import Hazard, derive_hazards, prune_implied



class SyncError(M100Error):
    """Sync insertion can not produce a correct program (message names the instructions)."""


class DataEdge(NamedTuple):
    """``consumer`` must wait for ``producer`` (indices into the instruction list).

    ``granularity="whole"``: the consumer starts after the producer's end. ``"block"``: consumer
    block ``b`` waits for producer block ``mapping[b]`` (default: the identity when both have the
    same number of blocks, else ``(b + 1) * P // C - 1``, i.e. proportional). A named tuple: the
    pass builds one per token a consumer waits for through joins (~170 000 on ResNet-18)."""
    producer: int
    consumer: int
    granularity: str = "whole"
    mapping: tuple[int, ...] | None = None


class WholeEdges:
    """Whole orderings (each :class:`DataEdge` ``(producers[n], consumers[n])``) as two lists of
    instruction indices: the pass has one per token a consumer waits for (~160 000 on ResNet-50
    224), which :func:`sweep.analyze_reduce` takes as arrays without a :class:`DataEdge` each;
    any other reader iterates the :class:`DataEdge`\\ s, in the same order."""
    __slots__ = ("producers", "consumers")

    def __init__(self, producers: list[int], consumers: list[int]):
        if len(producers) != len(consumers):
            raise ValueError("WholeEdges: one consumer per producer")
        self.producers, self.consumers = producers, consumers

    def __len__(self) -> int:
        return len(self.producers)

    def __iter__(self):
        return map(DataEdge, self.producers, self.consumers)


@dataclass(frozen=True)
class RingBuffer:
    """A FIFO of ``slots`` slots: the k-th producer instruction fills slot ``k % slots``, the k-th
    consumer instruction reads it. Adds the forward edges ``producers[k] -> consumers[k]`` (block
    granular when ``block``) and the back-pressure edges ``consumers[k - slots] -> producers[k]``."""
    slots: int
    producers: tuple[int, ...]
    consumers: tuple[int, ...]
    block: bool = True
    name: str = "fifo"


@dataclass
class Needs:
    """Everything the later stages need: blocks per instruction and the required orderings."""
    insts: list[isa.Instruction]
    blocks: list[int]
    needs: dict[tuple[int, int], Hazard] = field(default_factory=dict)


def _fail(msg: str) -> None:
    raise SyncError(f"sync-insert: {msg}")


def inst_name(insts: list[isa.Instruction], i: int) -> str:
    inst = insts[i]
    unit, idx = inst.executor
    where = f"dma engine {idx}" if unit is Unit.DMA else f"TPB {idx} {unit.name}"
    return f"#{i} {inst.MNEMONIC} ({where})"


def _auto_blocks(inst: isa.Instruction, want: int) -> int:
    """Largest block count <= want that divides the instruction's outer dimension."""
    if isinstance(inst, isa.CsuCall):
        return 1
    if isinstance(inst, isa.MatMul):
        outer = inst.m
    elif isinstance(inst, isa.Conv2D):
        outer = inst.n * inst.out_hw[0]
    elif isinstance(inst, isa.CvuPipeline):
        rank = len(inst.out_shape)
        if any(st.op in _AXIS0_OPS and st.axis in (0, -rank) for st in inst.stages):
            return 1  # blocks compute independently: a softmax/norm along rows must not split
        outer = inst.out_shape[0]
    elif isinstance(inst, (isa.Copy, isa.Broadcast, isa.Dma)):
        outer = inst.src.num_elements
    elif isinstance(inst, isa.Fill):
        outer = inst.dst.num_elements
    else:
        return 1
    for b in range(min(want, outer), 0, -1):
        if outer % b == 0:
            return b
    return 1


def prepare(insts: list[isa.Instruction], machine, sync_mode: str = "dataflow",
            stream_blocks: int | None = None) -> Needs:
    """The input checked, with its block counts fixed; no orderings yet."""
    if sync_mode not in SYNC_MODES:
        _fail(f"unknown sync mode '{sync_mode}' (known: {', '.join(SYNC_MODES)})")
    insts = list(insts)
    for i, inst in enumerate(insts):
        if not isinstance(inst, isa.Instruction):
            _fail(f"item #{i} is not an ISA instruction: {type(inst).__name__}")
        if inst.sync.monitors or inst.sync.updates:
            _fail(f"{inst_name(insts, i)} already carries monitors/updates; sync insertion "
                  "expects instructions with an empty Sync() (blocks may be set)")
    if sync_mode == "barrier-all":
        blocks = [inst.sync.blocks for inst in insts]
    elif stream_blocks:
        blocks = [inst.sync.blocks if inst.sync.blocks > 1 else _auto_blocks(inst, stream_blocks)
                  for inst in insts]
    else:
        blocks = [inst.sync.blocks for inst in insts]
    insts = [inst if inst.sync.blocks == b else
             dataclasses.replace(inst, sync=isa.Sync(blocks=b)) for inst, b in zip(insts, blocks)]
    for inst in insts:
        inst.check(machine)
    return Needs(insts, blocks)


def analyze(insts: list[isa.Instruction], machine, *, edges=(), rings=(),
            sync_mode: str = "dataflow", stream_blocks: int | None = None) -> Needs:
    out = prepare(insts, machine, sync_mode, stream_blocks)
    insts, blocks = out.insts, out.blocks
    n = len(insts)
    execs = [inst.executor for inst in insts]

    def add(i: int, j: int, need: np.ndarray, why) -> None:
        if execs[i] == execs[j]:
            return  # program order is free
        h = out.needs.get((i, j))
        if h is None:
            out.needs[(i, j)] = Hazard(i, j, need.copy(), [why])
        else:
            h.need = np.maximum(h.need, need)
            h.why.append(why)

    if sync_mode == "barrier-all":
        for j in range(1, n):
            need = np.full(blocks[j], -1, dtype=np.int64)
            need[0] = blocks[j - 1] - 1
            add(j - 1, j, need, ("BARRIER", None, 0, 0))
        return out

    out.needs = {k: h for k, h in derive_hazards(insts, blocks).items()}

    def check_pair(p: int, c: int, what: str) -> None:
        if not (0 <= p < n and 0 <= c < n):
            _fail(f"{what}: instruction index out of range (there are {n} instructions)")
        if p >= c:
            _fail(f"{what}: {inst_name(insts, c)} waits for the later {inst_name(insts, p)}; "
                  "the instruction list must be a valid sequential order")

    def block_need(p: int, c: int, mapping) -> np.ndarray:
        bp, bc = blocks[p], blocks[c]
        if mapping is None:
            mapping = [(b + 1) * bp // bc - 1 if bp >= bc else b * bp // bc for b in range(bc)]
        if len(mapping) != bc or any(not -1 <= k < bp for k in mapping):
            _fail(f"edge {p}->{c}: block mapping {tuple(mapping)} must give, for each of the "
                  f"{bc} consumer blocks, a producer block in [-1, {bp - 1}]")
        return np.asarray(mapping, dtype=np.int64)

    # a whole edge's need (every block of c waits for p's last block) is the largest need p -> c
    # can have, so it is also what any merge with it gives: one read-only array per block shape
    whole: dict[tuple[int, int], np.ndarray] = {}
    needs = out.needs
    edge_why = ("EDGE", None, 0, 0)
    for e in edges:
        p, c = e.producer, e.consumer
        if not (0 <= p < c < n):
            check_pair(p, c, f"edge {p}->{c}")
        if e.granularity == "whole":  # the common case (every token a consumer waits for)
            if execs[p] == execs[c]:
                continue  # program order is free
            key = (blocks[c], blocks[p])
            need = whole.get(key)
            if need is None:
                need = whole[key] = np.full(key[0], key[1] - 1, dtype=np.int64)
                need.setflags(write=False)
            h = needs.get((p, c))
            if h is None:
                needs[(p, c)] = Hazard(p, c, need, [edge_why])
            else:
                h.need = need
                h.why.append(edge_why)
            continue
        if e.granularity == "block":
            need = block_need(e.producer, e.consumer, e.mapping)
        else:
            _fail(f"edge {e.producer}->{e.consumer}: granularity must be 'whole' or 'block', "
                  f"not '{e.granularity}'")
        add(e.producer, e.consumer, need, ("EDGE", None, 0, 0))
    for rb in rings:
        if rb.slots < 1 or len(rb.producers) != len(rb.consumers):
            _fail(f"ring buffer '{rb.name}': needs slots >= 1 and one consumer per producer")
        for k, (p, c) in enumerate(zip(rb.producers, rb.consumers)):
            check_pair(p, c, f"ring buffer '{rb.name}' entry {k}")
            need = (block_need(p, c, None) if rb.block else
                    np.full(blocks[c], blocks[p] - 1, dtype=np.int64))
            add(p, c, need, ("FIFO", None, k, k % rb.slots))
            if k >= rb.slots:
                c_old = rb.consumers[k - rb.slots]
                check_pair(c_old, p, f"ring buffer '{rb.name}' slot reuse {k}")
                add(c_old, p, np.full(blocks[p], blocks[c_old] - 1, dtype=np.int64),
                    ("FIFO-BP", None, k - rb.slots, k % rb.slots))
    if hazards.PRUNE_IMPLIED and (edges or rings):
        # the explicit orderings, like the hazards, only as far as program order does not
        # imply them (hazards.prune_implied)
        prods: dict[int, list[int]] = {}
        for (i, j) in needs:
            prods.setdefault(j, []).append(i)
        for j, ps in prods.items():
            if len(ps) > 1:
                prune_implied(needs, j, ps, execs)
    return out

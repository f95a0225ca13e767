"""The dataflow certificate: which tensor each operand of each instruction reads or writes.

Written by ``sync-insert`` beside the sync certificate (:mod:`.certificate`) and checked by
:mod:`m100.sim.dataflow`, which never imports the compiler. The sync certificate proves the
program orders every conflicting pair of accesses the way the compiler's body order says; it can
not see a body order that is itself wrong (a buffer placed over one still to be read, a load
emitted before the store of what it reads): such a program is race-free and computes a wrong
result. This certificate states what each read is *meant* to read; the checker replays the
program's happens-before order with a tag per byte (the tensor its last writer wrote) and
reports every read of a byte another tensor (or nobody) wrote.

Tensor ids (the tensor-level tag; ids from 1, ``-1`` an operand without a buffer, unchecked):

* an HBSM buffer: its root ``hbsm.alloc`` / ``hbsm.fifo`` (through ``hbsm.view`` s) -- a plan
  piece on one TPB; the scheduler's name for it (:data:`NAMES`, the plan tensor) names it in
  messages. The receivers of one broadcast (one ``m100.bcast`` id: one offset on every TPB,
  written by one DMA / ``tpb.broadcast`` through the first of them) are one tensor;
* DDR / CCB SRAM: the emitter bump-allocates these spaces (no address is ever reused), so
  buffers whose byte ranges overlap are views of one memory tensor (a KV-cache part, the
  columns of a late-stored result, a reshape): one id per connected set of overlapping ranges --
  these are the aliases the certificate states;
* the bytes the program loads (input and weight symbols, segments) are ``loaded`` by the id of
  the buffers over them.

JSON (``format`` :data:`FORMAT`, ``version`` :data:`VERSION`): ``machine``, ``fingerprint``
(the machine's), ``program`` (a CRC-32 of every operand walk's space, TPB, base and levels in
the global order: the certificate is for these addresses), ``instructions``, ``executors``
(the sync certificate's global order), ``tensors`` (the name of id ``k`` at ``k - 1``),
``operands`` (per instruction the ids of its operands in ``Instruction.walks`` order),
``loaded`` (``[space, tpb, lo, hi, id]``), ``outputs`` (the output symbols' bytes, the same
way: what the last writes of those bytes must have written).
"""

from __future__ import annotations

import weakref

from xdsl.ir import Operation, SSAValue

from m100.dialects.hbsm import AllocOp, FifoOp, buffer_root
from m100.dialects.tpb import SegmentOp, SymbolOp
from m100.dialects.tpb_program import class_test
from m100.dialects.twu import SPACE_BY_NAME, array_values, type_to_dtype
from m100.sim.dataflow import FORMAT, VERSION, crc_of
from m100.targets.m100.isa import Space

#: root buffer op -> the plan tensor it holds (set by the scheduler's emitter, read here for
#: the messages only; a buffer without an entry is named by its type)
NAMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

# ``isinstance`` against xDSL's op classes (ABCs), asked of every body op: kept per class
_is_buffer = class_test((AllocOp, FifoOp))
_is_symbol = class_test(SymbolOp)
_is_segment = class_test(SegmentOp)


def _type_name(op: Operation) -> str:
    t = op.results[0].type
    dims = "x".join(str(d) for d in t.dims)
    where = f"hbsm[{t.tpb_index}]" if t.space_enum is Space.HBSM else t.space.data
    return f"<{dims}x{t.element_type}> in {where}"


def build_dataflow(machine, body: list[Operation], ops: list, insts: list,
                   executors: list, unplaced: list | None = None) -> dict:
    """The certificate of ``ops`` (the instruction ops in the global order) whose instructions
    are ``insts``; ``body``: the program's ops (symbols, segments, buffers). ``unplaced``, when
    given, receives the buffers of ``body`` without an ``offset`` (every buffer's offset is read
    here: the pass marks a program resolved when there is none, without reading them again)."""
    tensors: list[str] = []
    by_root: dict[int, int] = {}

    def new(name: str) -> int:
        tensors.append(name)
        return len(tensors)

    # DDR / SRAM: one id per set of overlapping buffers
    spans: dict[Space, list[tuple[int, int, Operation]]] = {}
    for o in body:
        if _is_buffer(o):
            t = o.results[0].type
            off = o.properties.get("offset")
            if off is None:
                if unplaced is not None:
                    unplaced.append(o)
            elif t.space_enum is not Space.HBSM:
                lo = off.value.data
                spans.setdefault(t.space_enum, []).append((lo, lo + t.total_bytes, o))
    comps: dict[Space, list[tuple[int, int, int]]] = {}  # space -> [(lo, hi, id)] sorted
    for space, lst in spans.items():
        lst.sort(key=lambda x: (x[0], -x[1]))
        out = comps[space] = []
        cur_hi, cur = -1, None
        for lo, hi, o in lst:
            if cur is None or lo >= cur_hi:
                name = NAMES.get(o)
                cur = new(name if name else _type_name(o))
                out.append([lo, hi, cur])
                cur_hi = hi
            else:
                cur_hi = max(cur_hi, hi)
                out[-1][1] = cur_hi
            by_root[id(o)] = cur

    def comp_of(space: Space, lo: int, hi: int) -> int | None:
        for a, b, k in comps.get(space, ()):
            if a <= lo and hi <= b:
                return k
        return None

    groups: dict[int, int] = {}  # m100.bcast id -> tensor id

    def tid(buf: SSAValue) -> int:
        r = buffer_root(buf)
        assert r is not None, f"a buffer operand not from an hbsm.alloc / hbsm.fifo: {buf}"
        k = by_root.get(id(r))
        if k is None:
            g = r.attributes.get("m100.bcast")
            if g is not None:  # the receivers of one broadcast: one tensor on several TPBs
                k = groups.get(g.value.data)
            if k is None:
                name = NAMES.get(r)
                tpb = r.results[0].type.tpb_index
                k = new((name + (f" @TPB{tpb}" if g is None else " (broadcast)")) if name
                        else _type_name(r) + (" (broadcast)" if g is not None else ""))
                if g is not None:
                    groups[g.value.data] = k
            by_root[id(r)] = k
        return k

    operands = []
    crc: list[int] = []
    memo: dict[int, int] = {}  # id(buffer value) -> tensor id
    for o, inst in zip(ops, insts):
        p = o.properties  # (read from the dict: ``o.walks`` / ``o.buf_slots`` are calls)
        accs = p["walks"].data
        slot_buf: dict[int, SSAValue] = {}  # id(the slot's ISA walk) -> its buffer
        for n, buf in zip(p["buf_slots"].data, o.bufs):
            acc = accs.get(n.data)
            if acc is not None and hasattr(acc, "to_isa"):
                slot_buf[id(acc.to_isa())] = buf
        row = []
        crc.append(-1)
        for _, w, written in inst.walks():
            buf = slot_buf.get(id(w))
            if buf is None:
                row.append(-1)
            else:
                k = memo.get(id(buf))
                if k is None:
                    k = memo[id(buf)] = tid(buf)
                row.append(k)
            crc += (int(w.space), w.tpb, w.base, int(w.dtype), written)
        operands.append(row)

    loaded, outputs = [], []
    for o in body:
        if _is_symbol(o) and o.role.data in ("input", "weight", "output"):
            space = SPACE_BY_NAME[o.space.data]
            n = 1
            for d in array_values(o.shape):
                n *= d
            lo = o.address.value.data
            hi = lo + (n * type_to_dtype(o.element_type).bits + 7) // 8
            tpb = o.tpb.value.data if space is Space.HBSM else 0
            what = f"{o.role.data} '{o.sym.data}'"
        elif _is_segment(o):
            space = SPACE_BY_NAME[o.space.data]
            lo = o.address.value.data
            hi = lo + o.nbytes
            tpb = 0
            what = f"segment '{o.seg_name.data}'"
        else:
            continue
        if hi <= lo:
            continue
        k = comp_of(space, lo, hi)
        if k is None:
            k = new(what)
        out = _is_symbol(o) and o.role.data == "output"
        (outputs if out else loaded).append([int(space), tpb, lo, hi, k])
    return {"format": FORMAT, "version": VERSION, "machine": machine.name,
            "fingerprint": f"{machine.fingerprint():016x}", "program": crc_of(crc),
            "instructions": len(insts), "executors": executors, "tensors": tensors,
            "operands": operands, "loaded": loaded, "outputs": outputs}


__all__ = ["NAMES", "build_dataflow"]

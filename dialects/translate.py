"""Resolved ``tpb`` IR <-> ISA objects (kept next to the dialects so that ``targets/`` is free of xDSL).

* :func:`op_to_instruction` / :func:`instruction_to_op`: one ``tpb`` instruction op <-> one
  :class:`~m100.targets.m100.isa.Instruction` (the op must be resolved: every operand a
  ``#twu.walk``, a ``sync`` attribute). Buffer operands and ``after`` tokens are IR-only structure
  and are dropped; ``instruction_to_op`` makes ops without them.
* :func:`module_to_program` / :func:`program_to_module`: a module holding one
  ``tpb.program "MACHINE" resolved`` <-> a :class:`~m100.targets.m100.program.Program`. Streams are the
  ``tpb.stream`` regions (instruction ops directly in the program body go to the stream of their
  TPB's cluster, DMAs to the CCB stream, in body order); ``tpb.segment`` and ``tpb.symbol`` ops are
  the data segments and the symbol table; the machine name, fingerprint and metadata are properties
  of the program op (a ``machine_spec`` property travels as the metadata entry ``m100.machine``). ``program_to_module`` emits segments, symbols, then one ``tpb.stream`` per
  stream key in ascending order (metadata sorted by key, as the binary container stores it), so ``module_to_program(program_to_module(p)) == p`` and a module in
  that canonical form survives the round trip textually.

Errors are :class:`TranslateError` (an :class:`~m100.errors.M100Error`) with one line naming the op.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.utils.exceptions import VerifyException

from m100.dialects.tpb import OP_BY_KIND, InstrOp, ProgramOp, SegmentOp, StreamOp, SymbolOp
from m100.dialects.tpb_program import class_test, programs
from m100.dialects.sync import machine_of
from m100.dialects.twu import SPACE_BY_NAME, SPACE_NAMES
from m100.errors import M100Error

from m100.targets.m100.isa import Dma, Instruction, Space
from m100.targets.m100.machine import Machine
from m100.targets.m100.program import CCB_STREAM, MACHINE_SPEC_KEY, Program, Segment


class TranslateError(M100Error, ValueError):
    """IR that cannot be translated to ISA (unresolved, no program op, ...)."""


def op_to_instruction(op: Operation) -> Instruction:
    """The ISA instruction of one resolved ``tpb`` instruction op."""
    if not isinstance(op, InstrOp):
        raise TranslateError(f"'{op.name}' is not a tpb instruction op")
    return _instruction(op)


def instruction_to_op(inst: Instruction) -> InstrOp:
    """The resolved ``tpb`` op of one ISA instruction (no buffer operands, no tokens)."""
    try:
        cls = OP_BY_KIND[type(inst)]
    except KeyError:
        raise TranslateError(f"no tpb op for instruction kind {type(inst).__name__}") from None
    return cls.from_instruction(inst)


def _find_program(module: Operation) -> ProgramOp:
    progs = programs(module)  # the walk's ProgramOps, without xDSL's generator per op (~85 000)
    if len(progs) != 1:
        raise TranslateError(f"expected exactly one 'tpb.program' in the module, found {len(progs)}")
    return progs[0]


_is_instr = class_test(InstrOp)  # ``isinstance(o, InstrOp)``, asked once per class


def _instruction(op: InstrOp) -> Instruction:
    """:func:`op_to_instruction` of an op known to be an instruction op."""
    try:
        return op.to_instruction()
    except VerifyException as e:
        raise TranslateError(str(e)) from None


def _count_instrs(op: Operation) -> int:
    """``len([o for o in op.walk() if isinstance(o, InstrOp)])``: the same ops, found by
    following each block's op list and descending only into ops that have regions, the class
    tested once per class (the 7B prefill layer's ~85 000 ops: xDSL's ``walk`` nests a generator
    per op, region and block). ``test_instruction_count_is_the_walks`` compares them."""
    n = 0
    for region in op.regions:
        for block in region.blocks:
            o = block.first_op
            while o is not None:
                if _is_instr(o):
                    n += 1
                if o.regions:
                    n += _count_instrs(o)
                o = o.next_op
    return n


def module_to_program(module: Operation, machine: Machine | None = None) -> Program:
    """The ISA program of a module holding one resolved ``tpb.program``.

    ``machine`` overrides the machine named by the program op (name and fingerprint come from it).
    """
    prog = _find_program(module)
    if prog.level.data != "resolved":
        raise TranslateError(f"'tpb.program' is at level '{prog.level.data}'; only a resolved "
                             "program translates to ISA (run the backend passes first)")
    spec = prog.machine_spec.data if prog.machine_spec is not None else None
    if machine is None:
        try:
            machine = machine_of(prog)
        except VerifyException as e:
            raise TranslateError(str(e)) from None
        fp = (int(prog.fingerprint.data, 16) if prog.fingerprint is not None
              else machine.fingerprint())
        name = prog.machine.data
    else:
        fp, name = machine.fingerprint(), machine.name
        spec = None if machine.is_preset() else machine.spec()
    meta = prog.metadata_dict()
    if spec is not None:  # the program file carries the machine, as the IR did
        meta[MACHINE_SPEC_KEY] = spec
    out = Program(name, fp, metadata=meta)

    for op in prog.body.ops:
        if isinstance(op, StreamOp):
            key = op.cluster.value.data
            stream = out.streams.setdefault(key, [])
            for inner in op.body.ops:
                if _is_instr(inner):  # (the class asked once per class, as ``_count_instrs``)
                    stream.append(_instruction(inner))
        elif isinstance(op, InstrOp):
            inst = op_to_instruction(op)
            key = CCB_STREAM if isinstance(inst, Dma) else machine.cluster_of(inst.tpb)  # type: ignore
            out.streams.setdefault(key, []).append(inst)
        elif isinstance(op, SegmentOp):
            out.segments.append(Segment(SPACE_BY_NAME[op.space.data], op.address.value.data,
                                        op.bytes, op.seg_name.data))
        elif isinstance(op, SymbolOp):
            out.symbols.append(op.to_symbol())
    placed = sum(len(v) for v in out.streams.values())
    if _count_instrs(prog) != placed:  # never drop an instruction silently
        nested = [op for op in prog.walk() if isinstance(op, InstrOp)]
        stray = next(op for op in nested if not isinstance(op.parent_op(), (ProgramOp, StreamOp)))
        raise TranslateError(f"{stray.describe()} sits inside '{stray.parent_op().name}'; "
                             "instructions must be directly in the tpb.program or a tpb.stream")
    return out


def program_to_module(program: Program) -> ModuleOp:
    """The resolved ``tpb`` IR of a program (canonical form: segments, symbols, streams)."""
    body: list[Operation] = []
    for s in program.segments:
        body.append(SegmentOp(s.name, SPACE_NAMES[Space(s.space)], s.address, bytes(s.data)))
    for sym in program.symbols:
        body.append(SymbolOp.from_symbol(sym))
    for key in sorted(program.streams):
        body.append(StreamOp(key, [instruction_to_op(i) for i in program.streams[key]]))
    meta = dict(sorted(program.metadata.items()))
    spec = meta.pop(MACHINE_SPEC_KEY, None)
    prog = ProgramOp(program.machine, "resolved", body, program.fingerprint, meta, machine_spec=spec)
    return ModuleOp([prog])


__all__ = ["TranslateError", "op_to_instruction", "instruction_to_op", "module_to_program",
           "program_to_module"]

"""The one program loader of ``m100-sim``, ``m100-translate`` and ``m100 run``.

A program reaches a tool as a binary program file (``.m100``), assembly text (``.asm``) or, in
``m100-translate`` only, resolved ``tpb`` IR (translated by ``m100.dialects.translate`` and then
handed to :func:`finish`). Every path ends in :func:`finish`, which checks the program against its
machine exactly once and the same way for every tool: the interpreter never runs a program that
``m100-translate`` would refuse to write (e.g. an output symbol past the end of DDR).

* binary: with an explicit machine, the header's fingerprint is compared *before* the instruction
  streams are decoded (their field widths depend on the machine, so decoding with the wrong one
  gives misleading errors such as a bad dtype code);
* assembly: ``.machine NAME 0`` (fingerprint 0) means "the current machine of that name, or the
  explicit one": the fingerprint is filled in before validation.

Errors are :class:`~m100.targets.m100.program.ProgramError` (one line, prefixed with the file).
"""

from __future__ import annotations

from pathlib import Path

from .machine import Machine, MachineError, get_machine
from .program import Program, ProgramError, ProgramFile, read_file


def finish(program: Program, machine: Machine | None = None, where: str = "") -> Program:
    """Validate ``program`` for ``machine`` (default: the program's own) and return it."""
    try:
        program.validate(machine)
    except ProgramError as e:
        raise ProgramError(f"{where}: {e}" if where else str(e)) from None
    return program


def from_bytes(data: bytes, machine: Machine | None = None, where: str = "",
               source: ProgramFile | None = None) -> Program:
    """A binary program file's contents, decoded for ``machine`` and validated (``source``: the
    file they were read from, ``Program.from_bytes``)."""
    try:
        program = Program.from_bytes(data, machine, source)
    except ProgramError as e:
        raise ProgramError(f"{where}: {e}" if where else str(e)) from None
    return finish(program, machine, where)


def from_asm(text: str, machine: Machine | None = None, where: str = "<asm>") -> Program:
    """Assembly text, parsed and validated (fingerprint 0: the named or explicit machine's)."""
    from .asm import parse_program

    program = parse_program(text, where)
    if program.fingerprint == 0:  # hand-written assembly: "the current machine of that name"
        try:
            m = machine or get_machine(program.machine)
        except MachineError as e:  # an unknown name
            raise ProgramError(f"{where}: {e}") from None
        program.fingerprint = m.fingerprint()
        program.machine = m.name
    return finish(program, machine, where)


def load(path: str | Path, machine: Machine | None = None) -> Program:
    """A program file: ``.asm`` is assembly text, anything else a binary program file."""
    p = Path(path)
    try:
        data, source = read_file(p)
    except OSError as e:
        raise ProgramError(f"{p}: cannot read program: {e.strerror}") from None
    if p.suffix == ".asm":
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProgramError(f"{p}: not a text file (invalid UTF-8 at byte {e.start})") from None
        return from_asm(text, machine, str(p))
    return from_bytes(data, machine, str(p), source)


__all__ = ["finish", "from_asm", "from_bytes", "load"]

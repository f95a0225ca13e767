"""The text form of TPB instructions and programs: ``parse(format(x)) == x`` exactly.

One instruction per line: the mnemonic, then ``field=value`` pairs in the dataclass's field order;
fields at their default value are omitted. Values::

    int        32  -7  0x1f00                    (bases, masks: hex; parse accepts either)
    float      1.5  -0.0  1e-05  inf  nan        (Python repr: exact round trip)
    bool       true | false
    enum       relu  gather  block ...           (lower-case member name)
    int list   [1,8,32]    shapes list [[2,3],[4]]
    walk       hbsm1@0x100:i8[(0,32,992),(0,1,31)]   space[tpb]@base:dtype[(initial,step,final),...]
               ddr@0x2000:f32[(0,1,255)]              (tpb digits only for HBSM, or if non-zero)
    walk list  [W, W]
    nested     epilogue={act=relu bias=W requant={multiplier=3 shift=7}}
    stages     [exp(in0), rsum(s0){axis=1}, add(s1,#0.5), layernorm(in0,in1,in2){fparam=1e-05}]
               args: in<i> (input i), s<i> (stage i), #<float> (immediate); a non-canonical Ref
               (an index or immediate that its kind ignores) prints as ref(kind,index,imm)
    sync       sync{blocks=2 wait(c1@t0>=1,+1) signal(c2->0x3,+1,end)}
               wait(c<counter>@t<tpb> >= <expected>, +<per_block>)
               signal(c<counter> -> <tpb mask>, +<amount>, end|block)

Newlines end an instruction except inside brackets or after a ``\\``, so a long one may be
wrapped. Comments run from ``;`` or ``//`` to the end of the line. Program directives::

    .machine tiny 0x5d1c...        machine name and fingerprint (first; a preset may omit the
                                   fingerprint: it is then the preset's current one)
    .meta "key" "value"
    .symbol input "x" f32[1,8,32] ddr@0x2000      (hbsm1@0x40 for an HBSM symbol of TPB 1)
    .segment ddr@0x1000 "weights"                 then .data <hex> lines (64 bytes each)
    (input also accepts ``ddr 0x2000`` for ``ddr@0x2000`` and an unquoted identifier name)
    .ccb                           the CCB (DMA) stream follows
    .cluster 0                     cluster 0's stream follows

Errors are :class:`AsmError` with the message ``file:line:col: what``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import types
import typing
from numbers import Integral
from enum import IntEnum
from typing import Any

from m100.errors import M100Error

from . import isa
from .isa import (BY_MNEMONIC, DType, Epilogue, Instruction, Level, Monitor, Ref, RefKind, Requant,
                  Space, Stage, Sync, Trigger, Update, Walk)
from .machine import PRESETS
from .program import CCB_STREAM, Program, Segment, Symbol


class AsmError(M100Error, ValueError):
    """Text that is not valid TPB assembly; the message is ``file:line:col: what``."""


_HEX_FIELDS = {"base", "tpb_mask", "address"}
_DATA_CHUNK = 64


# ----------------------------------------------------------------------------------------------
# printing
# ----------------------------------------------------------------------------------------------
def _float(x: float) -> str:
    return repr(float(x))


def _same(a: Any, b: Any) -> bool:
    """Equality for omitting defaults that also tells -0.0 from 0.0 (bitwise floats), recursively
    through tuples and dataclasses (whose ``==`` would treat them as equal)."""
    if a is b:
        return True
    if isinstance(a, float) or isinstance(b, float):
        try:
            return struct.pack("<d", float(a)) == struct.pack("<d", float(b))
        except (TypeError, ValueError):
            return False
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return a == b


def format_walk(w: Walk) -> str:
    tpb = str(w.tpb) if (w.space is Space.HBSM or w.tpb) else ""
    lv = ",".join(f"({v.initial},{v.step},{v.final})" for v in w.levels)
    return f"{Space(w.space).name.lower()}{tpb}@{w.base:#x}:{DType(w.dtype).short}[{lv}]"


def _format_ref(r: Ref) -> str:
    imm0 = _same(r.imm, 0.0)
    if r.kind is RefKind.IMM and r.index == 0:
        return f"#{_float(r.imm)}"
    if r.kind is RefKind.INPUT and imm0 and r.index >= 0:
        return f"in{r.index}"
    if r.kind is RefKind.STAGE and imm0 and r.index >= 0:
        return f"s{r.index}"
    return f"ref({RefKind(r.kind).name.lower()},{r.index},{_float(r.imm)})"


def _format_stage(s: Stage) -> str:
    out = f"{isa.CvuOp(s.op).name.lower()}({','.join(_format_ref(a) for a in s.args)})"
    extra = _format_fields(s, skip=("op", "args"))
    return out + ("{" + extra + "}" if extra else "")


def format_sync(s: Sync) -> str:
    parts = [] if s.blocks == 1 else [f"blocks={s.blocks}"]
    parts += [f"wait(c{m.counter}@t{m.tpb}>={m.expected},{m.per_block:+d})" for m in s.monitors]
    parts += [f"signal(c{u.counter}->{u.tpb_mask:#x},{u.amount:+d},{Trigger(u.trigger).name.lower()})"
              for u in s.updates]
    return "sync{" + " ".join(parts) + "}"


def _format_value(name: str, v: Any) -> str:
    if isinstance(v, Walk):
        return format_walk(v)
    if isinstance(v, Sync):
        return format_sync(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, IntEnum):
        return v.name.lower()
    if isinstance(v, Integral):
        v = int(v)
        return f"{v:#x}" if name in _HEX_FIELDS else str(v)
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, tuple):
        if name == "stages" or (v and isinstance(v[0], Stage)):  # (a matmul's ``post`` too)
            return "[" + ", ".join(_format_stage(s) for s in v) + "]"
        sep = ", " if v and isinstance(v[0], Walk) else ","
        return "[" + sep.join(_format_value(name, x) for x in v) + "]"
    if dataclasses.is_dataclass(v):
        return "{" + _format_fields(v) + "}"
    raise TypeError(f"cannot format {name}={v!r}")


def _format_fields(obj: Any, skip: tuple[str, ...] = ()) -> str:
    parts = []
    for f in dataclasses.fields(obj):
        if f.name in skip:
            continue
        v = getattr(obj, f.name)
        if f.default is not dataclasses.MISSING and _same(v, f.default):
            continue
        if f.name == "sync":
            parts.append(format_sync(v))
        else:
            parts.append(f"{f.name}={_format_value(f.name, v)}")
    return " ".join(parts)


def format_instruction(inst: Instruction) -> str:
    """One line of assembly for ``inst``."""
    if type(inst).MNEMONIC not in BY_MNEMONIC:
        raise AsmError(f"<format>:1:1: {type(inst).__name__} is not an instruction kind")
    body = _format_fields(inst)
    return f"{inst.MNEMONIC} {body}" if body else inst.MNEMONIC


def format_program(prog: Program) -> str:
    """The whole program as assembly (directives, then the streams in key order)."""
    lines = [f"; m100 program for machine '{prog.machine}'",
             f".machine {json.dumps(prog.machine)} {prog.fingerprint:#018x}"]
    for k in sorted(prog.metadata):
        lines.append(f".meta {json.dumps(k)} {json.dumps(prog.metadata[k])}")
    for s in prog.symbols:
        shape = ",".join(str(d) for d in s.shape)
        tpb = str(s.tpb) if (s.space is Space.HBSM or s.tpb) else ""
        lines.append(f".symbol {s.role} {json.dumps(s.name)} {DType(s.dtype).short}[{shape}] "
                     f"{Space(s.space).name.lower()}{tpb}@{s.address:#x}")
    for s in prog.segments:
        lines.append(f".segment {Space(s.space).name.lower()}@{s.address:#x} {json.dumps(s.name)}"
                     f"  ; {len(s.data)} bytes")
        data = bytes(s.data)
        for i in range(0, len(data), _DATA_CHUNK):
            lines.append(f".data {data[i:i + _DATA_CHUNK].hex()}")
    for key in sorted(prog.streams):
        lines.append(".ccb" if key == CCB_STREAM else f".cluster {key}")
        lines.extend(format_instruction(i) for i in prog.streams[key])
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# lexing
# ----------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"""
    (?P<ws>(?:[ \t\r]|\\\r?\n)+)
  | (?P<comment>(?:;|//)[^\n]*)
  | (?P<nl>\n)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<num>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|(?:inf|nan)\b))
  | (?P<ident>\.?[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>>=|->|[()\[\]{}=,@:#])
""", re.VERBOSE)


_HEXDATA = re.compile(r"[ \t]*([0-9a-fA-F]*)")


class _Tok(typing.NamedTuple):
    kind: str
    text: str
    line: int
    col: int


class _Parser:
    def __init__(self, text: str, filename: str):
        self.filename = filename
        self.toks: list[_Tok] = []
        pos, line, lstart, depth = 0, 1, 0, 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                self.toks.append(_Tok("bad", text[pos], line, pos - lstart + 1))
                break
            kind, s = m.lastgroup, m.group()
            col = pos - lstart + 1
            if kind == "nl":
                if depth == 0:
                    self.toks.append(_Tok("nl", s, line, col))
                line, lstart = line + 1, m.end()
            elif kind == "punct":
                depth += s in "([{"
                depth -= s in ")]}" and depth > 0
                self.toks.append(_Tok(kind, s, line, col))
            elif kind == "ws" and "\n" in s:  # a backslash continuation
                line += s.count("\n")
                lstart = pos + s.rfind("\n") + 1
            elif kind not in ("ws", "comment"):
                self.toks.append(_Tok(kind, s, line, col))
                if kind == "ident" and s == ".data":  # raw hex bytes up to the end of the line
                    h = _HEXDATA.match(text, m.end())
                    if h.group(1):
                        self.toks.append(_Tok("hex", h.group(1), line, h.start(1) - lstart + 1))
                    pos = h.end()
                    continue
            pos = m.end()
        end_col = len(text) - lstart + 1
        self.toks.append(_Tok("nl", "", line, end_col))
        self.toks.append(_Tok("eof", "", line, end_col))
        self.i = 0

    # --- primitives ---
    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def error(self, what: str, tok: _Tok | None = None) -> AsmError:
        t = tok or self.peek()
        if t.kind == "bad":
            what = f"unexpected character {t.text!r} ({what})"
        return AsmError(f"{self.filename}:{t.line}:{t.col}: {what}")

    @staticmethod
    def _show(t: _Tok) -> str:
        return {"nl": "end of line", "eof": "end of file"}.get(t.kind, repr(t.text))

    def expect(self, text: str) -> _Tok:
        t = self.peek()
        if t.text != text or t.kind in ("str", "nl", "eof"):
            raise self.error(f"expected '{text}', found {self._show(t)}")
        return self.next()

    def accept(self, text: str) -> bool:
        t = self.peek()
        if t.text == text and t.kind in ("punct", "ident"):
            self.i += 1
            return True
        return False

    def ident(self, what: str) -> _Tok:
        t = self.peek()
        if t.kind != "ident":
            raise self.error(f"expected {what}, found {self._show(t)}")
        return self.next()

    def integer(self, what: str = "an integer") -> int:
        t = self.peek()
        if t.kind == "num":
            try:
                v = int(t.text, 0)
            except ValueError:
                raise self.error(f"expected {what}, found {t.text!r}") from None
            self.next()
            return v
        raise self.error(f"expected {what}, found {self._show(t)}")

    def number(self, what: str = "a number") -> float:
        t = self.peek()
        if t.kind == "num":
            try:
                v = float(int(t.text, 0)) if t.text.lstrip("+-").lower().startswith("0x") \
                    else float(t.text)
            except ValueError:
                raise self.error(f"expected {what}, found {t.text!r}") from None
            self.next()
            return v
        raise self.error(f"expected {what}, found {self._show(t)}")

    def string(self, what: str) -> str:
        t = self.peek()
        if t.kind != "str":
            raise self.error(f"expected {what} (a quoted string), found {self._show(t)}")
        try:
            v = json.loads(t.text)
        except ValueError:
            raise self.error(f"bad string literal {t.text}") from None
        self.next()
        return v

    def enum(self, cls: type, what: str) -> Any:
        t = self.ident(what)
        try:
            return cls[t.text.upper()]
        except KeyError:
            raise self.error(f"unknown {what} '{t.text}' (known: "
                             f"{', '.join(m.name.lower() for m in cls)})", t) from None

    def end_of_line(self) -> None:
        t = self.peek()
        if t.kind not in ("nl", "eof"):
            raise self.error(f"expected end of line, found {self._show(t)}")
        self.next()

    def prefixed_int(self, prefix: str, what: str) -> int:
        """An identifier ``<prefix><digits>`` (c3, t0, in1, s2)."""
        t = self.ident(what)
        m = re.fullmatch(re.escape(prefix) + r"(\d+)", t.text)
        if not m:
            raise self.error(f"expected {what} ('{prefix}<n>'), found {t.text!r}", t)
        return int(m.group(1))

    # --- values ---
    def space_tpb(self, what: str) -> tuple[Space, int]:
        t = self.ident(what)
        m = re.fullmatch(r"(ddr|sram|hbsm)(\d*)", t.text)
        if not m:
            raise self.error(f"expected a memory space (ddr, sram, hbsm<tpb>) for {what}, "
                             f"found {t.text!r}", t)
        space = Space[m.group(1).upper()]
        if space is Space.HBSM and not m.group(2):
            raise self.error(f"an HBSM {what} needs its TPB, e.g. hbsm0", t)
        return space, int(m.group(2) or 0)

    def dtype(self) -> DType:
        t = self.ident("an element type")
        try:
            return DType[t.text.upper()]
        except KeyError:
            raise self.error(f"unknown element type '{t.text}' "
                             f"(known: {', '.join(d.short for d in DType)})", t) from None

    def walk(self) -> Walk:
        space, tpb = self.space_tpb("walk")
        self.expect("@")
        base = self.integer("a base address")
        self.expect(":")
        dt = self.dtype()
        self.expect("[")
        levels = []
        while not self.accept("]"):
            if levels:
                self.expect(",")
            self.expect("(")
            a = self.integer("Initial")
            self.expect(",")
            b = self.integer("Step")
            self.expect(",")
            c = self.integer("Final")
            self.expect(")")
            levels.append(Level(a, b, c))
        return Walk(space, tpb, base, dt, tuple(levels))

    def sync(self) -> Sync:
        self.expect("{")
        blocks, mons, ups = 1, [], []
        while not self.accept("}"):
            t = self.ident("'blocks=', 'wait(...)' or 'signal(...)'")
            if t.text == "blocks":
                self.expect("=")
                blocks = self.integer("a block count")
            elif t.text == "wait":
                self.expect("(")
                c = self.prefixed_int("c", "a counter")
                self.expect("@")
                tpb = self.prefixed_int("t", "a TPB")
                self.expect(">=")
                exp = self.integer("an expected value")
                self.expect(",")
                per = self.integer("a per-block increment")
                self.expect(")")
                mons.append(Monitor(tpb, c, exp, per))
            elif t.text == "signal":
                self.expect("(")
                c = self.prefixed_int("c", "a counter")
                self.expect("->")
                mask = self.integer("a TPB mask")
                self.expect(",")
                amount = self.integer("an update amount")
                self.expect(",")
                trig = self.enum(Trigger, "trigger")
                self.expect(")")
                ups.append(Update(c, mask, amount, trig))
            else:
                raise self.error(f"unknown sync item '{t.text}'", t)
        return Sync(blocks, tuple(mons), tuple(ups))

    def ref(self) -> Ref:
        if self.accept("#"):
            return Ref(RefKind.IMM, 0, self.number("an immediate"))
        t = self.peek()
        if t.kind == "ident" and t.text == "ref":
            self.next()
            self.expect("(")
            kind = self.enum(RefKind, "ref kind")
            self.expect(",")
            idx = self.integer("a ref index")
            self.expect(",")
            imm = self.number("an immediate")
            self.expect(")")
            return Ref(kind, idx, imm)
        t = self.ident("a stage argument (in<i>, s<i>, #<imm>)")
        m = re.fullmatch(r"(in|s)(\d+)", t.text)
        if not m:
            raise self.error(f"expected a stage argument (in<i>, s<i>, #<imm>), found {t.text!r}", t)
        return Ref(RefKind.INPUT if m.group(1) == "in" else RefKind.STAGE, int(m.group(2)))

    def stage(self) -> Stage:
        op = self.enum(isa.CvuOp, "CVU op")
        self.expect("(")
        args = []
        while not self.accept(")"):
            if args:
                self.expect(",")
            args.append(self.ref())
        kw: dict[str, Any] = {}
        if self.accept("{"):
            kw = self.fields(Stage, "}", skip=("op", "args"))
        return Stage(op, tuple(args), **kw)

    def value(self, tp: Any, name: str) -> Any:
        origin = typing.get_origin(tp)
        if origin is typing.Union or origin is types.UnionType:
            inner = [a for a in typing.get_args(tp) if a is not type(None)]
            return self.value(inner[0], name)
        if tp is Walk:
            return self.walk()
        if tp is Sync:
            return self.sync()
        if tp is bool:
            t = self.ident("true or false")
            if t.text not in ("true", "false"):
                raise self.error(f"expected true or false for '{name}', found {t.text!r}", t)
            return t.text == "true"
        if tp is int:
            return self.integer(f"an integer for '{name}'")
        if tp is float:
            return self.number(f"a number for '{name}'")
        if isinstance(tp, type) and issubclass(tp, IntEnum):
            return self.enum(tp, name)
        if origin is tuple:
            args = typing.get_args(tp)
            elem = args[0]
            start = self.expect("[")
            out = []
            while not self.accept("]"):
                if out:
                    self.expect(",")
                out.append(self.stage() if elem is Stage else self.value(elem, name))
            if len(args) > 1 and args[1] is not Ellipsis and len(out) != len(args):
                raise self.error(f"'{name}' takes exactly {len(args)} values, got {len(out)}", start)
            return tuple(out)
        if dataclasses.is_dataclass(tp):
            self.expect("{")
            return tp(**self.fields(tp, "}"))
        raise self.error(f"internal: no syntax for field '{name}' of type {tp}")

    def fields(self, cls: type, end: str | None, skip: tuple[str, ...] = ()) -> dict[str, Any]:
        """``key=value`` pairs until ``end`` (a closing bracket) or end of line (``None``)."""
        hints = _hints(cls)
        known = {f.name: f for f in dataclasses.fields(cls) if f.name not in skip}
        out: dict[str, Any] = {}
        while True:
            t = self.peek()
            if end is None and t.kind in ("nl", "eof"):
                break
            if end is not None and self.accept(end):
                break
            key = self.ident(f"a field of {cls.__name__}")
            if key.text == "sync" and "sync" in known and self.peek().text == "{":
                name = "sync"
            else:
                name = key.text
                if name not in known:
                    raise self.error(f"{getattr(cls, 'MNEMONIC', cls.__name__)} has no field "
                                     f"'{name}' (fields: {', '.join(known)})", key)
                self.expect("=")
            if name in out:
                raise self.error(f"field '{name}' given twice", key)
            out[name] = self.value(hints[name], name)
        missing = [n for n, f in known.items() if n not in out and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise self.error(f"{getattr(cls, 'MNEMONIC', cls.__name__)}: missing field(s) "
                             f"{', '.join(missing)}")
        return out

    def instruction(self) -> Instruction:
        t = self.ident("an instruction mnemonic")
        kind = BY_MNEMONIC.get(t.text)
        if kind is None:
            raise self.error(f"unknown instruction '{t.text}' (known: {', '.join(BY_MNEMONIC)})", t)
        kw = self.fields(kind, None)
        try:
            return kind(**kw)
        except (TypeError, ValueError) as e:
            raise self.error(f"{t.text}: {e}", t) from None


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, vars(isa))
    return _HINTS[cls]


# ----------------------------------------------------------------------------------------------
# public parsing API
# ----------------------------------------------------------------------------------------------
def parse_walk(text: str, filename: str = "<asm>") -> Walk:
    p = _Parser(text, filename)
    w = p.walk()
    p.end_of_line()
    return w


def parse_instruction(text: str, filename: str = "<asm>") -> Instruction:
    """Parse one instruction (comments and surrounding blank lines allowed)."""
    p = _Parser(text, filename)
    while p.peek().kind == "nl" and p.peek().text:
        p.next()
    inst = p.instruction()
    p.end_of_line()
    while p.peek().kind == "nl":
        p.next()
    if p.peek().kind != "eof":
        raise p.error("expected a single instruction")
    return inst


def parse_program(text: str, filename: str = "<asm>") -> Program:
    """Parse :func:`format_program` output (or hand-written assembly) into a :class:`Program`.
    Only the syntax is checked here; call ``Program.validate(machine)`` for the semantics."""
    p = _Parser(text, filename)
    prog: Program | None = None
    stream: list[Instruction] | None = None
    last_seg: int | None = None
    while p.peek().kind != "eof":
        t = p.peek()
        if t.kind == "nl":
            p.next()
            continue
        if t.kind == "ident" and t.text.startswith("."):
            p.next()
            d = t.text
            if d == ".machine":
                if prog is not None:
                    raise p.error("'.machine' given twice", t)
                name = p.string("a machine name") if p.peek().kind == "str" else \
                    p.ident("a machine name").text
                if p.peek().kind in ("nl", "eof"):  # hand-written: the preset's fingerprint
                    if name not in PRESETS:
                        raise p.error(f"machine '{name}' is not a preset ({', '.join(PRESETS)}); "
                                      "give its fingerprint: .machine <name> <fingerprint>")
                    fp = PRESETS[name].fingerprint()
                else:
                    fp = p.integer("a machine fingerprint")
                    if not 0 <= fp < 1 << 64:
                        raise p.error("the fingerprint must be a 64-bit unsigned integer")
                prog = Program(name, fp)
                p.end_of_line()
                continue
            if prog is None:
                raise p.error("the program must start with '.machine <name> <fingerprint>'", t)
            if d == ".meta":
                k = p.string("a metadata key")
                prog.metadata[k] = p.string("a metadata value")
            elif d == ".symbol":
                role = p.ident("'input', 'output' or 'weight'")
                if role.text not in ("input", "output", "weight"):
                    raise p.error(f"a symbol role is 'input', 'output' or 'weight', not "
                                  f"{role.text!r}", role)
                name = p.string("a symbol name") if p.peek().kind == "str" else \
                    p.ident("a symbol name").text
                dt = p.dtype()
                p.expect("[")
                shape: list[int] = []
                while not p.accept("]"):
                    if shape:
                        p.expect(",")
                    shape.append(p.integer("a dimension"))
                space, tpb = p.space_tpb("symbol")
                p.accept("@")
                addr = p.integer("an address")
                prog.symbols.append(Symbol(name, role.text, tuple(shape), dt, space, addr, tpb))
            elif d == ".segment":
                space, tpb = p.space_tpb("segment")
                if tpb:
                    raise p.error("a segment lives in DDR or SRAM")
                p.accept("@")
                addr = p.integer("an address")
                name = p.string("a segment name") if p.peek().kind == "str" else ""
                prog.segments.append(Segment(space, addr, b"", name))
                last_seg = len(prog.segments) - 1
            elif d == ".data":
                if last_seg is None or stream is not None:
                    raise p.error("'.data' must follow a '.segment'", t)
                chunk = p.peek()
                if chunk.kind != "hex" or len(chunk.text) % 2:
                    raise p.error("expected an even number of hex digits after '.data'")
                p.next()
                seg = prog.segments[last_seg]
                prog.segments[last_seg] = dataclasses.replace(seg, data=seg.data
                                                              + bytes.fromhex(chunk.text))
            elif d in (".ccb", ".cluster"):
                key = CCB_STREAM if d == ".ccb" else p.integer("a cluster number")
                if key in prog.streams:
                    raise p.error(f"stream {'.ccb' if key == CCB_STREAM else key} given twice", t)
                stream = prog.streams[key] = []
                last_seg = None
            else:
                raise p.error(f"unknown directive '{d}' (known: .machine .meta .symbol .segment "
                              ".data .ccb .cluster)", t)
            p.end_of_line()
            continue
        if stream is None:
            raise p.error("an instruction must follow '.ccb' or '.cluster <n>'")
        stream.append(p.instruction())
        p.end_of_line()
    if prog is None:
        raise AsmError(f"{filename}:1:1: empty program (expected '.machine <name> <fingerprint>')")
    return prog


__all__ = ["AsmError", "format_instruction", "format_program", "format_walk", "format_sync",
           "parse_instruction", "parse_program", "parse_walk"]

"""Independent check of a compiler's dataflow certificate: every read reads the plan's tensor.

The compiler (``sync-insert``, ``passes/backend/sync_insert/dataflow.py``) states, for every
operand of every instruction, the id of the tensor it reads or writes (format
``m100-dataflow-certificate``; DDR / SRAM views of one memory tensor share its id -- the aliases
the certificate states; the bytes the program loads are ``loaded`` with their id). The race
check and the sync certificate prove the program runs in the order its body says; a body order
that is itself wrong (a buffer placed over one still to be read, a load before the store of what
it reads) passes both and computes a wrong result. This check replays the program:

* happens-before is derived from the program's own monitors and updates
  (:class:`~m100.sim.certificate.HappensBefore`, as the sync certificate's check does), and its
  block nodes are taken in one topological order: reads when a block starts, writes when it
  ends. In a race-free program every conflicting pair is ordered, so the last writer of each
  byte a read sees is the same in every execution (a racy one is the race check's report);
* every byte of DDR, CCB SRAM and each HBSM carries the *write event* that last wrote it (the
  instruction, block and tensor id; 0: never written): numpy arrays of 256 KiB pages, made when
  first written;
* the accesses of a block are the interpreter's (``Exec.reads(b)`` / ``writes(b)``, the race
  checker's byte sets; a CSU gather / scatter's table as a whole, :mod:`.cert_conflicts`), each
  matched to the operand whose walk it is (or lies in);
* a read of a byte whose last write was of another tensor, or that nobody wrote (and, at the
  end, an output symbol's byte left so: the host reads it), is one line
  naming the instruction, operand, the expected tensor, the tensor found and the instruction
  that wrote it (at most :data:`MAX_PROBLEMS`; operands with id ``-1``, and bytes written
  through one, are not checked).

Tensor level, not element level: the tag says which tensor a byte holds, not which element of
it -- that would need, per operand, the map from the walk's element sequence to the tensor's
element index (the plan's tiling, views and transposes), which the compiler does not keep at
the instruction level. A read of the right tensor's wrong element (a slot, a swapped tile of
one buffer) is left to the oracle comparisons.

Runs apart from the interpreter's run (``m100 check``, the fuzzers, ``m100-sim
--check-dataflow``): the default functional path is unchanged. Never imports xDSL or the
compiler.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np

from m100.errors import M100Error
from m100.targets.m100.isa import Space
from m100.targets.m100.machine import get_machine

FORMAT = "m100-dataflow-certificate"
VERSION = 1
#: problems reported at most
MAX_PROBLEMS = 20
_PAGE_BITS = 18
_PAGE = 1 << _PAGE_BITS
_SPACE = {int(Space.DDR): "DDR", int(Space.SRAM): "SRAM", int(Space.HBSM): "HBSM"}


class DataflowError(M100Error):
    """An unreadable dataflow certificate file."""


def load(path) -> dict:
    try:
        cert = json.loads(Path(path).read_text())
    except OSError as e:
        raise DataflowError(f"{path}: cannot read the dataflow certificate: {e.strerror}") \
            from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise DataflowError(f"{path}: not a dataflow certificate (not JSON)") from None
    if not isinstance(cert, dict) or cert.get("format") != FORMAT:
        raise DataflowError(f"{path}: not a dataflow certificate (format '{FORMAT}' expected)")
    return cert


def program_crc(insts: list) -> str:
    """A CRC-32 of every operand walk's (space, TPB, base, element type), instruction by
    instruction in the global order: the certificate is for the addresses it was made with."""
    v: list[int] = []
    for inst in insts:
        v.append(-1)
        for _, w, written in inst.walks():
            v += (int(w.space), w.tpb, w.base, int(w.dtype), written)
    return crc_of(v)


def crc_of(v: list[int]) -> str:
    """:func:`program_crc` of its integers (the compiler makes them as it goes)."""
    return f"{zlib.crc32(np.asarray(v, dtype=np.int64).tobytes()):08x}"


class _Tags:
    """The write event of every byte, per memory space (``(space, TPB)``), in pages."""

    def __init__(self):
        self.pages: dict[tuple, np.ndarray] = {}
        # write events (index 0: never written): tensor id, instruction (-1 the loader), block
        self.tensor = np.zeros(1024, dtype=np.int64)
        self.inst = np.full(1024, -1, dtype=np.int64)
        self.block = np.zeros(1024, dtype=np.int64)
        self.n = 1

    def event(self, tensor: int, inst: int, block: int) -> int:
        n = self.n
        if n == self.tensor.size:
            self.tensor, self.inst, self.block = (np.concatenate([a, np.zeros_like(a)])
                                                  for a in (self.tensor, self.inst, self.block))
        self.tensor[n], self.inst[n], self.block[n] = tensor, inst, block
        self.n = n + 1
        return n

    @staticmethod
    def _pieces(bs):
        """(page, base byte of the part, slice of the page, its members: a bool mask over the
        slice, or page indices (slice None), or None: all of the slice)."""
        lo, hi = bs.lo, bs.hi
        arr = None if bs._bitmap() else bs.arr
        if arr is None:
            m = bs.mask if bs._bitmap() else None
            for p in range(lo >> _PAGE_BITS, ((hi - 1) >> _PAGE_BITS) + 1):
                base = p << _PAGE_BITS
                a, b = max(lo, base), min(hi, base + _PAGE)
                yield p, slice(a - base, b - base), None if m is None else m[a - lo:b - lo]
            return
        pages = arr >> _PAGE_BITS
        cuts = np.flatnonzero(pages[1:] != pages[:-1]) + 1
        for s, e in zip([0, *cuts.tolist()], [*cuts.tolist(), arr.size]):
            p = int(pages[s])
            yield p, None, arr[s:e] - (p << _PAGE_BITS)

    def write(self, space: tuple, bs, ev: int) -> None:
        for p, sl, sel in self._pieces(bs):
            key = (space, p)
            page = self.pages.get(key)
            if page is None:
                page = self.pages[key] = np.zeros(_PAGE, dtype=np.int32)
            if sl is None:
                page[sel] = ev
            elif sel is None:
                page[sl] = ev
            else:
                page[sl][sel] = ev

    def check(self, space: tuple, bs, want: int) -> tuple[int, int] | None:
        """(byte address, write event) of the first byte of ``bs`` not last written with
        tensor ``want`` (event 0: never written; bytes written through an unknown tensor, id
        -1, pass), or None."""
        tens = self.tensor
        for p, sl, sel in self._pieces(bs):
            page = self.pages.get((space, p))
            if page is None:
                ev = _NEVER
            elif sl is None:
                ev = page[sel]
            elif sel is None:
                ev = page[sl]
            else:
                ev = page[sl][sel]
            if not ev.size:
                continue
            e0 = ev[0]
            if ev is _NEVER or (ev == e0).all():
                t = tens[e0]
                if t == want or t < 0:
                    continue
                k = 0
            else:
                t = tens[ev]
                bad = (t != want) & (t >= 0)
                if not bad.any():
                    continue
                k = int(np.argmax(bad))
            if sl is None:
                at = int(sel[k])
            elif sel is None:
                at = sl.start + k
            else:
                at = sl.start + int(np.flatnonzero(sel)[k])
            return (p << _PAGE_BITS) + at, int(ev[k])
        return None


_NEVER = np.zeros(1, dtype=np.int32)


class _Dense:
    """A dense [lo, hi) in :class:`ByteSet`'s interface (for :meth:`_Tags._pieces`)."""

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi
        self.mask = None

    def _bitmap(self) -> bool:
        return True


def verify(program, cert: dict, machine=None) -> list[str]:
    """Problems found checking ``cert`` against ``program`` (empty: every read reads the
    tensor the certificate says)."""
    from .certificate import global_order
    if not isinstance(cert, dict) or cert.get("format") != FORMAT:
        return ["not a dataflow certificate"]
    if cert.get("version") != VERSION:
        return [f"dataflow certificate version {cert.get('version')} is not one this checker "
                f"reads ({VERSION})"]
    machine = get_machine(machine) if machine is not None else program.machine_obj()
    fp = cert.get("fingerprint")
    if fp is not None and int(str(fp), 16) != program.fingerprint:
        return [f"the dataflow certificate is for machine fingerprint {fp}, the program has "
                f"{program.fingerprint:016x}"]
    n = sum(len(s) for s in program.streams.values())
    if cert.get("instructions") != n:
        return [f"the dataflow certificate covers {cert.get('instructions')} instructions, the "
                f"program has {n}"]
    insts, problems = global_order(program, cert, machine)
    if problems or not insts:
        return problems
    loads = [(int(s.space), s.tpb if s.space is Space.HBSM else 0, s.address,
              s.address + s.nbytes) for s in program.symbols if s.role in ("input", "weight")]
    loads += [(int(s.space), 0, s.address, s.address + len(s.data)) for s in program.segments]
    return verify_instructions(insts, cert, loads)


def verify_instructions(insts: list, cert: dict, loads: list | None = None) -> list[str]:
    """:func:`verify` of ``insts`` (the instructions in the certificate's global order);
    ``loads``: ``(space, TPB, lo, hi)`` the program loads (its input / weight symbols and
    segments; None: the certificate's ``loaded`` is taken as it is)."""
    from .cert_conflicts import _accesses
    from .certificate import HappensBefore
    from .engine_checks import _items
    from .semantics import make_exec

    if cert.get("program") != program_crc(insts):
        return ["the dataflow certificate is for other operand addresses than the program's "
                f"(CRC {cert.get('program')}, the program's {program_crc(insts)})"]
    names = cert.get("tensors", [])
    operands = cert.get("operands", [])
    if len(operands) != len(insts) or any(len(r) != len(x.walks())
                                          for r, x in zip(operands, insts)):
        return ["the dataflow certificate's operands do not fit the program's instructions"]

    def tname(k: int) -> str:
        return f"'{names[k - 1]}'" if 1 <= k <= len(names) else f"#{k}"

    problems: list[str] = []
    tags = _Tags()
    for space, tpb, lo, hi, k in cert.get("loaded", []):
        if loads is not None and not any(s == space and t == tpb and a <= lo and hi <= b
                                         for s, t, a, b in loads):
            problems.append(f"the certificate says {tname(k)} is loaded at {_SPACE.get(space)} "
                            f"[{lo}, {hi}), the program loads nothing there")
            continue
        tags.write((space, tpb) if space == int(Space.HBSM) else (space, 0), _Dense(lo, hi),
                   tags.event(k, -1, 0))
    g = HappensBefore(insts)
    if not g.acyclic:
        return problems + ["the program's monitors form a wait cycle: no order to check"]
    seen: set[tuple[int, str]] = set()
    execs: dict[int, object] = {}
    ops: dict[int, list] = {}
    off = g.off

    def operands_of(i: int) -> list:
        got = ops.get(i)
        if got is None:
            ids = operands[i]
            got = ops[i] = []
            for (f, w, written), k in zip(insts[i].walks(), ids):
                lo, hi = w.byte_range()
                got.append((f, w, written, int(k), int(w.space), lo, hi))
        return got

    def match(i: int, a, bs, write: bool):
        cands = operands_of(i)
        for c in cands:
            if c[1] is a.walk and c[2] == write:
                return c
        for c in cands:
            if c[1] is a.walk:
                return c
        best = None
        for c in cands:
            if c[4] == int(a.walk.space) and c[5] <= bs.lo and bs.hi <= c[6]:
                if c[2] == write:
                    return c
                best = best or c
        return best

    # "never written" reads, waiting for the first write of their byte later in the order:
    # (problem index, space, byte)
    unwritten: list[tuple[int, tuple, int]] = []
    full = False
    for v in g.order:
        node = v >> 1
        i = int(np.searchsorted(off, node, side="right") - 1)
        b = node - int(off[i])
        inst = insts[i]
        ex = execs.get(i)
        if ex is None:
            ex = execs[i] = make_exec(inst, None)
        write = bool(v & 1)
        if full and not (write and unwritten):
            continue
        for a in _accesses(inst, ex, b, write):
            items = _items([a])
            if not items:
                continue
            space, bs, _ = items[0]
            c = match(i, a, bs, write)
            k = c[3] if c is not None else -1
            if write:
                tags.write(space, bs, tags.event(k, i, b))
                for u in [u for u in unwritten if u[1] == space and _covers(bs, u[2])]:
                    unwritten.remove(u)
                    problems[u[0]] += (f"; the program writes it later in its order, by #{i} "
                                       f"{inst.MNEMONIC} block {b} ({tname(k)})")
                continue
            if full or k < 0 or (i, c[0]) in seen:
                continue
            bad = tags.check(space, bs, k)
            if bad is None:
                continue
            seen.add((i, c[0]))
            addr, ev = bad
            where = f"{_SPACE.get(space[0])}" + (f"[{space[1]}]" if space[0] == int(Space.HBSM)
                                                 else "")
            if ev == 0:
                found = "nothing: never written"
                unwritten.append((len(problems), space, addr))
            else:
                w = int(tags.inst[ev])
                by = ("the program's loaded data" if w < 0 else
                      f"#{w} {insts[w].MNEMONIC} block {int(tags.block[ev])}")
                found = f"{tname(int(tags.tensor[ev]))}, written by {by}"
            problems.append(f"#{i} {inst.MNEMONIC} block {b} operand '{c[0]}' reads "
                            f"{where} byte {addr}: expected {tname(k)}, found {found}")
            full = len(problems) >= MAX_PROBLEMS
    for space, tpb, lo, hi, k in cert.get("outputs", []):  # what the host reads at the end
        if full:
            break
        key = (space, tpb) if space == int(Space.HBSM) else (space, 0)
        bad = tags.check(key, _Dense(lo, hi), k)
        if bad is not None:
            addr, ev = bad
            w = int(tags.inst[ev])
            found = "nothing: never written" if ev == 0 else (
                f"{tname(int(tags.tensor[ev]))}, written by " +
                ("the program's loaded data" if w < 0 else
                 f"#{w} {insts[w].MNEMONIC} block {int(tags.block[ev])}"))
            problems.append(f"the output {tname(k)} at {_SPACE.get(space)} [{lo}, {hi}) ends "
                            f"with byte {addr} holding {found}")
            full = len(problems) >= MAX_PROBLEMS
    return problems


def _covers(bs, addr: int) -> bool:
    """True when byte set ``bs`` holds ``addr``."""
    if not bs.lo <= addr < bs.hi:
        return False
    if bs._bitmap():
        m = bs.mask
        return m is None or bool(m[addr - bs.lo])
    arr = bs.arr
    if arr is None:
        return True
    k = int(np.searchsorted(arr, addr))
    return k < arr.size and int(arr[k]) == addr


__all__ = ["DataflowError", "FORMAT", "MAX_PROBLEMS", "VERSION", "load",
           "program_crc", "verify", "verify_instructions"]

"""Stage 7: the sync certificate -- the happens-before edges the compiler relied on, as JSON.

``m100-sim --check-certificate`` checks it independently (:mod:`m100.sim.certificate`, the one
verifier; tests call its ``verify_instructions`` on sync-insert's output):

* ``edges``: every kept ordering ``from -> to`` with its need vector (block ``b`` of ``to`` waits
  for block ``need[b]`` of ``from``; -1: no wait), the counter ``[tpb, id]`` that carries it and the
  values the consumer's monitor asks for per block. A checker confirms each edge in the program:
  the counter's updates, in global order, form a chain, and the ``value``-th update of that chain
  is at or after block ``need[b]`` of ``from`` on ``from``'s executor.
* ``hazards``: every conflicting pair ``[i, j, kind, space, tpb, lo, hi]`` (a byte interval in
  which they conflict), including the ones removed as redundant. A checker confirms each hazard is
  ordered by the closure of ``edges`` plus program order plus block order.
* ``serialized``: chain monitors added by a budget merge decision.
"""

from __future__ import annotations

import json

from m100.sim.certificate import FORMAT
from m100.targets.m100 import isa

from .allocate import Allocation
from .analyze import Needs
from .redundancy import Reduced

VERSION = 1


def build_certificate(machine, mode: str, nd: Needs, red: Reduced, al: Allocation,
                      out: list[isa.Instruction]) -> dict:
    def executor(i):
        unit, idx = out[i].executor
        return [unit.name, idx]

    edges = []
    for (i, j), h in sorted(al.needs.items()):
        t = al.home[(i, j)]
        c = al.counter[(out[i].executor, t)]
        mon = next(m for m in out[j].sync.monitors if m.tpb == t and m.counter == c)
        edges.append({"from": i, "to": j, "need": h.need.tolist(), "counter": [t, c],
                      "trigger": al.trigger[(i, t)].name,
                      "value": [mon.expected + b * mon.per_block for b in range(len(h.need))]})
    hazards = []
    for (i, j), h in sorted(nd.needs.items()):
        for kind, mem, lo, hi in h.why:
            hazards.append([i, j, kind, int(mem[0]) if mem else -1, int(mem[1]) if mem else -1,
                            lo, hi])
    return {
        "format": FORMAT, "version": VERSION, "machine": machine.name,
        "fingerprint": f"{machine.fingerprint():016x}", "sync_mode": mode,
        "instructions": len(out), "blocks": [inst.sync.blocks for inst in out],
        "executors": [executor(i) for i in range(len(out))],
        "edges": edges, "hazards": hazards,
        "serialized": [list(x) for x in al.chain_needs],
        "redundant": [[i, j] for (i, j) in sorted(red.removed)],
        "counters_used": {str(t): n for t, n in sorted(al.counters_used.items())},
    }


def dumps(cert: dict) -> str:
    """``json.dumps(cert, indent=1, sort_keys=True)``, the same text for less CPU.

    With ``indent`` set, ``json`` formats in pure Python, one generator step per value (ResNet-18
    224: an 8.6 MB certificate, ~1 CPU-s); here a list of scalars (each hazard, edge, need vector)
    is one ``join`` of its encoded items. Anything other than dicts with str keys, lists, tuples,
    str, int, float, bool and None goes to ``json.dumps`` (same text or the same error)."""
    try:
        return _indented(cert, "\n")
    except _Other:
        return json.dumps(cert, indent=1, sort_keys=True)


class _Other(Exception):
    """A value :func:`_indented` leaves to ``json.dumps``."""


_esc = json.encoder.encode_basestring_ascii  # what json.dumps uses (ensure_ascii=True)


def _scalar(v) -> str:
    t = type(v)
    if t is str:
        return _esc(v)
    if t is int:
        return int.__repr__(v)
    if t is bool:
        return "true" if v else "false"
    if v is None:
        return "null"
    if t is float:
        if v != v:
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "Infinity" if v > 0 else "-Infinity"
        return float.__repr__(v)
    raise _Other


def _indented(o, nl: str) -> str:
    """``o`` as ``json.dumps(indent=1, sort_keys=True)`` writes it at the indentation of ``nl``
    (a newline and the enclosing level's spaces)."""
    t = type(o)
    if t is dict:
        if not o:
            return "{}"
        if any(type(k) is not str for k in o):
            raise _Other  # json converts other keys (and may refuse to sort them)
        inner = nl + " "
        return "{" + inner + ("," + inner).join(
            _esc(k) + ": " + _indented(o[k], inner) for k in sorted(o)) + nl + "}"
    if t is list or t is tuple:
        if not o:
            return "[]"
        inner = nl + " "
        if all(type(v) in _SCALARS for v in o):
            return "[" + inner + ("," + inner).join(
                [_int(v) if type(v) is int else _scalar(v) for v in o]) + nl + "]"
        return "[" + inner + ("," + inner).join(_indented(v, inner) for v in o) + nl + "]"
    return _scalar(o)


_SCALARS = frozenset((str, int, float, bool, type(None)))
_int = int.__repr__

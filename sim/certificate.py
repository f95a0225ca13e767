"""Independent check of a compiler's sync certificate against a program's counter protocol.

The compiler (``sync-insert``) writes a certificate (JSON, format ``m100-sync-certificate``) with the
happens-before edges it relied on. This module does not trust the certificate's counter/value
claims: it derives happens-before from the program alone and confirms every claimed ordering.

What the program guarantees (the hardware model of ``docs/sim.md`` / ``docs/sync.md``):

* nodes ``S(i,b)`` (block ``b`` of instruction ``i`` may start) and ``E(i,b)`` (its writes are done);
  hardware edges ``S(i,b)->E(i,b)``, ``S(i,b)->S(i,b+1)``, ``E(i,b)->E(i,b+1)`` and executor program
  order ``E(i,last)->S(next on the same unit, 0)``;
* counters start at 0 and only grow. The update events of counter ``c`` on TPB ``t`` (each block of a
  ``BLOCK`` update, or the end of an ``END`` update, ``amount`` times), in program order, form the
  counter's *chain*. If that chain is totally ordered by happens-before, a monitor ``c >= v`` of
  block ``b`` of ``j`` can only pass after the ``v``-th event of the chain was issued (fewer events
  can not add up to ``v``, whatever order remote updates arrive in): the derived edge
  ``E(chain[v-1]) -> S(j,b)``. A monitor asking more than the chain can ever give is a deadlock.

Checks (each problem is one line naming instructions, blocks, counters):

1. the certificate belongs to the program (format, fingerprint, instruction count, executors and
   block counts per instruction); certificate index ``i`` is the ``i``-th instruction of the
   compiler's global order, which the program file keeps per stream (DMAs in the CCB stream, the
   others in their cluster's stream);
2. the derived graph is acyclic (else a deadlock) and every counter's chain is totally ordered;
3. every certified edge ``from -> to`` (block ``b`` of ``to`` after block ``need[b]`` of ``from``)
   and every serialized chain monitor is implied by the derived graph;
4. every pair of blocks of different executors whose accesses conflict (one writes bytes the
   other touches) is ordered, ``E(i,k) -> S(j,b)``: the pairs are derived here from the
   program's own accesses (:mod:`.cert_conflicts`), not read from the certificate; a version 1/2
   certificate's listed ``hazards`` are checked as well (producer's first block before the
   consumer's last). A version this module does not read is refused with one line.

Reachability uses vector clocks: the E-nodes of one executor form a chain, so the set of E-nodes
before a node is, per executor, a prefix (one integer per executor and node).

Never imports xDSL or the compiler (``sim/`` runs programs it did not see compiled).
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

import numpy as np

from m100.errors import M100Error
from m100.targets.m100.isa import Trigger, Unit, tpbs_of
from m100.targets.m100.machine import get_machine

FORMAT = "m100-sync-certificate"
#: the certificate versions this checker reads: 1 and 2 list the conflicting pairs
#: (``hazards``), 3 lists only the kept orderings (``edges``); the checker derives the
#: conflicting pairs itself for every version (:mod:`.cert_conflicts`)
VERSIONS = (1, 2, 3)
# The sync modes of sync-insert (its ``sync-mode`` option, ``m100 compile --sync-mode``); a
# certificate records the one it was made with. Defined here, with the format, so that the
# compiler and the drivers share it without importing each other.
SYNC_MODES = ("dataflow", "barrier-all")
CCB_STREAM = -1


class CertificateError(M100Error):
    """An unreadable certificate file."""


def load(path) -> dict:
    try:
        cert = json.loads(Path(path).read_text())
    except OSError as e:
        raise CertificateError(f"{path}: cannot read the certificate: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise CertificateError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
    except UnicodeDecodeError:
        raise CertificateError(f"{path}: not a sync certificate (not UTF-8 text)") from None
    if not isinstance(cert, dict) or cert.get("format") != FORMAT:
        raise CertificateError(f"{path}: not a sync certificate (format '{FORMAT}' expected)")
    return cert


def global_order(program, cert: dict, machine=None) -> tuple[list, list[str]]:
    """The program's instructions in the certificate's global order, and the problems found."""
    machine = machine or program.machine_obj()
    execs = cert.get("executors", [])
    pos: dict[int, int] = {}
    insts = []
    problems = []
    for i, (unit, idx) in enumerate(execs):
        key = CCB_STREAM if unit == Unit.DMA.name else machine.cluster_of(idx)
        k = pos.get(key, 0)
        pos[key] = k + 1
        stream = program.streams.get(key, [])
        if k >= len(stream):
            problems.append(f"instruction {i} ({unit} {idx}) has no counterpart: stream {key} has "
                            f"{len(stream)} instructions")
            return [], problems
        inst = stream[k]
        u, x = inst.executor
        if (u.name, x) != (unit, idx):
            problems.append(f"instruction {i}: the certificate says {unit} {idx}, the program has "
                            f"{inst.MNEMONIC} on {u.name} {x} (stream {key}, position {k})")
        insts.append(inst)
    for key, stream in program.streams.items():
        if len(stream) != pos.get(key, 0):
            problems.append(f"stream {key} has {len(stream)} instructions, the certificate "
                            f"accounts for {pos.get(key, 0)}")
    return insts, problems


class HappensBefore:
    """Happens-before derived from the instructions' own monitors/updates (see the module doc);
    with ``claimed`` (``(i, k, j, b)``: ``E(i,k) -> S(j,b)``), the happens-before of those edges
    and the hardware's order alone (the certificate's claims; the monitors are not read)."""

    def __init__(self, insts: list, claimed: list | None = None):
        self.insts = insts
        n = len(insts)
        self.blocks = [max(1, inst.sync.blocks) for inst in insts]
        self.off = np.concatenate([[0], np.cumsum(self.blocks)]).astype(int)
        self.execs: dict[tuple, int] = {}
        self.ex = [self.execs.setdefault(inst.executor, len(self.execs)) for inst in insts]
        self.problems: list[str] = []
        nn = 2 * int(self.off[-1])
        preds: list[list[int]] = [[] for _ in range(nn)]
        # E-node ranks along each executor's chain
        self.rank = np.full(nn, -1, dtype=np.int64)
        last: dict[int, int] = {}
        counts = [0] * len(self.execs)
        for i in range(n):
            x = self.ex[i]
            for b in range(self.blocks[i]):
                s, e = self.S(i, b), self.E(i, b)
                preds[e].append(s)
                if b:
                    preds[s].append(self.S(i, b - 1))
                    preds[e].append(self.E(i, b - 1))
                elif x in last:
                    preds[s].append(self.E(last[x], self.blocks[last[x]] - 1))
                self.rank[e] = counts[x]
                counts[x] += 1
            last[x] = i
        self.chains: dict[tuple[int, int], list[tuple[int, int]]] = {}
        if claimed is not None:
            for i, k, j, b in claimed:
                preds[self.S(j, b)].append(self.E(i, k))
            self._closure(preds)
            return
        # counter chains and the derived monitor edges
        for i, inst in enumerate(insts):
            for u in inst.sync.updates:
                evs = range(self.blocks[i]) if u.trigger is Trigger.BLOCK else [self.blocks[i] - 1]
                for t in tpbs_of(u.tpb_mask):
                    ch = self.chains.setdefault((t, u.counter), [])
                    for k in evs:
                        ch.extend([(i, k)] * u.amount)
        for j, inst in enumerate(insts):
            for m in inst.sync.monitors:
                ch = self.chains.get((m.tpb, m.counter), [])
                for b in range(self.blocks[j]):
                    v = m.expected + b * m.per_block
                    if v <= 0:
                        continue
                    if v > len(ch):
                        self.problems.append(
                            f"deadlock: #{j} {inst.MNEMONIC} block {b} monitors counter "
                            f"{m.counter}@TPB{m.tpb} >= {v}, but the program updates it only "
                            f"{len(ch)} times")
                        continue
                    i2, k2 = ch[v - 1]
                    preds[self.S(j, b)].append(self.E(i2, k2))
        self._closure(preds)

    def S(self, i: int, b: int) -> int:
        return 2 * int(self.off[i] + b)

    def E(self, i: int, b: int) -> int:
        return 2 * int(self.off[i] + b) + 1

    def _closure(self, preds: list[list[int]]) -> None:
        nn = len(preds)
        succ: list[list[int]] = [[] for _ in range(nn)]
        indeg = np.zeros(nn, dtype=np.int64)
        for v, ps in enumerate(preds):
            indeg[v] = len(ps)
            for p in ps:
                succ[p].append(v)
        order = []
        q = deque(int(v) for v in np.flatnonzero(indeg == 0))
        while q:
            v = q.popleft()
            order.append(v)
            for w in succ[v]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    q.append(w)
        self.acyclic = len(order) == nn
        self.order = order  # a topological order of the nodes (the dataflow check's replay)
        if not self.acyclic:
            stuck = sorted({v // 2 for v in np.flatnonzero(indeg > 0)})
            idx = np.searchsorted(self.off, stuck, side="right") - 1
            names = ", ".join(f"#{int(i)}" for i in sorted(set(idx.tolist()))[:8])
            self.problems.append(f"deadlock: the monitors form a wait cycle among {names}")
        nx = len(self.execs)
        self.clock = np.full((nn, nx), -1, dtype=np.int64)
        node_exec = np.repeat(np.asarray(self.ex, dtype=np.int64),
                              np.asarray(self.blocks) * 2)
        for v in order:
            ps = preds[v]
            if ps:
                row = self.clock[ps].max(axis=0) if len(ps) > 1 else self.clock[ps[0]].copy()
            else:
                row = np.full(nx, -1, dtype=np.int64)
            if self.rank[v] >= 0:
                x = node_exec[v]
                row[x] = max(row[x], self.rank[v])
            self.clock[v] = row

    def hb(self, a: int, b: int) -> bool:
        """True if node ``a`` (an E-node) happens before or is node ``b``."""
        if a == b:
            return True
        x = self.ex[int(np.searchsorted(self.off, a // 2, side="right") - 1)]
        return bool(self.clock[b, x] >= self.rank[a])


def verify(program, cert: dict, machine=None) -> list[str]:
    """Problems found checking ``cert`` against ``program`` (empty: every claim holds)."""
    if cert.get("format") != FORMAT:
        return ["not a sync certificate"]
    if cert.get("version") not in VERSIONS:
        return verify_instructions([], cert)  # (its one line)
    machine = get_machine(machine) if machine is not None else program.machine_obj()
    problems = []
    fp = cert.get("fingerprint")
    if fp is not None and int(str(fp), 16) != program.fingerprint:
        problems.append(f"the certificate is for machine fingerprint {fp}, the program has "
                        f"{program.fingerprint:016x}")
    if cert.get("instructions") != sum(len(s) for s in program.streams.values()):
        problems.append(f"the certificate covers {cert.get('instructions')} instructions, the "
                        f"program has {sum(len(s) for s in program.streams.values())}")
        return problems
    insts, more = global_order(program, cert, machine)
    problems += more
    if not insts or problems:
        return problems
    return verify_instructions(insts, cert)


def verify_instructions(insts: list, cert: dict) -> list[str]:
    """Problems found checking ``cert`` against ``insts``, the instructions (with their sync
    fields) in the certificate's global order; :func:`verify` without the program container (the
    compiler's ``sync-insert`` checks its own output with it)."""
    if cert.get("format") != FORMAT:
        return ["not a sync certificate"]
    v = cert.get("version")
    if v not in VERSIONS:
        return [f"certificate version {v} is not one this checker reads "
                f"({', '.join(map(str, VERSIONS))})"]
    problems = []
    if "sync_mode" in cert and cert["sync_mode"] not in SYNC_MODES:
        problems.append(f"unknown sync mode '{cert['sync_mode']}' "
                        f"(known: {', '.join(SYNC_MODES)})")
    if cert.get("instructions") != len(insts):
        return [f"the certificate covers {cert.get('instructions')} instructions, the program has "
                f"{len(insts)}"]
    blocks = cert.get("blocks", [])
    for i, inst in enumerate(insts):
        if i < len(blocks) and blocks[i] != max(1, inst.sync.blocks):
            problems.append(f"#{i}: the certificate says {blocks[i]} blocks, the program has "
                            f"{inst.sync.blocks}")
    if problems:
        return problems
    g = HappensBefore(insts)
    problems += g.problems
    if not g.acyclic:
        return problems
    for (t, c), ch in sorted(g.chains.items()):
        for (i1, k1), (i2, k2) in zip(ch, ch[1:]):
            if (i1, k1) != (i2, k2) and not g.hb(g.E(i1, k1), g.E(i2, k2)):
                problems.append(f"counter {c}@TPB{t}: the updates of #{i1} block {k1} and #{i2} "
                                f"block {k2} are not ordered, so a monitor of it proves nothing")
                break
    claimed, bad = _claimed(cert, g.blocks)
    if bad:
        return problems + bad
    for e in cert.get("edges", []):
        i, j = e["from"], e["to"]
        for b, k in enumerate(e["need"]):
            if k >= 0 and not g.hb(g.E(i, k), g.S(j, b)):
                problems.append(f"edge #{i} block {k} -> #{j} block {b} "
                                f"({insts[i].MNEMONIC} -> {insts[j].MNEMONIC}) is not enforced "
                                "by the program's counters")
    for x in cert.get("serialized", []):
        i1, k1, i2 = x[0], x[1], x[2]
        if not g.hb(g.E(i1, k1), g.S(i2, 0)):
            problems.append(f"serialized #{i1} block {k1} -> #{i2} is not enforced")
    # every conflicting pair, derived here from the program's own accesses (version 3 lists
    # none; the hazards a version 1/2 certificate lists are checked below as well), is ordered
    # by the certified edges (each enforced by the counters, above) and the hardware's order
    from .cert_conflicts import unordered_conflicts
    for kind, i, k, j, b, space, byte in unordered_conflicts(insts, HappensBefore(insts, claimed)):
        by = ("the program's counters order it, the certificate's edges do not"
              if g.hb(g.E(i, k), g.S(j, b)) else "neither the program's counters nor the "
              "certificate's edges order it")
        problems.append(f"conflict {kind} #{i} {insts[i].MNEMONIC} block {k} -> #{j} "
                        f"{insts[j].MNEMONIC} block {b} (space {space[0]}, TPB {space[1]}, byte "
                        f"{byte}): {by}")
    for h in cert.get("hazards", []):
        i, j, kind = h[0], h[1], h[2]
        if insts[i].executor == insts[j].executor:
            continue
        if not g.hb(g.E(i, 0), g.S(j, g.blocks[j] - 1)):
            problems.append(f"hazard {kind} #{i} -> #{j} (space {h[3]}, TPB {h[4]}, bytes "
                            f"[{h[5]}, {h[6]})) is not ordered by the program's counters")
    return problems


def _claimed(cert: dict, blocks: list[int]) -> tuple[list[tuple[int, int, int, int]], list[str]]:
    """The certificate's edges and serialized chain monitors as ``(i, k, j, b)``
    (``E(i,k) -> S(j,b)``), and a line per malformed one (indices out of range, a need vector of
    the wrong length, an edge that does not point forward in the global order)."""
    out, bad = [], []
    n = len(blocks)
    for e in cert.get("edges", []):
        try:
            i, j, need = int(e["from"]), int(e["to"]), [int(k) for k in e["need"]]
        except (KeyError, TypeError, ValueError):
            bad.append(f"edge {e!r} is malformed")
            continue
        if not (0 <= i < j < n) or len(need) != blocks[j] or \
                any(not -1 <= k < blocks[i] for k in need):
            bad.append(f"edge #{i} -> #{j} (need {need}) does not fit the program's "
                       f"{n} instructions and their blocks")
            continue
        out += [(i, k, j, b) for b, k in enumerate(need) if k >= 0]
    for x in cert.get("serialized", []):
        try:
            i1, k1, i2 = int(x[0]), int(x[1]), int(x[2])
        except (IndexError, TypeError, ValueError):
            bad.append(f"serialized {x!r} is malformed")
            continue
        if not (0 <= i1 < i2 < n and 0 <= k1 < blocks[i1]):
            bad.append(f"serialized #{i1} block {k1} -> #{i2} does not fit the program")
            continue
        out.append((i1, k1, i2, 0))
    return out, bad


__all__ = ["CertificateError", "FORMAT", "VERSIONS", "HappensBefore", "SYNC_MODES", "global_order", "load",
           "verify", "verify_instructions"]

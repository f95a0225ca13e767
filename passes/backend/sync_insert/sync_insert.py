"""The xDSL pass ``sync-insert``: fills ``sync #sync.actions<...>`` on every ``tpb`` instruction op
of each ``tpb.program`` with the algorithm of this package (:func:`insert_sync`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import VerifyException

from m100.dialects.sync import ActionsAttr, BarrierOp, JoinOp, machine_of
from m100.dialects.tpb import InstrOp, ProgramOp, StreamOp
from m100.dialects.tpb_program import class_test, programs
from m100.dialects.twu import WalkAttr
from m100.targets.m100.isa import Unit

from . import SyncError, WholeEdges, hazards, insert_sync
from .certificate import dumps
from .dataflow import build_dataflow


# ``isinstance`` against xDSL's op classes (ABCs) is a Python call for every subclass: ~300 000
# of them on ResNet-50 (every body op, every token's owner); the answers kept per class instead
_is_instr = class_test(InstrOp)
_is_join = class_test((JoinOp, BarrierOp))
_is_barrier = class_test(BarrierOp)
#: the buffer ops whose offsets make a program resolved (``hbsm-allocate`` sets them)
_BUFFERS = frozenset(("hbsm.alloc", "hbsm.fifo"))


def _producers(v: SSAValue, index: dict[int, int], what: str | InstrOp,
               memo: dict[int, list[int]] | None = None) -> list[int]:
    """Instruction indices whose completion token ``v`` stands for (through joins/barriers).
    ``memo``: id(join/barrier op) -> its list, kept by the caller while the ops live (a join
    feeding many consumers, or joins of joins, is expanded once)."""
    owner = v.owner
    k = index.get(id(owner))  # the instruction ops of the body (alive, so ids are unique)
    if k is not None:
        return [k]
    if _is_instr(owner):  # an instruction op outside the program's body: no executor order
        if isinstance(what, InstrOp):
            what = what.describe()
        raise SyncError(f"sync-insert: {what} waits for the token of a tpb instruction outside "
                        "the program's body; move that instruction into the body")
    if _is_join(owner):
        if memo is not None and id(owner) in memo:
            return memo[id(owner)]
        out: list[int] = []
        for x in owner.inputs:
            out.extend(_producers(x, index, what, memo))
        if memo is not None:
            memo[id(owner)] = out
        return out
    if isinstance(what, InstrOp):  # named only when needed
        what = what.describe()
    raise SyncError(f"sync-insert: {what} waits for a token that no tpb instruction, sync.join "
                    "or sync.barrier produces")


def _latest_per_executor(ps: list[int], execs: list) -> list[int]:
    """Of the producers a consumer waits for (tokens through joins/barriers), the latest of each
    executor, in increasing order: waiting for the whole of it implies waiting for the earlier
    ones (program order), so the others are orderings ``hazards.prune_implied`` would drop anyway
    (a join of every copy of a redistribution, waited for by many consumers, is p x c edges
    otherwise: 3.85 M on the 1024-token LLaMA prefill layer). The latest is kept even on the
    consumer's own executor, so that analyze still refuses a backward wait."""
    if len(ps) < 2 or not hazards.PRUNE_IMPLIED:
        return ps
    last: dict = {}
    for p in ps:
        e = execs[p]
        q = last.get(e)
        if q is None or p > q:
            last[e] = p
    return sorted(last.values())


@dataclass(frozen=True)
class SyncInsert(ModulePass):
    """Turn dataflow order into Synchronization Unit counter traffic (producer updates, consumer
    monitors with per-block expected values, back-pressure, remote updates).

    What: for each ``tpb.program``, the instruction ops in body order are taken as a valid
    sequential execution; RAW/WAR/WAW hazards are derived from their ``#twu.walk`` operands,
    ``after(...)`` tokens (through ``sync.join``) add orderings, and each ``sync.barrier`` orders
    every later op of its TPBs after the barrier's inputs. Orderings implied by others get no
    counter traffic; counters are allocated per TPB within the budget (reused by lifetime;
    over budget with whole channels, per producing instruction; still over: a reported merge
    that serializes the writers of a counter, never a silent barrier); the result is checked
    statically for deadlock. Every instruction op gets
    ``sync #sync.actions<...>``; barriers become ``sync.join``. Algorithm: ``docs/sync.md``.
    Why: the M100 units run out of order with respect to each other; counters are the only way
    to order them.
    Pre: instruction ops directly in the program body (not yet in ``tpb.stream``s), every operand
    a ``#twu.walk`` (run twu-materialize), no op already carrying monitors/updates (``blocks``
    may be preset). Post: every instruction op has sync actions; no ``sync.barrier`` remains; a
    program whose buffers all have offsets (hbsm-allocate ran) is marked ``resolved``.
    Options: ``sync-mode`` = dataflow | barrier-all (each op waits for the whole previous one:
    slow, obviously correct); ``counter-budget`` (counters per TPB, 0 = all of the machine's);
    ``on-budget`` = merge | error; ``stream-blocks`` (split ops with 1 block into up to N blocks
    so consumers stream; 0 = keep); ``certificate`` (write the sync certificate JSON to this
    path); ``report`` (print the summary and decisions to stderr). After :meth:`apply`,
    :attr:`certificates` holds the certificate dict of each program (drivers take it from there
    instead of writing and re-reading a file).
    """

    name = "sync-insert"

    sync_mode: str = "dataflow"
    counter_budget: int = 0
    on_budget: str = "merge"
    stream_blocks: int = 0
    certificate: str = ""
    report: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        progs = programs(op)
        if not progs:
            raise SyncError("sync-insert: the module has no tpb.program")
        certs: list[dict] = []
        object.__setattr__(self, "certificates", certs)  # an output, not an option
        # the dataflow certificate of each program (``dataflow.py``), beside its sync one
        object.__setattr__(self, "dataflows", [])
        for n, p in enumerate(progs):
            cert = self._run(p, n if len(progs) > 1 else None)
            if cert is not None:
                certs.append(cert)

    def _run(self, prog: ProgramOp, n: int | None) -> dict | None:
        body = []  # the block's ops (its linked list followed: no iterator object per op)
        o = prog.body.block.first_op
        while o is not None:
            body.append(o)
            o = o.next_op
        unplaced: list = []  # the body's buffers without an offset (the dataflow certificate's)
        cert = self._sync(prog, n, body, unplaced)
        # the last backend pass: with every buffer allocated the program is now resolved (1:1
        # with the ISA), so a by-hand pipeline ending here translates like m100-pipeline's output.
        # The buffers anywhere in the program: its one block's ops (listed before _sync, which
        # only replaces or erases sync.barrier ops) and what those with regions nest. The
        # body's own buffers' offsets were read by ``build_dataflow`` (every buffer's, for its
        # DDR / SRAM spans); without instructions it did not run, so all are read here
        if cert is None:
            unplaced = [o for o in body if o.name in _BUFFERS
                        and o.properties.get("offset") is None]
        if not unplaced and all(o.properties.get("offset") is not None
                                for b in body if b.regions for o in b.walk()
                                if o.name in _BUFFERS):
            prog.properties["level"] = StringAttr("resolved")
        return cert

    def _sync(self, prog: ProgramOp, n: int | None, body: list,
              unplaced: list) -> dict | None:
        machine = machine_of(prog)
        # a tpb.stream is in the body or nested in an op with regions (only those are walked)
        for o in (x for b in body if b.regions for x in b.walk()):
            if isinstance(o, StreamOp):
                if any(isinstance(x, InstrOp) and x.sync is None for x in o.walk()):
                    raise SyncError("sync-insert: instructions inside tpb.stream regions have no "
                                    "global order; run sync-insert before streams are formed")
        ops = [o for o in body if _is_instr(o)]
        if not ops:
            return None
        index = {id(o): i for i, o in enumerate(ops)}
        insts = []
        for o in ops:
            try:
                # (the properties read from the dict: the descriptors ``o.walks`` /
                # ``o.buf_slots`` are a Python call each)
                p = o.properties
                accs = p["walks"].data
                if not (all(isinstance(a, WalkAttr) for a in accs.values())
                        and all(n.data in accs for n in p["buf_slots"].data)):
                    o.isa_walks(synthesize=False)  # raises naming the operand without a walk
                # every operand has its walk, so nothing is synthesized but the missing sync;
                # not memoized: the op's sync is set below and the final instruction remembered
                insts.append(o.build_instruction(synthesize=True))
            except VerifyException as e:
                raise SyncError(f"sync-insert: {e}") from None
        # every token a consumer waits for is a whole ordering: two lists, no DataEdge each
        eps: list[int] = []
        ecs: list[int] = []
        memo: dict[int, list[int]] = {}
        execs = [inst.executor for inst in insts]
        for i, o in enumerate(ops):
            deps = o.deps
            if not deps:
                continue
            if len(deps) == 1:
                k = index.get(id(deps[0].owner))
                if k is not None:  # one instruction (its op is in ``index``)
                    eps.append(k)
                    ecs.append(i)
                    continue
                # one join (or barrier): its latest producers per executor are the same list for
                # every consumer of it (kept with the join's producers, under a negative key)
                key = -1 - id(deps[0].owner)
                ps = memo.get(key)
                if ps is None:
                    ps = memo[key] = _latest_per_executor(_producers(deps[0], index, o, memo),
                                                          execs)
                eps.extend(ps)
                ecs.extend([i] * len(ps))
                continue
            ps = []
            for d in deps:
                k = index.get(id(d.owner))
                if k is not None:
                    ps.append(k)
                elif not _is_instr(d.owner):
                    # the latest per executor of a union is that of the parts' latest: each
                    # join's list is reduced once, as in the one-join case above
                    key = -1 - id(d.owner)
                    got = memo.get(key)
                    if got is None:
                        got = memo[key] = _latest_per_executor(_producers(d, index, o, memo),
                                                               execs)
                    ps.extend(got)
                else:
                    ps.extend(_producers(d, index, o, memo))
            ps = _latest_per_executor(ps, execs)
            eps.extend(ps)
            ecs.extend([i] * len(ps))
        pos = {id(o): k for k, o in enumerate(body)}
        barriers = [b for b in body if _is_barrier(b)]
        for b in barriers:
            srcs = _latest_per_executor(
                [p for x in b.inputs for p in _producers(x, index, "'sync.barrier'", memo)], execs)
            mask = b.tpb_mask.value.data
            for i, o in enumerate(ops):
                unit, t = insts[i].executor
                if pos[id(o)] > pos[id(b)] and unit is not Unit.DMA and mask >> t & 1:
                    eps.extend(srcs)
                    ecs.extend([i] * len(srcs))
        res = insert_sync(insts, machine, edges=WholeEdges(eps, ecs), sync_mode=self.sync_mode,
                          counter_budget=self.counter_budget or None, on_budget=self.on_budget,
                          stream_blocks=self.stream_blocks or None)
        self.dataflows.append(build_dataflow(machine, body, ops, insts,
                                             res.certificate["executors"], unplaced))
        for o, inst in zip(ops, res.instructions):
            # the parameters are built when something reads them (printing, equality): the
            # stages after this one read the Sync (``to_isa``)
            attr = o.properties["sync"] = ActionsAttr.lazy(inst.sync)
            if attr.to_isa() == inst.sync:  # the op now decodes to ``inst``: no rebuild later
                o.remember_instruction(inst)
        for b in barriers:
            if b.inputs:
                Rewriter.replace_op(b, JoinOp(list(b.inputs)))
            elif not b.result.uses:
                Rewriter.erase_op(b)
            else:
                raise SyncError("sync-insert: a sync.barrier with no input tokens is still "
                                "waited for; give it the tokens it orders")
        if self.certificate:
            path = Path(self.certificate if n is None else f"{self.certificate}.{n}")
            try:
                path.write_text(dumps(res.certificate) + "\n")
            except OSError as e:
                raise SyncError(f"sync-insert: cannot write the certificate {path}: "
                                f"{e.strerror}") from None
        if self.report:
            print(res.report(), file=sys.stderr)
        return res.certificate


__all__ = ["SyncInsert"]

"""The pass wrapper's short paths (session 24, psync): ``isa_walks`` taking every walk at once
(``tpb_base.WALKS_AT_ONCE``) against the slot loop; the instructions built without the memo, a
join's latest producers kept per join (several joins' lists reduced once each, session 28) and
the tokens handed over as two lists -- since session 31 the only paths, checked against the
instructions and token lists written out here from the definitions (a fresh decode per op; per
consumer the latest producer per executor of every instruction its tokens stand for) and the
lists against one ``DataEdge`` each; codegen's ``resynced`` against ``dataclasses.replace``."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m100.dialects import tpb_base
from m100.dialects.tpb import InstrOp, ProgramOp
from m100.frontend import load_onnx, models
from m100.frontend.mlir_load import shared_context
from m100.passes.backend.sync_insert import certificate as sync_certificate
from m100.passes.backend.sync_insert import insert_sync
from m100.passes.backend.sync_insert import sync_insert as si
from m100.passes.backend.sync_insert.sync_insert import SyncInsert
from m100.passes.m100_pipeline import M100Pipeline
from m100.targets.m100.isa import Unit
from m100.targets.m100.machine import get_machine

from . import progs
from .test_sync_insert_pass import CTX, JOINS_BODY, W, parse

codegen = importlib.import_module("m100.passes.backend.sync_insert.codegen")

#: the pass test's joins (several producers of one executor behind one join, waited for alone
#: and with other tokens, a barrier), two more consumers of a join alone and two of several
#: joins sharing producers (each join's list reduced once, then their union)
BODY = JOINS_BODY + f"""  %t9 = tpb.fill tpb 1 dst({W('h1', 14336)}) after(%j) {{value = 6.0}}
  %t10 = tpb.fill tpb 0 dst({W('h0', 14336)}) after(%j2) {{value = 7.0}}
  %j3 = sync.join %t0, %t2, %t7
  %t11 = tpb.fill tpb 1 dst({W('h1', 24576)}) after(%j, %j3, %t8) {{value = 8.0}}
  %t12 = tpb.dma engine 1 src({W('ddr', 4096)}) dst({W('h1', 28672)}) after(%j3, %j2)
"""


def _before(model, stop: str):
    """A model's module after the stages of ``m100-pipeline`` before ``stop``."""
    ctx = shared_context()
    m = load_onnx(model, ctx)
    for st in M100Pipeline(machine="tiny").stages():
        if st.name == stop:
            return m
        st.apply(ctx, m)
    raise AssertionError(stop)


def _ops(module):
    return [o for o in module.walk() if isinstance(o, InstrOp)]


@pytest.mark.parametrize("stop", ["twu-materialize", "sync-insert"])
def test_walks_at_once_are_the_slot_loop(stop, monkeypatch):
    """Before twu-materialize (slots with affine accesses or only a buffer: the loop) and after
    it (every slot a walk: at once): the same walks by slot, the same synthesized instruction,
    the same error without synthesis."""
    ops = _ops(_before(models.conv_relu_maxpool(), stop)) + _ops(_before(models.mlp(), stop))
    assert ops
    fast = 0
    for o in ops:
        got = {}
        for on in (False, True):
            monkeypatch.setattr(tpb_base, "WALKS_AT_ONCE", on)
            try:
                plain = ("ok", o.isa_walks(False))
            except Exception as e:  # noqa: BLE001 -- the error is part of what must agree
                plain = ("error", type(e), str(e))
            got[on] = (plain, o.isa_walks(True), o._to_instruction(True))
        assert got[False] == got[True], o.describe()
        fast += got[True][0][0] == "ok"
    # the short path is taken exactly where every slot has a walk
    assert (fast == len(ops)) == (stop == "sync-insert") and (stop == "sync-insert" or fast == 0)


def _written_out(module) -> tuple[list, list[int], list[int]]:
    """What the pass must hand ``insert_sync`` for ``module``'s program, from the definitions:
    each instruction op's instruction (a fresh decode, in body order); per consumer (in order)
    the latest producer per executor -- program order implies the earlier ones -- of every
    instruction its tokens stand for (through ``sync.join`` / ``sync.barrier`` inputs), in
    increasing order; then per barrier its sources so, for every later op on a TPB unit of its
    mask."""
    from m100.dialects.sync import BarrierOp
    prog = next(o for o in module.walk() if isinstance(o, ProgramOp))
    body = list(prog.body.block.ops)
    ops = [o for o in body if isinstance(o, InstrOp)]
    insts = [o._to_instruction(True) for o in ops]
    index = {id(o): i for i, o in enumerate(ops)}

    def producers(v) -> set[int]:
        if isinstance(v.owner, InstrOp):
            return {index[id(v.owner)]}
        return set().union(*(producers(x) for x in v.owner.inputs))

    def latest(ps: set[int]) -> list[int]:
        last: dict = {}
        for p in ps:
            last[insts[p].executor] = max(p, last.get(insts[p].executor, p))
        return sorted(last.values())

    eps: list[int] = []
    ecs: list[int] = []
    for i, o in enumerate(ops):
        ps = latest(set().union(*(producers(d) for d in o.deps)))
        eps += ps
        ecs += [i] * len(ps)
    for k, b in enumerate(body):
        if isinstance(b, BarrierOp):
            srcs = latest(set().union(*(producers(x) for x in b.inputs)))
            for i, o in enumerate(ops):
                unit, t = insts[i].executor
                if body.index(o) > k and unit is not Unit.DMA and b.tpb_mask.value.data >> t & 1:
                    eps += srcs
                    ecs += [i] * len(srcs)
    return insts, eps, ecs


def _spied(monkeypatch) -> list:
    seen = []
    real = si.insert_sync

    def spy(insts, machine, *, edges, **kw):
        seen.append((list(insts), list(edges.producers), list(edges.consumers), machine, edges))
        return real(insts, machine, edges=edges, **kw)

    monkeypatch.setattr(si, "insert_sync", spy)
    return seen


def test_pass_hands_insert_sync_the_written_out_input(monkeypatch):
    """The instructions and token lists that reach ``insert_sync`` are those written out from
    the definitions (joins of joins, several tokens per op, a barrier; a model), and each op
    remembers the instruction a fresh decode gives."""
    seen = _spied(monkeypatch)
    for m in (parse(BODY), _before(models.conv_relu_maxpool(), "sync-insert")):
        want = _written_out(m)
        seen.clear()
        SyncInsert().apply(CTX, m)
        assert [x[:3] for x in seen] == [want]
        for o in _ops(m):
            assert o.to_instruction() == o._to_instruction(False)
    # the joins did give orderings, and a join's earlier producer of one executor was dropped
    _, ps, _ = _written_out(parse(BODY))
    assert len(ps) >= 10 and 0 not in ps


def test_token_lists_are_the_data_edges(monkeypatch):
    """The tokens handed over as two lists (:class:`WholeEdges`) give the same instructions,
    counters and certificate as one ``DataEdge`` per token (``analyze``'s general path), on the
    joins' body and a model."""
    seen = _spied(monkeypatch)
    for m in (parse(BODY), _before(models.conv_relu_maxpool(), "sync-insert")):
        seen.clear()
        SyncInsert().apply(CTX, m)
        (insts, _, _, machine, edges), = seen
        got = [insert_sync(insts, machine, edges=e) for e in (edges, list(edges))]
        assert [i.sync for i in got[0].instructions] == [i.sync for i in got[1].instructions]
        assert sync_certificate.dumps(got[0].certificate) == \
            sync_certificate.dumps(got[1].certificate)
        assert got[0].certificate["edges"]  # the tokens gave orderings


_S = progs.isa_strategies("m100_isa_strategies_resync")


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_resynced_is_dataclasses_replace(data):
    """codegen's ``resynced`` (``FAST_RESYNC``) against ``dataclasses.replace`` on any instruction
    of the ISA's strategies: equal, same type, same fields in the same order, same repr, the
    other fields the very same objects, and nothing the source's checks remembered carried."""
    tiny = get_machine("tiny")
    inst = data.draw(_S.instructions(tiny))
    inst.check(tiny)  # remembers "_ok_on" on inst
    sync = data.draw(_S.syncs(tiny, None if inst.executor[0] is Unit.DMA else inst.executor[1],
                              inst.sync.blocks))
    a, b = codegen.resynced(inst, sync), dataclasses.replace(inst, sync=sync)
    assert type(a) is type(b) and a == b and repr(a) == repr(b) and hash(a) == hash(b)
    assert list(vars(a)) == list(vars(b)) == [f.name for f in dataclasses.fields(inst)]
    assert a.sync is sync and all(getattr(a, f) is getattr(inst, f) for f in vars(a) if f != "sync")
    assert "_ok_on" in vars(inst) and "_ok_on" not in vars(a)


def _resolved_by_definition(module) -> list[bool]:
    """Per program, what the pass marks ``resolved``, written out as before session 34: every
    ``hbsm.alloc`` / ``hbsm.fifo`` anywhere in it has an offset."""
    return [all(o.properties.get("offset") is not None for o in p.walk()
                if o.name in ("hbsm.alloc", "hbsm.fifo"))
            for p in module.walk() if isinstance(p, ProgramOp)]


def _levels(module) -> list:
    return [p.properties.get("level").data if p.properties.get("level") else None
            for p in module.walk() if isinstance(p, ProgramOp)]


@pytest.mark.parametrize("placed", range(16))
def test_resolved_mark_is_every_buffer_placed(placed):
    """The pass marks a program ``resolved`` exactly when every buffer of it has an offset
    (the body's buffers' offsets read by the dataflow certificate since session 34; the pass
    reads them itself when the program has no instruction): two allocs and a fifo each with or
    without an offset, with and without instructions, and a model after hbsm-allocate.
    Mutants: the dataflow certificate's list ignored (a buffer without an offset marked
    resolved), the fallback without instructions dropped."""
    def off(k: int) -> str:
        return f" offset {64 * k}" if placed >> k & 1 else ""
    with_insts = placed >> 3 & 1
    body = f"""
  %a = hbsm.alloc{off(0)} : !hbsm.buffer<hbsm[0], 16xf32>
  %b = hbsm.alloc{off(1)} : !hbsm.buffer<hbsm[0], 16xf32>
  %f = hbsm.fifo producer 0 consumers [1]{off(2)} : !hbsm.buffer<hbsm[1], 16xf32, slots = 2>
"""
    if with_insts:
        body += """  %t = tpb.copy tpb 0 src(%a, #twu.walk<hbsm[0], 0, f32, [(0, 1, 15)]>) dst(%b, #twu.walk<hbsm[0], 64, f32, [(0, 1, 15)]>)
"""
    m = parse(body)
    want = _resolved_by_definition(m)
    SyncInsert().apply(CTX, m)
    assert _levels(m) == ["resolved" if w else "placed" for w in want]
    if placed == 15:
        model = _before(models.conv_relu_maxpool(), "sync-insert")
        assert _resolved_by_definition(model) == [True]
        SyncInsert().apply(CTX, model)
        assert _levels(model) == ["resolved"]

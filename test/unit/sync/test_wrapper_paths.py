"""The pass wrapper's short paths against the old ones (session 24, psync): ``isa_walks`` taking
every walk at once (``tpb_base.WALKS_AT_ONCE``), the instructions built without the memo
(``sync_insert.BUILD_ONCE``) and a join's latest producers kept per join
(``sync_insert.LATEST_PER_JOIN``; several joins' lists reduced once each, session 28:
``LATEST_PER_DEPS``), and codegen's instructions with their syncs
(``codegen.FAST_RESYNC``). The oracle is the old path: the same walks and instructions
op by op, the same instructions and token lists handed to ``insert_sync``, the same program
text and certificate, and the op's remembered instruction equal to a fresh decode."""

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
from m100.passes.backend.sync_insert import sync_insert as si
from m100.passes.backend.sync_insert.sync_insert import SyncInsert
from m100.passes.m100_pipeline import M100Pipeline
from m100.targets.m100.isa import Unit
from m100.targets.m100.machine import get_machine

from . import progs
from .test_sync_insert_pass import CTX, JOINS_BODY, W, parse

codegen = importlib.import_module("m100.passes.backend.sync_insert.codegen")
FLAGS = ((tpb_base, "WALKS_AT_ONCE"), (si, "BUILD_ONCE"), (si, "LATEST_PER_JOIN"),
         (si, "LATEST_PER_DEPS"), (codegen, "FAST_RESYNC"))

#: the pass test's joins (several producers of one executor behind one join, waited for alone
#: and with other tokens, a barrier), two more consumers of a join alone and two of several
#: joins sharing producers (each join's list reduced once, then their union)
BODY = JOINS_BODY + f"""  %t9 = tpb.fill tpb 1 dst({W('h1', 14336)}) after(%j) {{value = 6.0}}
  %t10 = tpb.fill tpb 0 dst({W('h0', 14336)}) after(%j2) {{value = 7.0}}
  %j3 = sync.join %t0, %t2, %t7
  %t11 = tpb.fill tpb 1 dst({W('h1', 24576)}) after(%j, %j3, %t8) {{value = 8.0}}
  %t12 = tpb.dma engine 1 src({W('ddr', 4096)}) dst({W('h1', 28672)}) after(%j3, %j2)
"""


def _set(monkeypatch, on: bool) -> None:
    for mod, name in FLAGS:
        monkeypatch.setattr(mod, name, on)


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


def test_pass_paths_hand_insert_sync_the_same_input(monkeypatch):
    """Old and new wrapper paths: the same instructions and token lists reach ``insert_sync``,
    the same text and certificate come out, and each op remembers the instruction a fresh
    decode gives."""
    seen = []
    real = si.insert_sync

    def spy(insts, machine, *, edges, **kw):
        seen.append((list(insts), list(edges.producers), list(edges.consumers)))
        return real(insts, machine, edges=edges, **kw)

    monkeypatch.setattr(si, "insert_sync", spy)
    out = []
    for on in (False, True):
        _set(monkeypatch, on)
        for m in (parse(BODY), _before(models.conv_relu_maxpool(), "sync-insert")):
            p = SyncInsert()
            p.apply(CTX, m)
            out.append((str(m), sync_certificate.dumps(p.certificates[0])))
            for o in _ops(m):
                assert o.to_instruction() == o._to_instruction(False)
    assert out[:2] == out[2:]
    assert seen[:2] == seen[2:]
    # the joins did give orderings, and a join's earlier producer of one executor was dropped
    insts, ps, cs = seen[0]
    assert len(ps) >= 10 and 0 not in ps
    assert out[0][1].count('"from"') >= 5


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

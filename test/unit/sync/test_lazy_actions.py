"""``ActionsAttr.lazy`` (session 30, psync): sync-insert's ``#sync.actions`` with their parameters
built on first read. The oracle is xDSL's generic constructor (``ActionsAttr(blocks, [MonitorAttr
...], [UpdateAttr ...])``, every parameter checked against its constraint) and ``from_isa``:
equal attributes, hashes, parameters and text; copies and pickles made before any read; the same
error or attribute wherever ``lazy`` leaves its fast path; and the pass's printed module the same
as with ``from_isa``."""

from __future__ import annotations

import copy
import importlib.util
import pathlib
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m100.dialects.sync import ActionsAttr, MonitorAttr, UpdateAttr
from m100.dialects.tpb import InstrOp
from m100.frontend import models
from m100.passes.backend.sync_insert.sync_insert import SyncInsert
from m100.targets.m100.isa import Monitor, Sync, Trigger, Update
from m100.targets.m100.machine import get_machine

from .test_sync_insert_pass import CTX
from .test_wrapper_paths import _before

_p = pathlib.Path(__file__).parents[1] / "isa" / "strategies.py"
_spec = importlib.util.spec_from_file_location("m100_isa_strategies_lazy_actions", _p)
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)  # type: ignore[union-attr]

M100 = get_machine("m100")
BIG = (1 << 63) - 1  # the largest field an i64 holds as it is


def _generic(s: Sync) -> ActionsAttr:
    return ActionsAttr(s.blocks, [MonitorAttr(m.tpb, m.counter, m.expected, m.per_block)
                                  for m in s.monitors],
                       [UpdateAttr(u.counter, u.tpb_mask, u.amount, Trigger(u.trigger).name.lower())
                        for u in s.updates])


def _same_as_generic(s: Sync) -> None:
    a = ActionsAttr.lazy(s)
    assert set(a.__dict__) == {"_isa"} and a.to_isa() is s  # nothing built, the Sync kept
    assert not hasattr(a, "no_such_field") and set(a.__dict__) == {"_isa"}
    assert ActionsAttr.lazy(s).parameters == _generic(s).parameters  # read first, as xDSL does
    p, c = pickle.loads(pickle.dumps(a)), copy.deepcopy(a)  # copies of the lazy form
    g = _generic(s)
    assert a == g and g == a and hash(a) == hash(g) and a.parameters == g.parameters
    assert str(a) == str(g) and a.to_isa() is s
    assert p == g and c == g and hash(p) == hash(g) and p.to_isa() == s
    type(a).get_irdl_definition().verify(a)  # the generic check of every parameter
    a.verify()
    assert ActionsAttr.lazy(s) in {g} and g in {ActionsAttr.lazy(s)}


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_lazy_actions_are_the_generic_ones(data):
    """On random valid syncs (monitors of one TPB or of any, for a DMA; every trigger)."""
    own = data.draw(st.one_of(st.none(), st.integers(0, M100.num_tpbs - 1)))
    _same_as_generic(data.draw(S.syncs(M100, own, data.draw(st.sampled_from([1, 4, 12])))))


@pytest.mark.parametrize("s", [
    Sync(1), Sync(BIG), Sync(2, (Monitor(0, 0, 0, 0), Monitor(BIG, BIG, BIG, BIG))),
    Sync(3, (), (Update(0, 1, 1), Update(BIG, BIG, BIG, Trigger.BLOCK))),
])
def test_lazy_actions_at_the_bounds(s):
    """The least and greatest fields the fast path takes."""
    _same_as_generic(s)


@pytest.mark.parametrize("s", [
    Sync(0), Sync(-1), Sync(1 << 63), Sync(np.int64(2)),  # type: ignore[arg-type]
    Sync(1, (Monitor(0, -1, 0, 0),)), Sync(1, (Monitor(-1, 0, 0, 0),)),
    Sync(1, (Monitor(0, 0, -1, 0),)), Sync(1, (Monitor(0, 0, 0, -1),)),
    Sync(1, (Monitor(0, 0, 1 << 63, 0),)), Sync(1, (Monitor(0, 0, np.int64(3), 0),)),
    Sync(1, (), (Update(-1, 1),)), Sync(1, (), (Update(0, 0),)), Sync(1, (), (Update(0, 1, 0),)),
    Sync(1, (Monitor(1 << 63, 0, 0, 0),)), Sync(1, (Monitor(0, 1 << 63, 0, 0),)),
    Sync(1, (Monitor(0, 0, 0, 1 << 63),)), Sync(1, (), (Update(1 << 63, 1),)),
    Sync(1, (), (Update(0, 1 << 63),)), Sync(1, (), (Update(0, 1, 1 << 63),)),
    Sync(1, (), (Update(0, 1, 1, 0),)),  # an int trigger
    Sync(1, [Monitor(0, 0, 0, 0)]), Sync(1, (), [Update(0, 1)]),  # type: ignore[arg-type]
])
def test_lazy_actions_off_the_fast_path_are_from_isas(s):
    """Invalid fields, fields past an i64, numpy integers, an int trigger, lists: ``lazy`` gives
    ``from_isa``'s error (type and message) or its attribute (built, equal, the same decode)."""
    try:
        want = ActionsAttr.from_isa(s)
    except Exception as e:  # noqa: BLE001 -- whatever from_isa raises, lazy raises the same
        with pytest.raises(type(e)) as got:
            ActionsAttr.lazy(s)
        assert str(got.value) == str(e)
        return
    a = ActionsAttr.lazy(s)
    assert "blocks" in a.__dict__ and a == want and a.to_isa() == want.to_isa()


def test_the_pass_prints_what_from_isa_prints(monkeypatch):
    """sync-insert on two models' programs: the printed module equals the one with ``from_isa``
    attributes; until it is printed, the final verification built no attribute's parameters
    (the stages after sync-insert read the ``Sync``)."""
    texts = []
    for lazy in (True, False):
        if not lazy:
            monkeypatch.setattr(ActionsAttr, "lazy", staticmethod(ActionsAttr.from_isa))
        got = []
        for model in (models.mlp(), models.conv_relu_maxpool()):
            m = _before(model, "sync-insert")
            SyncInsert().apply(CTX, m)
            attrs = [o.properties["sync"] for o in m.walk() if isinstance(o, InstrOp)]
            assert attrs
            m.verify()
            assert all(("blocks" in a.__dict__) != lazy for a in attrs)
            got.append(str(m))
        texts.append(got)
    assert texts[0] == texts[1]

"""The emitter's body order (``emit_core.FAST_ORDER``) and hbsm-allocate's scan
(``hbsm_allocate.FAST_SCAN``) against the paths they replace.

Oracles: the old loops, kept behind the switches. The body order is compared on the op lists the
emitter builds for real models, as emitted and with their predicted starts redrawn at random
(ties, starts removed: the order falls back on the dependencies, or both raise); the scan by the
buffers (names, TPBs, sizes, spans, units, predicted spans) and broadcast groups it hands the
packer, and the final program bytes.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import random
import types

import pytest

DATA = pathlib.Path(__file__).parents[2] / "data"


def _model(case):
    import onnx

    from m100.frontend import models
    return {"convnet": (models.conv_relu_maxpool, "tiny", 0),
            "mlp": (models.mlp, "tiny", 0),
            "llama_layer": (lambda: onnx.load(str(DATA / "llama_layer_small.onnx")), "m100", 8)
            }[case]


def _compile(case):
    from m100.tools import driver
    build, machine, tpbs = _model(case)
    cr = driver.compile(build(), machine=machine, tpbs=tpbs)
    return (hashlib.sha256(cr.program.to_bytes()).hexdigest(),
            hashlib.sha256(json.dumps(cr.certificate, sort_keys=True).encode()).hexdigest())


def _old_order(ops):
    from m100.passes.schedule import emit_core
    old = emit_core.FAST_ORDER
    emit_core.FAST_ORDER = False
    try:
        return emit_core.EmitterCore._predicted_order(types.SimpleNamespace(ops=ops))
    finally:
        emit_core.FAST_ORDER = old


def _either(f, ops):
    try:
        return ("ok", [id(o) for o in f(ops)])
    except (KeyError, AssertionError) as e:
        return (type(e), None)


@pytest.mark.parametrize("case", ["convnet", "llama_layer"])
def test_emit_order_is_the_loop(case, monkeypatch):
    from xdsl.dialects.builtin import IntegerAttr, i64

    from m100.passes.schedule import emit_core
    got: list = []
    orig = emit_core.EmitterCore._predicted_order

    def spy(self):
        got.append(list(self.ops))
        return orig(self)
    monkeypatch.setattr(emit_core.EmitterCore, "_predicted_order", spy)
    _compile(case)
    (ops,) = got
    assert len(ops) > 50
    assert _either(emit_core._fast_order, ops) == _either(_old_order, ops)
    rng = random.Random(0)
    timed = [o for o in ops if "pred_start" in o.attributes]
    kinds = set()
    for rnd in range(12):
        for o in timed:  # few distinct starts: many ties (transfers first, then position)
            if rnd % 3 == 2 and rng.random() < 0.2:
                o.attributes.pop("pred_start", None)
            else:
                o.attributes["pred_start"] = IntegerAttr(rng.randrange(0, 6), i64)
        want = _either(_old_order, ops)
        assert _either(emit_core._fast_order, ops) == want
        kinds.add(want[0])
    assert "ok" in kinds


@pytest.mark.parametrize("case", ["convnet", "mlp", "llama_layer"])
def test_hbsm_scan_is_the_loop(case, monkeypatch):
    from m100.passes.backend import hbsm_allocate

    seen: dict[bool, list] = {}
    orig = hbsm_allocate.allocate

    def spy(bufs, capacity, align, groups, **kw):
        seen.setdefault(hbsm_allocate.FAST_SCAN, []).append((list(bufs), capacity, align,
                                                             groups, kw))
        return orig(bufs, capacity, align, groups, **kw)
    monkeypatch.setattr(hbsm_allocate, "allocate", spy)
    out = {}
    for fast in (False, True):
        monkeypatch.setattr(hbsm_allocate, "FAST_SCAN", fast)
        out[fast] = _compile(case)
    assert out[True] == out[False]
    assert seen[True] == seen[False]
    assert seen[True] and all(call[0] for call in seen[True])


def test_ident_memo_is_the_build(monkeypatch):
    """``emit_core.ident`` from its memo (``IDENT_MEMO``) equals a fresh build, element types
    included, for plain and numpy offsets, ranks and dims; each answer is a list of its own."""
    import numpy as np

    from m100.passes.schedule import emit_core
    rng = random.Random(1)
    args = []
    for _ in range(400):
        nd = rng.randrange(1, 5)
        rank = rng.choice((None, rng.randrange(1, nd + 1)))
        r = nd if rank is None else rank
        dims = rng.choice((None, tuple(rng.sample(range(nd), r))))
        offs = rng.choice((None, tuple(rng.randrange(-3, 9) for _ in range(r)),
                           tuple(np.int64(rng.randrange(0, 9)) for _ in range(r)),
                           (0,) * r))
        args.append((nd, offs, rank, dims))
    for a in args * 2:  # the second time from the memo
        monkeypatch.setattr(emit_core, "IDENT_MEMO", False)
        want = emit_core.ident(*a)
        monkeypatch.setattr(emit_core, "IDENT_MEMO", True)
        got = emit_core.ident(*a)
        assert got == want and [(type(k), [type(c) for c in cs]) for cs, k in got] == \
            [(type(k), [type(c) for c in cs]) for cs, k in want]
        got.append(None)  # a caller's change does not reach the memo
        assert emit_core.ident(*a) == want

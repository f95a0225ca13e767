"""The emitter's body order (``emit_core._fast_order``), hbsm-allocate's scan and
``emit_core.ident``'s memo against their definitions.

Oracles, written here from the definitions with xDSL's plain accessors: the body order is a
Kahn topological sort over the token edges keyed by (predicted start, inherited from the
producers when absent; transfers first; position), compared on the op lists the emitter builds
for real models, as emitted and with their predicted starts redrawn at random (ties, starts
removed: the order falls back on the dependencies, or both raise); the scan by the per-buffer
first / last instruction positions, users and predicted spans it hands the packer, found by a
plain walk of each program; ``ident`` by its formula.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import random

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
    """The definition: buffers first, then the rest in a topological order of the token edges
    (an operand made by another op of the list) by (predicted start -- the producers' latest
    when the op has none --, transfers before unit instructions, position)."""
    import heapq

    from m100.dialects.hbsm import AllocOp
    from m100.dialects.tpb import CopyOp, DmaOp
    allocs = [o for o in ops if isinstance(o, AllocOp)]
    rest = [o for o in ops if not isinstance(o, AllocOp)]
    index = {id(o): i for i, o in enumerate(rest)}
    prio: dict[int, float] = {}
    users: dict[int, list] = {}
    missing: dict[int, int] = {}
    for o in rest:
        deps = [v.owner for v in o.operands if id(v.owner) in index]
        ps = o.attributes.get("pred_start")
        t = float(ps.value.data) if ps is not None else max(
            (prio[id(d)] for d in deps), default=0.0)
        prio[id(o)] = t
        missing[id(o)] = len(deps)
        for d in deps:
            users.setdefault(id(d), []).append(o)
    rank = {id(o): 0 if isinstance(o, (DmaOp, CopyOp)) else 1 for o in rest}
    heap = [(prio[id(o)], rank[id(o)], index[id(o)], o) for o in rest if missing[id(o)] == 0]
    heapq.heapify(heap)
    out: list = []
    while heap:
        _, _, _, o = heapq.heappop(heap)
        out.append(o)
        for u in users.get(id(o), []):
            missing[id(u)] -= 1
            if missing[id(u)] == 0:
                heapq.heappush(heap, (prio[id(u)], rank[id(u)], index[id(u)], u))
    assert len(out) == len(rest), "token edges form a cycle"
    return allocs + out


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
    assert len(ops) > 30  # (convnet: 54 ops on main; a floor against a trivial case)
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


def _scan_by_definition(prog):
    """Per buffer root (id of the ``hbsm.alloc`` / ``hbsm.fifo`` under any views): the first and
    last position among the program's instructions (streams flattened) of an instruction using
    it, those instructions, and its predicted span (``None`` if a use has no prediction)."""
    from m100.dialects.hbsm import ViewOp
    from m100.dialects.tpb import InstrOp, StreamOp
    ops = []
    for o in prog.body.ops:
        ops.extend(o.body.ops if isinstance(o, StreamOp) else [o])
    pos_of, n = {}, 0
    for o in ops:
        pos_of[id(o)] = n
        n += isinstance(o, InstrOp)
    uses: dict[int, list] = {}
    for o in ops:
        if not isinstance(o, InstrOp):
            continue
        for b in o.bufs:
            r = b.owner
            while isinstance(r, ViewOp):
                r = r.source.owner
            uses.setdefault(id(r), []).append(o)
    first = {k: pos_of[id(u[0])] for k, u in uses.items()}
    last = {k: pos_of[id(u[-1])] for k, u in uses.items()}
    user = {k: u[0] for k, u in uses.items()}
    last_user = {k: u[-1] for k, u in uses.items()}
    pred = {}
    for k, u in uses.items():
        a = [(o.attributes.get("pred_start"), o.attributes.get("pred_end")) for o in u]
        pred[k] = None if any(s is None or e is None for s, e in a) else (
            min(s.value.data for s, _ in a), max(e.value.data for _, e in a))
    # the DRB broadcasts: a DMA or DTDU broadcast with a TPB mask, its dst buffer's root
    casts = []
    for o in ops:
        mk = o.properties.get("tpb_mask") if isinstance(o, InstrOp) else None
        if mk is not None and mk.value.data:
            r = dict(zip((n.data for n in o.buf_slots.data), o.bufs))["dst"].owner
            while isinstance(r, ViewOp):
                r = r.source.owner
            casts.append((pos_of[id(o)], mk.value.data, id(r)))
    return ops, pos_of, first, last, user, last_user, pred, casts


@pytest.mark.parametrize("case", ["convnet", "mlp", "llama_layer"])
def test_hbsm_scan_is_the_definition(case, monkeypatch):
    """What hbsm-allocate's scan hands its packer (the op list, program positions, first / last
    positions and users, predicted spans per buffer root, the broadcasts' positions, masks and
    dst roots) is what a plain walk finds."""
    from m100.passes.backend import hbsm_allocate

    seen = []
    orig = hbsm_allocate.HbsmAllocate._pack

    def spy(self, prog, m, ops, pos_of, first, last, user, last_user, pred, kinds, casts):
        want = _scan_by_definition(prog)  # before _pack writes the offsets
        got = (ops, pos_of, first, last, user, last_user, pred, casts)
        assert [id(o) for o in got[0]] == [id(o) for o in want[0]]
        assert got[1:4] == want[1:4] and got[6:] == want[6:]
        for g, w in zip(got[4:6], want[4:6]):
            assert {k: id(v) for k, v in g.items()} == {k: id(v) for k, v in w.items()}
        seen.append((len(first), len(casts)))
        return orig(self, prog, m, ops, pos_of, first, last, user, last_user, pred, kinds,
                    casts)
    monkeypatch.setattr(hbsm_allocate.HbsmAllocate, "_pack", spy)
    _compile(case)
    assert seen and all(n for n, _ in seen)
    if case == "llama_layer":  # (its heads' operands go by DRB broadcasts)
        assert any(c for _, c in seen), seen


def _ident_by_definition(nd, offs, rank, dims):
    """Buffer index k = iteration dim ``dims[k]`` (default k) + ``offs[k]`` (default 0), as
    (coefficients over the ``nd`` dims, constant) per buffer index."""
    rank = nd if rank is None else rank
    dims = tuple(range(rank)) if dims is None else dims
    offs = offs or (0,) * rank
    return [(tuple(1 if d == dims[k] else 0 for d in range(nd)), offs[k]) for k in range(rank)]


def test_ident_memo_is_the_build():
    """``emit_core.ident`` (a memo for plain-int arguments) equals its definition, element
    types included, for plain and numpy offsets, ranks and dims; each answer is a list of its
    own."""
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
        want = _ident_by_definition(*a)
        got = emit_core.ident(*a)
        assert got == want and [(type(k), [type(c) for c in cs]) for cs, k in got] == \
            [(type(k), [type(c) for c in cs]) for cs, k in want]
        got.append(None)  # a caller's change does not reach the memo
        assert emit_core.ident(*a) == want


@pytest.mark.parametrize("case", ["convnet", "llama_layer"])
def test_hbsm_buffer_names_are_the_definition(case, monkeypatch):
    """The names hbsm-allocate gives its packer's buffers (also their last sort key and the
    words of its messages): ``%<name hint or index><dims x element type>`` and the first user's
    name and unit, printed afresh for every buffer here (session 34 keeps a type's printed
    shape per type, an element type's text by identity)."""
    from m100.dialects.hbsm import AllocOp, FifoOp
    from m100.dialects.tpb import InstrOp
    from m100.passes.backend import hbsm_allocate
    from m100.targets.m100.isa import Space

    state, seen = {}, []
    orig_pack, orig_alloc = hbsm_allocate.HbsmAllocate._pack, hbsm_allocate.allocate

    def spy_pack(self, prog, m, ops, pos_of, first, last, user, *rest):
        state["ops"], state["user"] = ops, user
        return orig_pack(self, prog, m, ops, pos_of, first, last, user, *rest)

    def spy_alloc(bufs, *a, **k):
        want, i = [], 0
        for o in state["ops"]:
            if not isinstance(o, (AllocOp, FifoOp)):
                continue
            t = o.results[0].type
            if t.space_enum is not Space.HBSM or o.offset is not None:
                continue
            u = state["user"].get(id(o))
            assert u is None or isinstance(u, InstrOp)
            who = f" ({u.name} {u.UNIT_KEY} {u.unit_index})" if u is not None else ""
            dims = "x".join(str(d) for d in t.dims)
            want.append(f"%{o.results[0].name_hint or i}<{dims}x{t.element_type}>{who}")
            i += 1
        assert [b.name for b in bufs] == want
        seen.append(len(want))
        return orig_alloc(bufs, *a, **k)

    monkeypatch.setattr(hbsm_allocate.HbsmAllocate, "_pack", spy_pack)
    monkeypatch.setattr(hbsm_allocate, "allocate", spy_alloc)
    _compile(case)
    assert seen and all(seen)

"""Tilings shared between ops of the same structure (issue 15, compile speed).

``Scheduler.tile`` gives an op the tiling of an op with the same :func:`.shared_costs.op_key`
(every field but the name and location, the tensors it names by position, shape, dtype and kind)
already tiled with the same arguments, renamed, instead of running :func:`.partition.tile_piece`
again. Oracles: a fresh ``tile_piece`` of the asking op for every tiling a real placement asks
for (all fields and buffers), the whole placement with the sharing off (the shared tilings forgotten at each call), and
keys that tell apart ops differing in one thing the tiler reads.
"""

from dataclasses import astuple, replace

from m100.passes.schedule import placement, timeline
from m100.passes.schedule.graph import Tensor
from m100.passes.schedule.partition import tile_piece
from m100.passes.schedule.shared_costs import op_key
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def test_shared_tilings_are_fresh_tilings(resnet_graph, monkeypatch):
    g = resnet_graph
    asked, tiled = [], []
    tile = timeline.Scheduler.tile

    def spy(self, op, rows, cols, budget, *a, **kw):
        p = tile(self, op, rows, cols, budget, *a, **kw)
        asked.append((self, op, rows, cols, budget, a, kw, p))
        return p

    def count(cm, g_, op, *a, **kw):
        tiled.append(op.name)
        return tile_piece(cm, g_, op, *a, **kw)

    monkeypatch.setattr(timeline.Scheduler, "tile", spy)
    monkeypatch.setattr(timeline, "tile_piece", count)
    pl = placement.schedule(g, M100, tpbs=8)
    for s, op, rows, cols, budget, a, kw, p in asked:
        fresh = tile_piece(s.cm, s.g, op, rows, cols, budget, *a, **kw)
        assert astuple(p) == astuple(fresh), (op.name, rows, cols, budget, a, kw)
        assert p.op == op.name
    # some tilings came from another op of the same structure (ResNet-18's repeated blocks)
    distinct = {(op.name, rows, cols, budget, a, tuple(sorted(kw.items())))
                for _s, op, rows, cols, budget, a, kw, _p in asked}
    assert len(tiled) < len(distinct)
    # the sharing off (session 32: replaces the ``SHARE_TILES`` switch): no tiling of an op of
    # the same structure is ever found, so each op is tiled itself

    def unshared(self, *a, **kw):
        self._tile_shared.clear()
        return tile(self, *a, **kw)

    monkeypatch.setattr(timeline.Scheduler, "tile", unshared)
    tiled.clear()
    plain = placement.schedule(g, M100, tpbs=8)
    assert len(tiled) == len(distinct)
    assert pl.segments == plain.segments
    assert pl.timeline.to_json() == plain.timeline.to_json()


def test_op_key_tells_apart_what_the_tiler_reads(resnet_graph):
    g = resnet_graph
    convs = [o for o in g.ops if o.unit == "tcu.conv2d"]
    # two convolutions of the same shape under different names: one key
    by_key = {}
    for o in convs:
        by_key.setdefault(op_key(g, o), []).append(o.name)
    assert any(len(v) > 1 for v in by_key.values())
    op = next(o for v in by_key.values() if len(v) > 1 for o in convs if o.name == v[0])
    k = op_key(g, op)
    assert k is not None and op_key(g, replace(op, name="other", loc="x.py:1")) == k
    # a different epilogue, attribute, input or output tensor: another key
    assert op_key(g, replace(op, epilogue=op.epilogue + ("relu",))) != k
    assert op_key(g, replace(op, attrs={**op.attrs, "stride": (2, 2)})) != k
    w = g.tensors[op.inputs[1]]
    g.tensors["_w16"] = Tensor("_w16", w.shape, "f16" if w.dtype != "f16" else "f32", w.kind)
    g.tensors["_wi"] = Tensor("_wi", w.shape, w.dtype, "input")
    try:
        assert op_key(g, replace(op, inputs=(op.inputs[0], "_w16") + op.inputs[2:])) != k
        assert op_key(g, replace(op, inputs=(op.inputs[0], "_wi") + op.inputs[2:])) != k
    finally:
        del g.tensors["_w16"], g.tensors["_wi"]
    # an attribute that names a tensor is keyed by that tensor's position and structure
    assert op_key(g, replace(op, attrs={**op.attrs, "post_in": op.inputs[0]})) != \
        op_key(g, replace(op, attrs={**op.attrs, "post_in": op.outputs[0]}))

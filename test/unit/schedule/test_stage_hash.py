"""A stage's hash kept on the instance (issue 15, session 31).

``StageCfg.__hash__`` is the dataclass's own (the hash of the tuple of its fields), computed once
per instance: stages key the builders' and floors' memos. Oracles: the definition (the tuple of
the fields, read by name), for every stage of a real placement and of stages changed field by
field; a pickled or copied stage does not carry the kept value (a string's hash differs between
processes), and equal stages still find each other in a dict.
"""

import copy
import pickle
from dataclasses import fields, replace

from m100.passes.schedule import placement
from m100.passes.schedule.segment import StageCfg
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def _defined(st):
    return hash(tuple(getattr(st, f.name) for f in fields(StageCfg)))


def test_stage_hash_is_the_dataclass_hash(resnet_graph):
    pl = placement.schedule(resnet_graph, M100, tpbs=8)
    stages = [st for seg in pl.segments for st in seg.stages]
    assert len(stages) > 10
    base = StageCfg("x", (0, 1, 2, 3), 2, 4, wcut=(9, 1, 8))
    for name, v in (("op", "y"), ("tpbs", (3, 2, 1, 0)), ("gc", 4), ("bands", 8),
                    ("block", True), ("chunked", True), ("ks", 2), ("act_resident", 64),
                    ("whole", True), ("wshare", 2), ("kfine", 3), ("wcut", ())):
        stages.append(replace(base, **{name: v}))
    stages.append(base)
    for st in stages:
        assert hash(st) == _defined(st) and hash(st) == _defined(st), st
    assert len({hash(st) for st in stages[-13:]}) == 13  # every field is in the hash


def test_a_kept_hash_is_not_pickled_or_copied():
    st = StageCfg("x", (4, 5), 1, 2)
    h = hash(st)
    for other in (pickle.loads(pickle.dumps(st)), copy.copy(st), copy.deepcopy(st)):
        assert "_hash" not in other.__dict__
        assert other == st and hash(other) == h and {st: 1}[other] == 1


def test_tiler_reads_the_piece_cycles_memo_as_the_cost_model(resnet_graph, monkeypatch):
    """``partition.tile_piece`` reads ``CostModel.piece_cycles``' memo itself (session 31):
    every tiling of a real search (ResNet-18 32 on 8 TPBs, warm memo) equals the tiling made by
    a cost model that answers through ``piece_cycles`` (a subclass: the memo is not read
    directly)."""
    from m100.passes.schedule import partition, timeline
    from m100.passes.schedule.cost import CostModel

    class Called(CostModel):
        def piece_cycles(self, g, op, rows, cols, k=None):
            return super().piece_cycles(g, op, rows, cols, k)

    calls = []
    orig = partition.tile_piece

    def spy(cm, g, op, *a, **kw):
        got = orig(cm, g, op, *a, **kw)
        calls.append((g, op, a, kw, got))
        return got

    monkeypatch.setattr(timeline, "tile_piece", spy)
    placement.schedule(resnet_graph, M100, tpbs=8)
    assert len(calls) > 100
    cm = Called(M100)
    for g, op, a, kw, got in calls:
        assert orig(cm, g, op, *a, **kw) == got, (op.name, a, kw)


def test_tiler_memo_read_is_keyed_by_rows_cols_and_k(resnet_graph, monkeypatch):
    """With piece cycles that tell rows, columns and K apart (a cost per instruction growing
    with rows far more than with columns), each op's tiling read through the memo equals the
    one made through ``piece_cycles`` -- a memo read under another key would pick another."""
    from m100.passes.schedule import partition
    from m100.passes.schedule.cost import CostModel

    monkeypatch.setattr(CostModel, "_piece_cycles",
                        lambda self, g, op, rows, cols, k: 1000.0 * rows + 10.0 * cols + 0.1 * (k or 0))

    class Called(CostModel):
        def piece_cycles(self, g, op, rows, cols, k=None):
            return super().piece_cycles(g, op, rows, cols, k)

    g = resnet_graph
    n = 0
    for op in g.ops:
        if op.unit not in ("tcu.matmul", "tcu.conv2d"):
            continue
        for rows, cols in ((64, 64), (32, 128), (16, 256)):
            saved = g.__dict__.pop("_piece_cycles", None)
            try:
                want = partition.tile_piece(Called(M100), g, op, rows, cols, 1 << 18)
                got = partition.tile_piece(CostModel(M100), g, op, rows, cols, 1 << 18)
            finally:
                g.__dict__.pop("_piece_cycles", None)
                if saved is not None:
                    g.__dict__["_piece_cycles"] = saved
            assert got == want, (op.name, rows, cols)
            n += 1
    assert n > 20

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

"""``recipe._match`` with its reads grouped by kind (session 36, issue 15): the ``barrier`` /
``written`` reads (one task id each) and the ``wbar`` reads (the prefetch barrier's end tasks)
compared and bound in loops of their own, without an ``_ids`` / ``_bind`` call per read (ResNet-50:
~960 matches a schedule, ~36 k ``barrier`` and ~30 k ``wbar`` reads, ~3 us a read before).

Oracle: ``_match`` as it was, written out below (every logged read in logging order through
``_ids`` and ``_bind``), on every match of a whole placement (ResNet-18 64x64 and 32x32) and on
random builder states and recipes -- injectivity conflicts, missing keys, ``wbar`` tuples of other
lengths, ``None`` against ``()``. Mutants caught: the ``used`` test left out of the inline bind
(the random cases), ``_MISSING`` against a present value accepted (random), a ``wbar`` length
not compared (random)."""

import random

import pytest

from m100.passes.schedule import placement, recipe
from m100.targets.m100.machine import get_machine

from .test_recipe import r18  # noqa: F401 (the fixture: ResNet-18 64x64's graph)

M100 = get_machine("m100")
_MISSING = recipe._MISSING


def _ref_bind(amap: dict, used: dict, a: int, b: int) -> bool:
    x = amap.get(a)
    if x is None:
        if used.get(b, a) != a:
            return False
        amap[a] = b
        used[b] = a
        return True
    return x == b


def _ref_match(bld, reads: list, tail: dict, ext: list):
    """``_match`` before session 36: every read in logging order."""
    amap: dict = {}
    used: dict = {}
    d = bld.__dict__
    for name, k, form, ids in reads:
        v = bld._pf_wait(*k) if name == "wbar" else d[name].get(k, _MISSING)
        f2, ids2 = recipe._ids(name, v)
        if f2 != form or len(ids2) != len(ids):
            return None
        for a, b in zip(ids, ids2):
            if not _ref_bind(amap, used, a, b):
                return None
    tp = bld.tail_pending
    if len(tp) != len(tail):
        return None
    for k, a in tail.items():
        b = tp.get(k)
        if b is None or not _ref_bind(amap, used, a, b):
            return None
    try:
        return [amap[a] for a in ext]
    except KeyError:
        return None


def _spy(mp) -> list:
    """From now on every ``_match`` is also answered by the reference (on the reads as logged):
    the pairs of answers."""
    logged: dict = {}
    split, match = recipe._split_reads, recipe._match
    out: list = []

    def spl(reads):
        got = split(reads)
        logged[id(got[0])] = (got[0], list(reads))
        return got

    def mt(bld, r):
        new = match(bld, r)
        old = _ref_match(bld, logged[id(r.reads)][1], r.tail, r.ext)
        out.append((new, old))
        return new

    mp.setattr(recipe, "_split_reads", spl)
    mp.setattr(recipe, "_match", mt)
    return out


@pytest.mark.parametrize("hw", [64, 32])
def test_match_is_the_reads_in_order(hw, r18, resnet_graph, monkeypatch):
    """Every match of a whole placement answers as the reference, found and refused ones."""
    out = _spy(monkeypatch)
    if hw == 64:
        placement.schedule(r18, M100)
    else:
        placement.schedule(resnet_graph, M100, tpbs=8)
    assert out
    for new, old in out:
        assert new == old
    assert any(n is None for n, _ in out) and any(n is not None for n, _ in out)


class _Bld:
    """A builder's state as ``_match`` reads it."""

    def __init__(self, rng: random.Random):
        ids = list(range(40))
        self.barrier = {k: rng.choice(ids) for k in range(8) if rng.random() < 0.8}
        self.written = {f"t{k}": rng.choice(ids) for k in range(6) if rng.random() < 0.7}
        self.n_written = {f"t{k}": rng.randrange(3) for k in range(4) if rng.random() < 0.7}
        self.tail_pending = {(k, 0): rng.choice(ids) for k in range(3) if rng.random() < 0.4}
        self.pf = {}
        for k in range(6):
            r = rng.random()
            self.pf[(k, 1)] = None if r < 0.25 else tuple(rng.choice(ids) for _ in
                                                          range(rng.randrange(4)))

    def _pf_wait(self, si, tpb):
        return self.pf[(si, tpb)]


def _recipe(rng: random.Random, bld: _Bld) -> recipe.Recipe:
    """Reads logged against a state like ``bld``'s (often ``bld``'s own values renumbered, so
    that matches succeed; else random), in a random order."""
    shift = rng.choice([0, 0, 100])
    reads = []

    def tid(v):
        return v + shift if rng.random() < 0.9 else rng.randrange(40)
    for name in ("barrier", "written"):
        d = getattr(bld, name)
        keys = list(d) + ([99] if name == "barrier" else ["tx"])
        for k in rng.sample(keys, rng.randrange(len(keys) + 1)):
            v = d.get(k, _MISSING)
            if rng.random() < 0.1:
                v = _MISSING if v is not _MISSING else 3
            reads.append((name, k, *recipe._ids(name, v if v is _MISSING else tid(v))))
    for k in rng.sample(list(bld.pf), rng.randrange(len(bld.pf) + 1)):
        v = bld.pf[k]
        if v is not None:
            v = tuple(tid(x) for x in v)
            if rng.random() < 0.1:
                v = v[:-1]
        elif rng.random() < 0.1:
            v = ()
        form, ids = recipe._ids("wbar", v)
        reads.append(("wbar", k, form, ids))
    for k in rng.sample(["t0", "t1", "t2", "t3"], 2):
        v = bld.n_written.get(k, _MISSING)
        reads.append(("n_written", k, *recipe._ids("n_written", v)))
    rng.shuffle(reads)
    r = recipe.Recipe()
    r.reads, r.ones, r.wbars = recipe._split_reads(reads)
    r.tail = {k: tid(v) for k, v in bld.tail_pending.items()}
    seen = sorted({i for _, _, _, ids in reads for i in ids} | set(r.tail.values()))
    r.ext = rng.sample(seen, len(seen))
    r._full = reads  # (the reference's list)
    return r


class _R(recipe.Recipe):
    __slots__ = ("_full",)


def test_match_on_random_states():
    """Random builder states and recipes: the same answer as the reference, thousands of times,
    found and refused (injectivity conflicts among them)."""
    rng = random.Random(36)
    found = refused = 0
    orig = recipe.Recipe
    recipe.Recipe = _R
    try:
        for _ in range(4000):
            bld = _Bld(rng)
            r = _recipe(rng, bld)
            new = recipe._match(bld, r)
            assert new == _ref_match(bld, r._full, r.tail, r.ext)
            found += new is not None
            refused += new is None
    finally:
        recipe.Recipe = orig
    assert found > 400 and refused > 400, (found, refused)

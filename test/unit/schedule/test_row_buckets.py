"""``row_buckets.rows_over`` against the scan it replaces in the emitter (session 28): for random
piece lists grown between queries, the pieces of its answer that meet rows [a0, a1) are exactly
those of the whole list, in the list's order."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from m100.passes.schedule.row_buckets import rows_over


def _meets(q, a0, a1):
    return max(a0, q.r0) < min(a1, q.r1)


@pytest.mark.parametrize("seed", range(30))
def test_rows_over_filters_like_the_whole_list(seed):
    rng = random.Random(seed)
    table: dict = {}
    lists = [[] for _ in range(3)]
    for _ in range(200):
        src = rng.choice(lists)
        if rng.random() < 0.5:  # pieces of any height (0: empty), unordered rows
            r0 = rng.randrange(0, 300)
            src.append(SimpleNamespace(r0=r0, r1=r0 + rng.choice([0, 1, 7, 32, 32, 64, 200])))
        a0 = rng.randrange(0, 320)
        a1 = a0 + rng.choice([0, 1, 5, 32, 100, 400])
        got = rows_over(table, src, a0, a1)
        assert [id(q) for q in got if _meets(q, a0, a1)] == \
            [id(q) for q in src if _meets(q, a0, a1)]
        pos = {id(q): i for i, q in enumerate(src)}
        assert [pos[id(q)] for q in got] == sorted(pos[id(q)] for q in got)


def test_rows_over_keeps_each_list_apart():
    """An index is per list: a list freed by its owner stays in the table's entry, so a new list
    never gets its id and its index."""
    table: dict = {}
    a = [SimpleNamespace(r0=0, r1=32)]
    assert rows_over(table, a, 0, 32) == a
    del a
    b = [SimpleNamespace(r0=64, r1=96)]
    assert rows_over(table, b, 0, 32) == [] and rows_over(table, b, 64, 96) == b

"""``DmaQueue.earliest`` passes the open positions whose room can not hold the data phase
(session 33, issue 15: ResNet-50's schedule tested 581 k positions, 468 k of them failing that way).

A position ``k``'s room is ``min(d_k, s_(k+D-1)) - e_(k-1)`` (infinite at 0): a transfer put there
streams no earlier than ``e_(k-1)`` and must end by ``d_k`` and by ``s_(k+D-1)``. The oracle is
the query by its definition (:func:`_earliest_by_positions`: every open position from the first
whose setup could follow ``ready``, each tested by ``DmaQueue._at``), on random queues and on the
whole plan of ResNet-18 32; the rooms the queue keeps are checked against their definition
written out here (:func:`_rooms`) after every insertion.
"""

from __future__ import annotations

import random
from bisect import bisect_left

import pytest

from m100.passes.schedule import placement
from m100.passes.schedule.dma_queue import DmaQueue
from m100.targets.m100.machine import get_machine

from .test_dma_queue import _earliest_by_positions  # the query by its definition

M100 = get_machine("m100")


def _rooms(q: DmaQueue) -> list[float]:
    """The room of each ``open`` entry's position, from the definition."""
    out = []
    for x in q.open:
        k = bisect_left(q.s, x)
        ends = [q.d[k]] + ([q.s[k + q.depth - 1]] if k + q.depth - 1 < len(q.s) else [])
        out.append(min(ends) - q.e[k - 1] if k > 0 else float("inf"))
    return out


@pytest.mark.parametrize("depth", [2, 3, 4])
@pytest.mark.parametrize("seed", range(8))
def test_room_skip_is_the_definition(depth, seed):
    """Random streams (transfers ready together, back to back and into gaps; setups of 32, 1,
    7.5 and 0.5 cycles -- the last on ``insert``'s general path): every answer is the
    definition's, the rooms are their definition after every insertion, and some query passes
    a position by its room (the skip ran)."""
    rng = random.Random(seed)
    S = rng.choice([32.0, 1.0, 7.5, 0.5])
    q = DmaQueue(depth, S)
    horizon, passed = 0.0, 0
    for step in range(400):
        ready = rng.choice([0.0, horizon, rng.uniform(0, horizon + 1000),
                            0.25 * rng.randrange(40)])
        lat = rng.choice([0.0, 20.0, 220.0])
        data = rng.choice([0.0, 0.75, 10.0, 48.0, 768.0, rng.uniform(0, 3000)])
        got = q.earliest(ready, lat, data)
        assert got == _earliest_by_positions(q, ready, lat, data), step
        i = bisect_left(q.open, ready + q.setup - 1e-9)
        passed += sum(1 for r in q.room[i:] if r < data - 1e-6)
        q.insert(got[2], got[0], got[1], got[1] + data)
        assert q.room == _rooms(q), step
        assert len(q.room) == len(q.open)
        horizon = max(horizon, q.e[-1])
    assert passed > 0


def test_room_margin_keeps_a_fit_within_eps():
    """A data phase up to ``EPS`` longer than a gap still fits there (the position test allows
    ``EPS``): the room test must not pass that position (a skip by ``room < data`` would put
    the transfer at the end)."""
    q = DmaQueue(2, 32.0)
    for ready in (0.0, 1000.0):
        s0, d0, k = q.earliest(ready, 0.0, 100.0)
        q.insert(k, s0, d0, d0 + 100.0)
    assert q.s == [0.0, 1000.0] and q.room == [float("inf"), 1032.0 - 132.0]
    data = 900.0 + 0.5e-9
    assert q.room[1] < data
    got = q.earliest(0.0, 0.0, data)
    assert got == _earliest_by_positions(q, 0.0, 0.0, data) == (32.0, 132.0, 1)


def test_room_skip_same_plan(resnet_graph, monkeypatch):
    """ResNet-18 32 on 8 TPBs: the whole placement (search, refinements, kept activations) with
    the queue's queries by the definition equals the one with the room skip, task by task."""
    fast = placement.schedule(resnet_graph, M100, tpbs=8)
    monkeypatch.setattr(DmaQueue, "earliest", _earliest_by_positions)
    plain = placement.schedule(resnet_graph, M100, tpbs=8)
    assert any(t.unit == "dma" for t in fast.timeline.tasks)
    assert fast.segments == plain.segments
    assert fast.timeline.to_json() == plain.timeline.to_json()


@pytest.mark.parametrize("seed", range(6))
def test_append_at_depth_two_is_the_slice(seed):
    """(session 34) ``_insert_fast`` at the end of a depth-2 queue updates the last old position's
    room and adds the new position if it is free, instead of re-testing ``[n - 2, n]``: after every
    insertion ``open`` is the plain insertion's (``_insert_plain``: every re-tested position by
    ``_free``) and the rooms are their definition (:func:`_rooms`) -- on streams where most
    transfers go at the end (back to back, after a pause, ready together) and some into gaps,
    with setups of 32 and 1 cycles (the fast path). The end path must have run often."""
    from .test_dma_queue import _insert_plain
    rng = random.Random(340 + seed)
    S = (32.0, 1.0)[seed % 2]
    q, plain = DmaQueue(2, S), DmaQueue(2, S)
    horizon, appended = 0.0, 0
    for step in range(500):
        ready = rng.choice([horizon, horizon, horizon + rng.uniform(0, 300), q.e[-1] if q.e else 0.0,
                            rng.uniform(0, horizon + 1), 0.0])
        lat = rng.choice([0.0, 20.0, 220.0])
        data = rng.choice([0.0, 0.75, 10.0, 48.0, 768.0, rng.uniform(0, 900)])
        got = q.earliest(ready, lat, data)
        assert got == _earliest_by_positions(plain, ready, lat, data), step
        appended += got[2] == len(q.s) > 0
        q.insert(got[2], got[0], got[1], got[1] + data)
        _insert_plain(plain, got[2], got[0], got[1], got[1] + data)
        assert (q.s, q.d, q.e, q.open) == (plain.s, plain.d, plain.e, plain.open), step
        assert q.room == _rooms(q), step
        horizon = max(horizon, q.e[-1])
    assert appended > 200


def test_append_opens_a_position_within_eps():
    """A transfer appended at a setup start up to ``EPS`` before the data end of the one before
    it opens its position (``_free`` allows ``EPS``), on the end path as on the plain one."""
    from .test_dma_queue import _insert_plain
    q, plain = DmaQueue(2, 32.0), DmaQueue(2, 32.0)
    for ready, data in ((0.0, 968.0 + 0.5e-9), (1000.0, 10.0)):
        got = q.earliest(ready, 0.0, data)
        assert got[2] == len(q.s)
        q.insert(got[2], got[0], got[1], got[1] + data)
        _insert_plain(plain, got[2], got[0], got[1], got[1] + data)
    assert q.e[0] > q.s[1] and q.open == plain.open == [0.0, 1000.0]
    assert q.room == _rooms(q)

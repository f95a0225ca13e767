"""ICB dispatch times (``Simulator._dispatch_times_of``): round-robin over the cluster streams in
key order, the i-th instruction of every stream that has one, each adding its encoded size in
whole ICB cycles. Checked against the loop written out from that definition on streams of
unequal lengths (a stream-major order, or a stream left out when another ends, fails it)."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from m100.sim import simulator
from m100.sim.simulator import CCB_STREAM, Simulator
from m100.targets.m100 import encoding


def _reference(recs, bits, icb):
    """The definition, one round at a time (the loop session 28 shipped)."""
    by_stream: dict = {}
    for r in recs:
        if r.stream != CCB_STREAM:
            by_stream.setdefault(r.stream, []).append(r)
    queues = [list(v) for _, v in sorted(by_stream.items())]
    out = {}
    t, i = 0.0, 0
    while any(i < len(q) for q in queues):
        for q in queues:
            if i < len(q):
                t += math.ceil(bits[id(q[i].inst)] / icb)
                out[id(q[i])] = t
        i += 1
    return out


@pytest.mark.parametrize("seed", range(6))
def test_dispatch_times_are_the_round_robin(seed, monkeypatch):
    rng = random.Random(seed)
    sim = Simulator(mode="timing")
    icb = sim.machine.icb_bits_per_cycle
    keys = [0, 1] + rng.sample([CCB_STREAM, 2, 3, 5, 8], rng.randint(0, 5))
    recs, bits = [], {}
    for k in sorted(keys):  # (streams 0 and 1 of unequal lengths in every case)
        for pos in range({0: 5, 1: 2}.get(k) or rng.choice([0, 1, 2, 5, 17])):
            inst = object()
            bits[id(inst)] = rng.choice([32, 64, 96, 100, 512, icb, icb + 1, 3 * icb - 7])
            recs.append(SimpleNamespace(stream=k, pos=pos, inst=inst, dispatch=0.0))
    monkeypatch.setattr(encoding, "instruction_bits", lambda inst, m, check=True: bits[id(inst)])
    want = _reference(recs, bits, icb)
    sim._dispatch_times_of(recs)
    for r in recs:
        if r.stream == CCB_STREAM:
            assert r.dispatch == 0.0  # (the CCB's DMA stream is not dispatched over the ICB)
        else:
            assert r.dispatch == want[id(r)]
    assert len(want) == sum(r.stream != CCB_STREAM for r in recs)
    assert simulator.Simulator._dispatch_times_of is Simulator._dispatch_times_of

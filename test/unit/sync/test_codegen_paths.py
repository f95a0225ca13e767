"""codegen (stage 5) against itself as it was until session 34, written out here as the
reference: the same instructions (each ``Sync`` equal, same repr; the other fields the same
objects) and the same stats, key order included, on random programs with streamed blocks (need
vectors other than ``[0]``, per-block triggers, ``linear_fit``), with a budget of 2 counters
(serializing chain needs) for half of them, and on the barrier-all chain. Session 34 made the
needs' pass one dict read per table with its keys made once, a consumer's or producer's one
entry unsorted, a one-block value without ``max`` / ``linear_fit``,
the stats as locals."""

from __future__ import annotations

import importlib
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import progs  # noqa: E402

from m100.passes.backend import sync_insert as pkg  # noqa: E402
from m100.passes.backend.sync_insert import insert_sync  # noqa: E402
from m100.passes.backend.sync_insert.hazards import _NEED0  # noqa: E402
from m100.targets.m100 import isa  # noqa: E402
from m100.targets.m100.isa import Trigger  # noqa: E402
from m100.targets.m100.machine import get_machine  # noqa: E402

cg = importlib.import_module("m100.passes.backend.sync_insert.codegen")  # (the package exports
# the function ``codegen`` under the module's name)
TINY = get_machine("tiny")


def _reference_codegen(red, al, insts) -> tuple[list, dict]:
    """codegen as it was until session 34 (the reference)."""
    g = al.graph
    blocks = g.blocks
    cum: dict = {}  # (home, counter, inst, block) -> running total
    for (t, c), evs in al.events.items():
        for n, (i, k) in enumerate(evs, start=1):
            cum[(t, c, i, k)] = n

    # updates
    upd: dict = {}
    for (i, t), trig in al.trigger.items():
        c = al.inst_counter[(i, t)]
        key = (c, trig)
        upd.setdefault(i, {})
        upd[i][key] = upd[i].get(key, 0) | (1 << t)

    # monitor requirements per consumer and counter: per block, the count to wait for (lists of
    # Python ints: most instructions have one block, numpy per need cost more than the work)
    reqs: dict = {}

    def need_value(j, t, c, vals):
        r = reqs.get(j)
        if r is None:
            r = reqs[j] = {}
        cur = r.get((t, c))
        r[(t, c)] = vals if cur is None else list(map(max, cur, vals))

    # the tables as locals (one pass per kept need: ~41 000 on ResNet-50)
    home, inst_counter, trigger, block = al.home, al.inst_counter, al.trigger, Trigger.BLOCK
    for (i, j), h in al.needs.items():
        t = home[(i, j)]
        c = inst_counter[(i, t)]
        trig = trigger[(i, t)]
        need = h.need
        if need is _NEED0:  # the shared [0] of two 1-block instructions (most needs)
            vals = [cum[(t, c, i, 0 if trig is block else blocks[i] - 1)]]
        else:
            last = blocks[i] - 1
            vals = [cum[(t, c, i, k if trig is block else last)] if k >= 0 else 0
                    for k in need.tolist()]
        need_value(j, t, c, vals)
    for (i1, k1, i2, t, c) in al.chain_needs:
        # block 0 waits for the event; the later blocks follow it (a running maximum)
        need_value(i2, t, c, [cum[(t, c, i1, k1)]] * blocks[i2])

    out: list = []
    stats = {"monitors": 0, "updates": 0, "block_updates": 0, "remote_updates": 0}
    for j, inst in enumerate(insts):
        mons = []
        for (t, c), vals in sorted(reqs.get(j, {}).items()):
            if max(vals) <= 0:
                continue
            e, k = (vals[0], 0) if len(vals) == 1 else cg.linear_fit(vals)
            mons.append(cg._monitor(t, c, e, k))
        ups = []
        for (c, trig), mask in sorted(upd.get(j, {}).items()):
            ups.append(cg._update(c, mask, 1, trig))
            stats["updates"] += 1
            stats["block_updates"] += trig is Trigger.BLOCK
            unit, idx = inst.executor
            stats["remote_updates"] += (unit is isa.Unit.DMA) or bool(mask & ~(1 << idx))
        stats["monitors"] += len(mons)
        sync = cg._sync(blocks[j], tuple(mons), tuple(ups))
        out.append(cg.resynced(inst, sync))
    return out, stats


@pytest.mark.parametrize("mode", ["dataflow", "barrier-all"])
def test_codegen_is_the_reference_one(mode, monkeypatch):
    real = pkg.codegen
    seen = []

    def both(*a):
        got = real(*a)
        seen.append((got, _reference_codegen(*a), a[2]))
        return got

    monkeypatch.setattr(pkg, "codegen", both)
    census = {"several monitors": 0, "several updates": 0, "per_block": 0, "block trigger": 0}
    for seed in range(12):
        seen.clear()
        insert_sync(progs.random_program(300 + seed, n=40, extra=seed % 2 == 1), TINY,
                    sync_mode=mode, counter_budget=2 if seed % 2 else None,
                    stream_blocks=None if seed % 3 == 2 else 4)
        ((out, stats), (want, want_stats), src), = seen
        assert list(stats.items()) == list(want_stats.items())
        assert len(out) == len(want) == len(src) and stats["monitors"] > 10
        for a, b, s in zip(out, want, src):
            assert type(a) is type(b) and a == b and repr(a.sync) == repr(b.sync)
            assert all(getattr(a, f) is getattr(s, f) for f in vars(a) if f != "sync")
            census["several monitors"] += len(a.sync.monitors) > 1
            census["several updates"] += len(a.sync.updates) > 1
            census["per_block"] += any(m.per_block for m in a.sync.monitors)
            census["block trigger"] += any(u.trigger is Trigger.BLOCK for u in a.sync.updates)
    # the cases the short paths leave: several monitors / updates per instruction (sorted),
    # multi-block values (linear_fit), per-block updates (barrier-all: one chain, one of each)
    assert all(census.values()) if mode == "dataflow" else not any(census.values()), census

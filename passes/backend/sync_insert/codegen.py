"""Stage 5: fill every instruction's ``isa.Sync``.

* Updates: instruction ``i`` adds 1 to counter ``c`` of home TPB ``T`` per event: after every block
  (``Trigger.BLOCK``) when some consumer streams behind it, else once at the end. Updates that
  share (counter id, trigger) across homes become one update with a multi-TPB ``tpb_mask`` (remote
  updates reach other TPBs over the DRB / NoC).
* Monitors: consumer block ``b`` needs event ``e_b`` on counter ``(T, c)``; with ``cum(e)`` the
  running total of the counter's event chain through ``e``, it needs ``counter >= v_b`` with
  ``v_b = max over its needs of cum(e_b)``. The hardware form is linear,
  ``expected + b * per_block``; we pick the ``per_block`` that minimizes the total over-wait
  subject to ``expected + b * per_block >= v_b`` for every ``b`` and to never asking for more than
  ``max(v)`` (a value reached by instructions before the consumer, so no new wait cycle). The fit
  is tight at least at one block, which is what makes "expected - 1" a real race.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from m100.targets.m100 import isa
from m100.targets.m100.isa import Monitor, Sync, Trigger, Update

from .allocate import Allocation
from .hazards import _NEED0
from .redundancy import Reduced


def linear_fit(v: np.ndarray) -> tuple[int, int]:
    """(expected, per_block) with ``expected + b*per_block >= v[b]``, ``<= max(v)`` at the last
    block, minimizing the summed slack over blocks that need something (v[b] > 0)."""
    v = np.asarray(v, dtype=np.int64)
    nb = len(v)
    vmax = int(v.max())
    if nb == 1:
        return vmax, 0
    d = int(v[1] - v[0])
    if v[0] > 0 and d >= 0 and (v == v[0] + d * np.arange(nb)).all():
        return int(v[0]), d  # an exact progression (the usual streaming case): zero slack
    # The summed slack is convex in k (e(k) = max_b(v[b] - b*k) is a max of lines) and the
    # feasible k form [0, kmax]; an integer minimum lies at the floor/ceil of a breakpoint of e
    # (any pair of blocks, zero-need blocks included) or at an end of that interval.
    kmax = min((vmax - int(v[b])) // (nb - 1 - b) for b in range(nb - 1))
    cands = {0, kmax}
    for a in range(nb):
        for b in range(a + 1, nb):
            d = int(v[b] - v[a])
            if d > 0:
                cands.add(d // (b - a))
                cands.add(-(-d // (b - a)))
    cands = {k for k in cands if 0 <= k <= kmax}
    bidx = np.arange(nb)
    best = None
    for k in sorted(cands):
        e = int((v - bidx * k).max())
        if e < 0 or e + (nb - 1) * k > vmax:
            continue
        slack = int(((e + bidx * k - v)[v > 0]).sum())
        if best is None or slack < best[0]:
            best = (slack, e, k)
    assert best is not None  # k = 0 always qualifies
    return best[1], best[2]


def resynced(inst: isa.Instruction, sync: Sync) -> isa.Instruction:
    """``dataclasses.replace(inst, sync=sync)`` for an instruction kind (a frozen dataclass of
    fields only: no ``__post_init__``, no field with ``init=False``): a new object with the same
    field values in the same order and ``sync``, without the generated ``__init__``'s keyword
    call and one ``object.__setattr__`` per field (~16 000 on ResNet-50). Nothing else of
    ``inst``'s ``__dict__`` (what its checks remembered) is carried over."""
    cls = type(inst)
    names = _FIELDS.get(cls)
    if names is None:
        fs = dataclasses.fields(cls)
        assert dataclasses.is_dataclass(cls) and not hasattr(cls, "__post_init__") and all(
            f.init for f in fs), cls
        names = _FIELDS[cls] = tuple(f.name for f in fs)
    new = object.__new__(cls)
    src, d = inst.__dict__, new.__dict__
    for f in names:
        d[f] = src[f]
    d["sync"] = sync
    return new


_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields_only(cls: type, names: tuple[str, ...]) -> None:
    """``cls`` is a frozen dataclass of exactly the fields ``names`` (in order), no
    ``__post_init__``, every field in ``__init__``: what the makers below assume (checked when
    this module is imported, so a change of the ISA classes fails loudly here)."""
    fs = dataclasses.fields(cls)
    if not (cls.__dataclass_params__.frozen and not hasattr(cls, "__post_init__")
            and not hasattr(cls, "__slots__") and all(f.init for f in fs)
            and tuple(f.name for f in fs) == names):
        raise AssertionError(f"codegen: {cls.__name__} is not the frozen dataclass of fields "
                             f"{names} its maker builds")


def _maker(cls: type, names: tuple[str, ...]):
    """A function of the values of ``names`` (in order) that makes ``cls`` as its generated
    ``__init__`` does, but sets the fields straight into ``__dict__`` instead of one
    ``object.__setattr__`` each (frozen): generated from the names, as dataclasses generate their
    ``__init__``. ``cls`` is checked first (:func:`_fields_only`)."""
    _fields_only(cls, names)
    sets = "; ".join(f"d[{n!r}] = {n}" for n in names)
    ns = {"_new": object.__new__, "cls": cls}
    exec(f"def make({', '.join(names)}):\n    o = _new(cls)\n    d = o.__dict__\n    {sets}\n"
         "    return o\n", ns)
    return ns["make"]


# Monitor / Update / Sync as their generated ``__init__`` makes them (the same fields in the
# same order): ~1.6 -> ~0.5 us each (ResNet-50: ~41 000 monitors, ~22 000 updates, 17 090 syncs)
_monitor = _maker(Monitor, ("tpb", "counter", "expected", "per_block"))
_update = _maker(Update, ("counter", "tpb_mask", "amount", "trigger"))
_sync = _maker(Sync, ("blocks", "monitors", "updates"))


def codegen(red: Reduced, al: Allocation, insts: list[isa.Instruction]) -> tuple[
        list[isa.Instruction], dict]:
    g = al.graph
    blocks = g.blocks
    cum: dict[tuple[int, int, int, int], int] = {}  # (home, counter, inst, block) -> running total
    for (t, c), evs in al.events.items():
        for n, (i, k) in enumerate(evs, start=1):
            cum[(t, c, i, k)] = n

    # updates
    upd: dict[int, dict[tuple[int, Trigger], int]] = {}
    for (i, t), trig in al.trigger.items():
        key = (al.inst_counter[(i, t)], trig)
        u = upd.get(i)
        if u is None:
            u = upd[i] = {}
        u[key] = u.get(key, 0) | (1 << t)

    # monitor requirements per consumer and counter: per block, the count to wait for (lists of
    # Python ints: most instructions have one block, numpy per need cost more than the work).
    # One pass per kept need (~41 000 on ResNet-50): the tables as locals, the need's key and
    # ``(i, home)`` made once; one merge rule for kept and chain needs (``need_value``: inline
    # it measured within the noise, ~0.005 CPU-s on ResNet-50)
    reqs: dict[int, dict[tuple[int, int], list[int]]] = {}

    def need_value(j: int, t: int, c: int, vals: list[int]) -> None:
        r = reqs.get(j)
        if r is None:
            r = reqs[j] = {}
        cur = r.get((t, c))
        r[(t, c)] = vals if cur is None else list(map(max, cur, vals))
    home, inst_counter, trigger, block = al.home, al.inst_counter, al.trigger, Trigger.BLOCK
    for ij, h in al.needs.items():
        i, j = ij
        t = home[ij]
        it = (i, t)
        c = inst_counter[it]
        trig = trigger[it]
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

    out: list[isa.Instruction] = []
    n_mon = n_up = n_block = n_remote = 0
    dma = isa.Unit.DMA
    for j, inst in enumerate(insts):
        mons = []
        r = reqs.get(j)
        if r:  # by (home, counter); one entry needs no sort
            for (t, c), vals in (sorted(r.items()) if len(r) > 1 else r.items()):
                if len(vals) == 1:  # one block: the value itself, per_block 0 (linear_fit's)
                    if vals[0] > 0:
                        mons.append(_monitor(t, c, vals[0], 0))
                elif max(vals) > 0:
                    e, k = linear_fit(vals)
                    mons.append(_monitor(t, c, e, k))
        ups = []
        u = upd.get(j)
        if u:  # by (counter, trigger)
            unit, idx = inst.executor
            for (c, trig), mask in (sorted(u.items()) if len(u) > 1 else u.items()):
                ups.append(_update(c, mask, 1, trig))
                n_block += trig is block
                n_remote += (unit is dma) or bool(mask & ~(1 << idx))
            n_up += len(ups)
        n_mon += len(mons)
        out.append(resynced(inst, _sync(blocks[j], tuple(mons), tuple(ups))))
    stats = {"monitors": n_mon, "updates": n_up, "block_updates": n_block,
             "remote_updates": n_remote}
    return out, stats

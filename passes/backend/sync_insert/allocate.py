"""Stage 4: channels, home TPBs and counter allocation within ``machine.su_counters`` per TPB.

* The *home* of a need ``i -> j`` is the TPB whose SU holds the counter ``j`` monitors: ``j``'s own
  TPB for a TPB unit; for a DMA consumer (DMAs may monitor any TPB) the producer's TPB, or, for
  DMA -> DMA, a TPB the producer already signals, else the TPB with the fewest channels.
* A *channel* is (producer executor, home TPB). One executor's updates are issued in its program
  order, so the events on a channel form a happens-before chain and one monotonic counter serves
  all of its hand-offs: the consumer of the ``n``-th event waits for ``counter >= n`` (the
  expected-value ranges of successive hand-offs simply follow one another).
* Invariant of every counter: **its update events form a happens-before chain.** Then
  ``counter >= cum(e)`` implies event ``e`` was issued, even if remote updates arrive out of order
  (the arrived events sum to at least ``cum(e)``, which the events strictly before ``e`` can not).
* Reuse by lifetime: a channel may take over a counter whose last event happens-before the
  channel's first event (the chain continues; expected values start at the counter's running total).
* Segments: when a TPB would need more counters than ``budget`` with whole channels (a channel
  holds its counter from its first event to its last, over the whole program), the TPB's
  channels are split per producing instruction (:func:`_segments`): each instruction's events
  take any counter whose events all happen-before them, so the counters needed are only the
  producers live at one time. The program is unchanged on every TPB within the budget.
* Budget: when a TPB still needs more counters than ``budget``, the decision is explicit and
  reported (on whole channels): ``on_budget="merge"`` merges the channel into a live counter and *serializes* the
  writers of that counter in global order, which keeps the invariant: a writer that can monitor
  the home TPB (its units, DMAs) first monitors the counter for the previous writer's last event
  (a chain monitor); a writer on another TPB gets that wait as an ordinary ordering on its own
  TPB, and allocation is redone until no new ordering appears. ``on_budget="error"`` raises
  :class:`SyncError` naming the TPB and the channels.
* Finally counter ids are permuted per TPB so that an instruction signalling several TPBs finds
  one id on as many of them as possible (one update with a multi-TPB mask per distinct id):
  counters signalled together by many instructions share an id first (:func:`_align_ids`).
  Segments help it: one first tries the counter numbers its instruction took on the TPBs
  allocated before (the hints of :func:`_greedy`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from m100.targets.m100.isa import Trigger, Unit

from .analyze import SyncError, inst_name
from .graph import HbGraph
from .hazards import Hazard
from .redundancy import Reduced

Executor = tuple  # (Unit, index)


def exec_name(e: Executor) -> str:
    unit, idx = e
    return f"DMA{idx}" if unit is Unit.DMA else f"{unit.name}@TPB{idx}"


@dataclass
class Allocation:
    home: dict[tuple[int, int], int] = field(default_factory=dict)  # need -> home TPB
    counter: dict[tuple, int] = field(default_factory=dict)  # channel (or segment) -> counter id
    inst_counter: dict[tuple[int, int], int] = field(default_factory=dict)  # (inst, home) -> id
    trigger: dict[tuple[int, int], Trigger] = field(default_factory=dict)  # (inst, home) -> trigger
    events: dict[tuple[int, int], list[tuple[int, int]]] = field(default_factory=dict)
    # (home, counter) -> chain of events (inst, block), in order
    chain_needs: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    # (i1, k1, i2, home, counter): i2 waits for event (i1, k1) on that counter (serialization)
    decisions: list[dict] = field(default_factory=list)
    counters_used: dict[int, int] = field(default_factory=dict)
    needs: dict = field(default_factory=dict)  # the orderings carried (kept + serializing ones)
    extra: dict = field(default_factory=dict)  # serializing orderings added for remote writers
    graph: object = None  # happens-before over all of them


def allocate(red: Reduced, machine, *, budget: int | None = None,
             on_budget: str = "merge") -> Allocation:
    if on_budget not in ("merge", "error"):
        raise SyncError(f"sync-insert: on_budget must be 'merge' or 'error', not '{on_budget}'")
    budget = machine.su_counters if budget is None else budget
    if not 1 <= budget <= machine.su_counters:
        raise SyncError(f"sync-insert: counter budget {budget} outside 1..{machine.su_counters}")
    blocks = red.graph.blocks
    extra: dict[tuple[int, int], Hazard] = {}
    kept: list[HbGraph] = []  # the graph of the kept needs with its clocks, before a change
    for _ in range(64):
        needs = dict(red.kept)
        for key, h in extra.items():
            needs[key] = (h if key not in needs else
                          Hazard(key[0], key[1], np.maximum(needs[key].need, h.need),
                                 needs[key].why + h.why))
        if extra and kept:
            # the kept needs' graph and clocks as the first round found them, plus the
            # serializing orderings: the same happens-before as the graph of ``needs`` (a key
            # in both gives both need vectors' edges, the larger block implies the smaller),
            # so the same clocks, without sweeping them again from the first node
            g = kept[0].fork()
            for (i, j), h in extra.items():
                g.add_need(i, j, h.need)
        elif extra:
            g = HbGraph(red.graph.insts, blocks)
            for (i, j), h in needs.items():
                g.add_need(i, j, h.need)
        else:  # the reduction's graph of the kept needs (with its clocks), unchanged here
            g = red.graph
        al, pending = _allocate_once(needs, g, machine, budget, on_budget,
                                     None if extra else kept)
        grew = False
        for (i1, k1, i2) in pending:
            old = extra.get((i1, i2))
            if old is not None and old.need[0] >= k1:
                continue
            need = np.full(blocks[i2], -1, dtype=np.int64)
            need[0] = k1
            if old is not None:
                need = np.maximum(need, old.need)
            extra[(i1, i2)] = Hazard(i1, i2, need, [("SERIALIZE", None, 0, 0)])
            grew = True
        if not grew:
            al.needs, al.extra, al.graph = needs, extra, g
            return al
    raise SyncError("sync-insert: merging counters to meet the budget of "
                    f"{budget} per TPB did not converge; raise the budget")


def _allocate_once(needs, g, machine, budget, on_budget, keep=None):
    """One allocation of every TPB's counters over the graph ``g`` of ``needs``; ``keep``
    (a list) receives a fork of ``g`` before the first serializing edge changes it."""
    insts = g.execs  # executors per instruction
    al = Allocation()
    blocks = g.blocks
    pending: list[tuple[int, int, int]] = []

    # --- homes ---------------------------------------------------------------------------------
    chans_of_tpb: dict[int, set] = {t: set() for t in range(machine.num_tpbs)}
    dma_dma = []
    for (i, j) in sorted(needs):
        pu, pidx = insts[i]
        cu, cidx = insts[j]
        if cu is not Unit.DMA:
            t = cidx
        elif pu is not Unit.DMA:
            t = pidx
        else:
            dma_dma.append((i, j))
            continue
        al.home[(i, j)] = t
        chans_of_tpb[t].add(insts[i])
    for (i, j) in dma_dma:
        p = insts[i]
        have = [t for t, s in chans_of_tpb.items() if p in s]
        t = have[0] if have else min(chans_of_tpb, key=lambda t: (len(chans_of_tpb[t]), t))
        al.home[(i, j)] = t
        chans_of_tpb[t].add(p)

    # --- triggers and channel events ---------------------------------------------------------
    for (i, j), h in needs.items():
        t = al.home[(i, j)]
        streamed = blocks[i] > 1 and bool(((h.need >= 0) & (h.need < blocks[i] - 1)).any())
        if streamed or (i, t) not in al.trigger:
            al.trigger[(i, t)] = Trigger.BLOCK if streamed else al.trigger.get((i, t), Trigger.END)
    chan_events: dict[tuple[Executor, int], list[tuple[int, int]]] = {}
    for (i, t), trig in sorted(al.trigger.items()):
        evs = ([(i, k) for k in range(blocks[i])] if trig is Trigger.BLOCK
               else [(i, blocks[i] - 1)])
        chan_events.setdefault((insts[i], t), []).extend(evs)
    for evs in chan_events.values():
        evs.sort()

    # --- counters per TPB --------------------------------------------------------------------
    hint: dict[int, list[int]] = {}  # instruction -> its counters on the TPBs allocated so far
    chans_of: dict[int, list] = {}  # home TPB -> its channels, in chan_events' order
    for c in chan_events:
        chans_of.setdefault(c[1], []).append(c)
    for t in range(machine.num_tpbs):
        chans = sorted(chans_of.get(t, ()), key=lambda c: chan_events[c][0])
        # an allocation over the budget is only counted (and replaced below), so it stops
        # as soon as it is over; but for the count an error names
        stop = budget
        counters = _greedy(g, chans, chan_events, None, stop=stop)
        if len(counters) > budget:
            # over the budget with whole channels: a channel holds its counter from its first
            # event to its last, over the whole program. Its instructions' events are a chain on
            # their own, so each may take any counter whose events all happen-before it
            # (segments): counters are then only as many as the channels live at one time
            whole = chans
            chans = _segments(chans, chan_events)
            last = stop if on_budget != "error" else None
            counters = _greedy(g, chans, chan_events, None, hint=hint, stop=stop)
            if len(counters) > budget:  # the hinted counters may not fit where the first fit does
                counters = _greedy(g, chans, chan_events, None, stop=last)
            if len(counters) > budget and on_budget == "error":
                raise SyncError(
                    f"sync-insert: TPB {t} needs {len(counters)} sync counters but the budget is "
                    f"{budget} (channels: {', '.join(exec_name(c[0]) for c in whole)}); rerun "
                    "with on_budget='merge' to merge channels, or give the program fewer "
                    "concurrent producers per TPB")
            if len(counters) > budget:
                chans = whole  # merges (below) of whole channels, as without segments
        if len(counters) > budget:
            # channels whose writer can not monitor TPB t can not be serialized: they go first
            order = ([c for c in chans if not _can_monitor(c[0], t)]
                     + [c for c in chans if _can_monitor(c[0], t)])
            counters = _greedy(g, order, chan_events, budget, al.decisions, t)
        al.counters_used[t] = len(counters)
        for ci, cs in enumerate(counters):
            for ch in cs["chans"]:
                al.counter[ch] = ci
                for i, _ in chan_events[ch]:
                    al.inst_counter[(i, t)] = ci
                    h = hint.setdefault(i, [])
                    if ci not in h:
                        h.append(ci)
            evs = sorted(e for ch in cs["chans"] for e in chan_events[ch])
            al.events[(t, ci)] = evs
            # a counter no channel was merged into is a happens-before chain already: each
            # channel took it over after its tail, or opened it (_serialize would find nothing)
            if len(cs["writers"]) > 1 and cs.get("merged"):
                if keep is not None and not keep:
                    keep.append(g.fork())
                _serialize(al, g, t, ci, evs, pending)
    _align_ids(al, budget)
    return al, pending


def _segments(chans: list, chan_events: dict) -> list:
    """The channels ``(executor, home)`` split into one *segment* ``(executor, home, i)`` per
    producing instruction ``i`` (all its blocks' events: one update names one counter), added to
    ``chan_events``; in the order of their first events. A segment's events are a
    happens-before chain (one executor, program order) like a channel's."""
    segs = []
    for ch in chans:
        by_inst: dict[int, list] = {}
        for e in chan_events[ch]:
            by_inst.setdefault(e[0], []).append(e)
        for i, evs in by_inst.items():
            key = (ch[0], ch[1], i)
            chan_events[key] = evs
            segs.append(key)
    segs.sort(key=lambda c: chan_events[c][0])
    return segs


def _align_ids(al: Allocation, budget: int) -> None:
    """Counter ids are labels local to a TPB: label the ``(tpb, counter)`` slots so that an
    instruction signalling several TPBs finds the same id on as many of them as possible (its
    updates with one id and trigger merge into one multi-TPB ``tpb_mask``: it needs one update
    per distinct label of the slots it signals).

    Two slots are *signalled together* by an instruction that signals both; pairs of slots, most
    often signalled together first, join into groups of at most one slot per TPB (union-find).
    Groups, largest first, take the label free on the most of their TPBs (all of them, usually);
    the slots whose TPB has it taken try again with the next. A TPB has at most ``budget``
    slots, so every slot finds a label. A writer-by-writer labeling (a broadcast's slots a common
    label only where none was labeled yet) left ResNet-50 224 with 28 882 updates where
    this gives 25 045 (22 509 with the segments' hints of :func:`_greedy`); docs/sync.md."""
    parent = {tc: tc for tc in al.events}
    members = {tc: [tc] for tc in al.events}
    tpbs = {tc: {tc[0]} for tc in al.events}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in _pairs_by_weight(al.inst_counter):
        ra, rb = find(a), find(b)
        if ra == rb or not tpbs[ra].isdisjoint(tpbs[rb]):
            continue
        if len(members[ra]) < len(members[rb]):
            ra, rb = rb, ra
        parent[rb] = ra
        members[ra] += members.pop(rb)
        tpbs[ra] |= tpbs.pop(rb)
    label: dict[tuple[int, int], int] = {}
    used: dict[int, set[int]] = {}
    for r in sorted(members, key=lambda r: (-len(members[r]), r)):
        todo = sorted(members[r])
        taken = set().union(*(used.get(t, ()) for t, _ in todo))
        # free on every TPB: the counters' own number if they agree (a counter nothing aligns
        # keeps its number: programs without multi-TPB signals stay as they were), else the least
        own = {c for _, c in todo}
        best = (own.pop() if len(own) == 1 and not own & taken else
                next((n for n in range(budget) if n not in taken), None))
        while todo:
            if best is None:
                best = max(range(budget), key=lambda n: (
                    sum(n not in used.get(t, ()) for t, _ in todo), -n))
            rest = []
            for t, c in todo:
                u = used.setdefault(t, set())
                if best in u:
                    rest.append((t, c))
                else:
                    label[(t, c)] = best
                    u.add(best)
            assert len(rest) < len(todo), "a TPB has more counters than the budget"
            todo, best = rest, None
    al.counter = {ch: label[(ch[1], c)] for ch, c in al.counter.items()}
    al.inst_counter = {(i, t): label[(t, c)] for (i, t), c in al.inst_counter.items()}
    al.events = {(t, label[(t, c)]): evs for (t, c), evs in al.events.items()}
    al.chain_needs = [(i1, k1, i2, t, label[(t, c)]) for (i1, k1, i2, t, c) in al.chain_needs]
    for d in al.decisions:
        d["counter"] = label[(d["tpb"], d["counter"])]


def _pairs_by_weight(inst_counter: dict) -> list:
    """The pairs ``(a, b)``, ``a < b``, of slots ``(tpb, counter)`` that one instruction signals
    both of, most often signalled together first, ties by the pair (:func:`_align_ids`), on
    arrays: a slot ``(t, c)`` as the number ``t * w + c``
    (``w`` above every counter id, so the numbers sort as the tuples); each instruction's
    slots sorted, its pairs listed by position (every element with each later one of its
    group: the combinations), counted by ``np.unique`` (which sorts them: ties by the pair),
    then ordered by the count, descending, stably (``lexsort``). The 1024-token LLaMA prefill
    layer: 276 926 pairs, 99 379 distinct, each round."""
    n = len(inst_counter)
    if not n:
        return []
    flat = np.fromiter((x for (i, t), c in inst_counter.items() for x in (i, t, c)),
                       dtype=np.int64, count=3 * n)
    inst, tpb, ctr = flat[0::3], flat[1::3], flat[2::3]
    w = int(ctr.max()) + 1
    slot = tpb * w + ctr
    order = np.lexsort((slot, inst))
    inst, slot = inst[order], slot[order]
    start = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]])
    size = np.diff(np.r_[start, n])
    k = np.repeat(size, size)  # per element: its group's size
    pos = np.arange(n) - np.repeat(start, size)  # per element: its place in the group
    later = k - pos - 1  # the elements after it in its group
    total = int(later.sum())
    if not total:
        return []
    a = np.repeat(np.arange(n), later)
    b = a + 1 + (np.arange(total) - np.repeat(np.cumsum(later) - later, later))
    big = int(slot.max()) + 1
    code, count = np.unique(slot[a] * big + slot[b], return_counts=True)
    code = code[np.lexsort((code, -count))]
    sa, sb = np.divmod(code, big)
    ta, ca = np.divmod(sa, w)
    tb, cb = np.divmod(sb, w)
    return list(zip(zip(ta.tolist(), ca.tolist()), zip(tb.tolist(), cb.tolist())))


def _can_monitor(e: Executor, t: int) -> bool:
    unit, idx = e
    return unit is Unit.DMA or idx == t


def _greedy(g, chans, chan_events, budget, decisions=None, t=None, hint=None,
            stop: int | None = None) -> list[dict]:
    """Assign channels (in the given order) to counters: reuse a counter whose last event
    happens-before the channel's first one, else open a new one, else (budget reached) merge into
    the live counter whose serialization costs the fewest waits (a reported decision).

    ``hint`` (segments only): instruction -> the counters its segments took on the TPBs
    allocated before; a segment takes the first of those that it may reuse here before any other
    (the same instructions then share the same counter numbers on every TPB they signal, so
    :func:`_align_ids` can give a broadcast one id everywhere: one update).

    ``stop`` (without ``budget``): return as soon as more than ``stop`` counters are open --
    counters are only ever added, so the caller that only asks whether the allocation fits
    ``stop`` gets the same answer (the list is then a prefix of the allocation).

    Without a budget: :func:`_greedy_open` (the counters of :func:`_greedy_loop`, whose first
    fit tests each counter's tails one by one; ``test_allocate.py`` compares the two)."""
    if budget is None:
        return _greedy_open(g, chans, chan_events, hint, stop)
    return _greedy_loop(g, chans, chan_events, budget, decisions, t, hint, stop)


def _greedy_loop(g, chans, chan_events, budget, decisions=None, t=None, hint=None,
                 stop: int | None = None) -> list[dict]:
    """:func:`_greedy` channel by channel (any budget, ``None`` too)."""
    counters: list[dict] = []
    for ch in chans:
        if stop is not None and len(counters) > stop:
            break
        evs = chan_events[ch]
        before = g.before(g.E(*evs[0]))  # g.hb(g.E(*e), first), first = the channel's first
        slot = None
        if hint is not None and len(ch) > 2:
            slot = next((ci for ci in hint.get(ch[2], ()) if ci < len(counters) and
                         all(map(before, counters[ci]["tails"]))), None)
        if slot is None:
            slot = next((ci for ci, cs in enumerate(counters)
                         if all(map(before, cs["tails"]))), None)
        if slot is None and (budget is None or len(counters) < budget):
            counters.append({"chans": [], "tails": [], "writers": set()})
            slot = len(counters) - 1
        merged = None
        if slot is None:
            # the merge that adds the fewest serializing waits, preferring counters whose
            # writers can all monitor TPB t (no waits to place on other TPBs); each counter's
            # sorted events and chain cost are kept from here on (the graph does not change
            # during this call), a merge's cost is the kept one plus what the new events change
            for cs in counters:
                if "evs" not in cs:
                    cs["evs"] = sorted(e for c in cs["chans"] for e in chan_events[c])
                    cs["cost"] = _chain_cost(g, cs["evs"], t)
            costs = [_merged_cost(g, cs["evs"], cs["cost"], evs, t) for cs in counters]
            slot = min(range(len(counters)), key=lambda ci: (
                costs[ci], len(counters[ci]["writers"]), ci))
            merged = costs[slot]
            decisions.append({
                "kind": "merge", "tpb": t, "counter": slot, "channel": exec_name(ch[0]),
                "into": [exec_name(c[0]) for c in counters[slot]["chans"]],
                "why": f"TPB {t} has a budget of {budget} counters and all are live",
                "effect": "the writers of this counter are serialized in global order"
                          + "".join(f"; {exec_name(w)} waits through its own TPB's counters"
                                    for w in sorted(counters[slot]["writers"] | {ch[0]})
                                    if not _can_monitor(w, t))})
        cs = counters[slot]
        if merged is not None:
            cs["merged"] = True
        if "evs" in cs:
            if merged is None:
                merged = _merged_cost(g, cs["evs"], cs["cost"], evs, t)
            cs["evs"], cs["cost"] = sorted(cs["evs"] + evs), merged
        cs["chans"].append(ch)
        cs["writers"].add(ch[0])
        if merged is None:
            # taken over (or new): every tail happens-before the channel's first event, so
            # its last event alone stands for them in later happens-before tests
            cs["tails"] = [evs[-1]]
        else:
            cs["tails"] = [e for e in cs["tails"] if g.execs[e[0]] != ch[0]] + [evs[-1]]
    return counters


def _greedy_open(g, chans, chan_events, hint, stop) -> list[dict]:
    """:func:`_greedy` without a budget (no merge: a counter is taken over or opened, so each
    has one tail, its last channel's last event): the first-fit test of a counter is one read.
    A channel's first event ``v`` may reuse counter ``ci`` iff its tail ``E(i, k)`` happens-before
    ``v`` -- ``clock[v, x(i)] >= rank(E(i, k))`` and not ``v`` itself, :meth:`HbGraph.before`'s
    test -- so ``v``'s clock row read at each tail's column answers a counter (a segment on the
    1024-token LLaMA prefill layer faced ~60 live counters, tested one by one with ``before``
    until session 28); the hinted counters are tried first in their order, then the least
    index, as in the loop. The reads are Python scalars, in first-fit order, stopping at the
    first fit (session 28-33: one numpy gather of every counter per channel; ResNet-50's 84
    calls, up to 64 open counters, ~21 000 channels: 0.124 -> 0.062 CPU-s warm -- the fit is
    nearly always among the first counters)."""
    counters: list[dict] = []
    tcol: list[int] = []  # per counter: its tail's clock column, rank, node
    trank: list[int] = []
    tnode: list[int] = []
    rank0, base = g.rank0, g._base
    if g._xidl is None:
        g._xidl = [g.xid[x] for x in g.execs]
    xid = g._xidl
    # the graph does not change during the call: its clocks are brought up to date as the
    # channels' first events go further
    c, dirty = g._clock, (g._dirty if g._clock is not None else -1)
    m = 0
    for ch in chans:
        if stop is not None and m > stop:
            break
        evs = chan_events[ch]
        i, k = evs[0]
        v = base[i] + 2 * k + 1  # E(i, k)
        slot = None
        if m:
            if dirty <= v:
                c = g.clock(v)
                dirty = g._dirty
            row = c[v]
            if hint is not None and len(ch) > 2:
                for ci in hint.get(ch[2], ()):
                    if ci < m and row.item(tcol[ci]) >= trank[ci] and tnode[ci] != v:
                        slot = ci
                        break
            if slot is None:
                for ci in range(m):
                    if row.item(tcol[ci]) >= trank[ci] and tnode[ci] != v:
                        slot = ci
                        break
        if slot is None:
            cs = {"chans": [ch], "tails": None, "writers": {ch[0]}}
            counters.append(cs)
            slot = m
            m += 1
            tcol.append(0)
            trank.append(0)
            tnode.append(0)
        else:
            cs = counters[slot]
            cs["chans"].append(ch)
            cs["writers"].add(ch[0])
        # taken over (or new): every tail happens-before the channel's first event, so its
        # last event alone stands for them in later happens-before tests
        e = evs[-1]
        cs["tails"] = [e]
        i, k = e
        tcol[slot] = xid[i]
        trank[slot] = rank0[i] + k
        tnode[slot] = base[i] + 2 * k + 1
    return counters


def _chain_cost(g, evs: list[tuple[int, int]], t: int) -> tuple[int, int]:
    """(waits that must go to another TPB, all waits) that serializing these events would take."""
    evs = sorted(evs)
    gaps = [i2 for (i1, k1), (i2, k2) in zip(evs, evs[1:])
            if i1 != i2 and g.execs[i1] != g.execs[i2] and not g.hb(g.E(i1, k1), g.E(i2, k2))]
    return sum(1 for i2 in gaps if not _can_monitor(g.execs[i2], t)), len(gaps)


def _gap(g, a: tuple[int, int], b: tuple[int, int], t: int) -> tuple[int, int]:
    """:func:`_chain_cost` of the two consecutive events ``a``, ``b``."""
    (i1, k1), (i2, k2) = a, b
    if i1 == i2 or g.execs[i1] == g.execs[i2] or g.hb(g.E(i1, k1), g.E(i2, k2)):
        return 0, 0
    return (0 if _can_monitor(g.execs[i2], t) else 1), 1


def _merged_cost(g, old: list, cost: tuple[int, int], new: list, t: int) -> tuple[int, int]:
    """``_chain_cost(g, old + new, t)`` from ``cost = _chain_cost(g, old, t)``: the cost is a sum
    over consecutive pairs of the sorted events, so only the pairs the new events split or
    form change (``old`` sorted; the events of different executors are distinct). On the
    1024-token LLaMA prefill layer a TPB's counters carry thousands of events each and every
    merge asked for the cost of every counter."""
    from bisect import bisect_left
    r, n = cost
    new = sorted(new)
    pos = [bisect_left(old, e) for e in new]
    k = 0
    while k < len(new):
        p = pos[k]
        k2 = k
        while k2 + 1 < len(new) and pos[k2 + 1] == p:
            k2 += 1
        seq = new[k:k2 + 1]
        if p > 0:
            seq = [old[p - 1]] + seq
        if p < len(old):
            seq = seq + [old[p]]
        if 0 < p < len(old):
            dr, dn = _gap(g, old[p - 1], old[p], t)
            r, n = r - dr, n - dn
        for a, b in zip(seq, seq[1:]):
            dr, dn = _gap(g, a, b, t)
            r, n = r + dr, n + dn
        k = k2 + 1
    return r, n


def _serialize(al: Allocation, g, t: int, ci: int, evs: list[tuple[int, int]],
               pending: list) -> None:
    """Make the events of a multi-writer counter a happens-before chain: a chain monitor on the
    counter itself when the next writer can monitor TPB t, else an ordinary need (placed on the
    writer's own TPB in the next allocation round)."""
    for (i1, k1), (i2, k2) in zip(evs, evs[1:]):
        if i1 == i2 or g.execs[i1] == g.execs[i2]:
            continue
        if g.hb(g.E(i1, k1), g.E(i2, k2)):
            continue
        if _can_monitor(g.execs[i2], t):
            al.chain_needs.append((i1, k1, i2, t, ci))
        else:
            pending.append((i1, k1, i2))
        g.add_sync(i1, k1, i2, 0)


__all__ = ["Allocation", "allocate", "exec_name", "inst_name"]

"""``ListScheduler.hbsm_use`` keyed by one int per (TPB, segment) (session 34, issue 15).

``_prefetch`` walks the HBSM use of the last segments on each TPB of a segment (~0.4 M reads a
ResNet-50 schedule); keyed by ``(TPB, segment)`` tuples its ~0.25 CPU-s were mostly the tuples'
hashes. Now the key is ``segment * num_tpbs + TPB`` (``ListScheduler._use_key``). The oracle is
``_prefetch`` as it was, written out here with the tuple keys (:func:`_prefetch_by_pairs`): whole
placements with it and with the builder's own give the same plan (tasks, prefetch barriers, tail
chunks), and after every call the builder's ``hbsm_use`` is the reference's with each pair's key
made by ``_use_key`` -- on ResNet-18 32 at 30 % of the HBSM (where the share stops walks) and on
the tail-prefetch MLP (the tail branch)."""

from __future__ import annotations

from m100.passes.schedule import list_schedule
from m100.passes.schedule import placement
from m100.passes.schedule.list_schedule import WEIGHT_BUFFERS, ListScheduler
from m100.targets.m100.machine import get_machine

M100 = get_machine("m100")


def _prefetch_by_pairs(self, si, seg, stops=None):
    """``ListScheduler._prefetch`` before session 34: ``hbsm_use`` keyed by ``(TPB, segment)``."""
    cap = int(self.cm.machine.hbsm_bytes * self.s.prefetch_share)
    foot: dict[int, int] = {}
    wfoot: dict[int, int] = {}
    first = 0
    for st in seg.stages:
        plan = self.tl.plans[st.op]
        w = sum(b.nbytes for b in plan.buffers if b.role in WEIGHT_BUFFERS)
        if len(seg.stages) == 1 and not plan.weight_resident:
            first = sum(b.slot_bytes for b in plan.buffers if b.role == "weight")
        for x in st.tpbs:
            foot[x] = foot.get(x, 0) + plan.footprint
            wfoot[x] = wfoot.get(x, 0) + w
    use, kept_use, late_bytes = self.hbsm_use, self.kept_use, self.late_bytes
    held_use = self.held_use
    depth, isolated = self.prefetch_depth, self.isolated
    for x, f in foot.items():
        use[(x, si)] = f + kept_use.get((x, si), 0) + late_bytes.get(x, 0) + \
            held_use.get((x, si), 0)
        w = wfoot[x]
        if isolated or not w:
            continue
        hist = self.bar_hist.get(x)
        if not hist:
            continue
        n = len(hist)
        held = []
        d = 1
        while d < depth and d <= n:
            k = (x, hist[-d][0])
            if use.get(k, 0) + w > cap:
                if stops is not None:
                    stops.append(k)
                break
            held.append(k)
            d += 1
        if d == 1:
            if first and self.s.tail_prefetch:
                k = (x, hist[-1][0])
                tail = self.tail_at.get(k)
                if tail is not None:
                    self.tail_pending[(si, x)] = tail
                    use[k] = use.get(k, 0) + first
            continue
        for k in held:
            use[k] = use.get(k, 0) + w
        self.tl.prefetch[(si, x)] = hist[-d][0] if d <= n else -1


def _runs(monkeypatch, build):
    """``build()`` with the builder's ``_prefetch`` and with the reference: the two placements
    and, per ``_prefetch`` call, the ``hbsm_use`` after it (the reference's keys made by
    ``_use_key``) and the walks the share stopped."""
    new_seen, old_seen, stops = [], [], []
    own = ListScheduler._prefetch

    def spy_new(self, si, seg):
        own(self, si, seg)
        new_seen.append(dict(self.hbsm_use))

    monkeypatch.setattr(ListScheduler, "_prefetch", spy_new)
    new = build()

    def spy_old(self, si, seg):
        _prefetch_by_pairs(self, si, seg, stops)
        old_seen.append({self._use_key(x, s): v for (x, s), v in self.hbsm_use.items()})

    monkeypatch.setattr(ListScheduler, "_prefetch", spy_old)
    old = build()
    return new, old, new_seen, old_seen, stops


def test_use_keys_are_the_pairs(resnet_graph, monkeypatch):
    # at 30 % of the HBSM the share stops walks (the default share's plans: compile_same)
    new, old, new_seen, old_seen, stops = _runs(
        monkeypatch, lambda: placement.schedule(resnet_graph, M100, tpbs=8, prefetch_share=0.3))
    assert new.timeline.to_json() == old.timeline.to_json()
    assert new.timeline.prefetch == old.timeline.prefetch and new.timeline.prefetch
    assert len(new_seen) == len(old_seen) > 100
    assert new_seen == old_seen
    assert stops  # the share stopped walks


def test_use_keys_with_tail_chunks(monkeypatch):
    from .dp_draws import pin_draws
    from .test_tail_prefetch import _plan
    pin_draws(monkeypatch)
    new, old, new_seen, old_seen, _ = _runs(monkeypatch, lambda: _plan(True))
    assert new.tail_dma and new.tail_dma == old.tail_dma
    assert new.to_json() == old.to_json()
    assert new_seen == old_seen and new_seen


def test_use_key_is_one_per_pair():
    class _B:  # the key's definition needs only the machine
        cm = type("cm", (), {"machine": M100})()
    keys = {ListScheduler._use_key(_B(), x, s) for x in range(M100.num_tpbs) for s in range(-1, 300)}
    assert len(keys) == M100.num_tpbs * 301
    assert list_schedule.ListScheduler._use_key(_B(), 3, 5) == 5 * M100.num_tpbs + 3

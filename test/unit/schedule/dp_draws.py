"""The data-parallel local search's drawn moves (``search.DP_MOVES = "draw"`` until session 30),
written out: some tests pin them to reach a plan the enumerated moves do not find (an MLP whose
plan has tail chunks to prefetch, a prefetch share that binds), and ``test_dp_moves`` uses them
as the control of seed independence. ``pin_draws(monkeypatch)`` puts them in place of
``Search._dp_climb``."""

from __future__ import annotations

import random

from m100.passes.schedule.partition import col_splits
from m100.passes.schedule.search import Search


def draw_climb(self, op, best, best_c, kmax, tcu):
    """``iters // 2`` moves drawn from the op-name-seeded RNG, each kept iff cheaper (the loop of
    ``best_data_parallel`` before session 25's enumeration, verbatim)."""
    rng = random.Random(f"{self.seed}:{op.name}")
    for _ in range(0 if self.spent() else self.iters // 2):
        st = best.stages[0]
        k, gc, ch, kp = len(st.tpbs), st.gc, st.chunked, st.ks
        mult = max(1, st.bands // st.gr)
        move = rng.choice(("k-", "k+", "b+", "b-", "gc", "ch") if tcu else
                          ("k-", "k+", "b+", "b-", "gc"))
        if move in ("k-", "k+"):
            ks = sorted({x for x in self._k_candidates(kmax)})
            i = ks.index(k) if k in ks else 0
            i = max(0, i - 1) if move == "k-" else min(len(ks) - 1, i + 1)
            k2 = ks[i]
            gcs = col_splits(self.cm, self.g, op, k2)
            pick = [x for x in gcs if x <= gc] or [1]
            cand = self._dp_cfg(op, k2, max(pick) if rng.random() < 0.5 else rng.choice(gcs),
                                mult, chunked=ch)
        elif move == "b+":
            cand = self._dp_cfg(op, k, gc, mult * 2, chunked=ch, ks=kp)
        elif move == "b-":
            cand = self._dp_cfg(op, k, gc, max(1, mult // 2), chunked=ch, ks=kp)
        elif move == "ch":
            if kp > 1:
                continue
            cand = self._dp_cfg(op, k, gc, mult, chunked=not ch)
        else:
            gcs = col_splits(self.cm, self.g, op, k // kp)
            cand = self._dp_cfg(op, k, rng.choice(gcs), mult, chunked=ch, ks=kp)
        if cand is None:
            continue
        c = self.cost(cand, best_c)
        if c < best_c:
            best, best_c = cand, c
    return best, best_c


def pin_draws(monkeypatch) -> None:
    monkeypatch.setattr(Search, "_dp_climb", draw_climb)

"""The fluid timing model of the engine: streaming blocks are jobs that share HBSM banks and links
by max-min fair rates (:func:`~m100.sim.timing.share`), recomputed whenever a job starts or ends;
the per-column demand sums let the engine skip ``share`` when nobody is limited. A mixin of
:class:`~m100.sim.engine.Engine` (its state is created in ``Engine.__init__``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .timing import Cost, share


@dataclass
class Job:
    """A streaming block; its remaining work and rate are ``Engine.j_rem`` / ``j_rate``."""
    unit: int
    cost: Cost
    cols: np.ndarray | None = None  # the resource columns it puts demand on (Engine._col)
    use: np.ndarray | None = None  # that demand per cycle at its alone rate
    crit: bool = False  # on some column alone its demand rounds above the capacity


#: Skip :func:`~m100.sim.timing.share` when it would give every job its alone rate
#: (``Engine._unlimited``). False: always call it (tests compare the two bit for bit).
SHARE_SHORTCUT = True


class Fluid:
    # --- fluid streaming ----------------------------------------------------------------------
    def _job_units(self) -> np.ndarray:
        return np.fromiter(self.jobs, dtype=np.int64, count=len(self.jobs))

    def _advance(self) -> None:
        dt = self.now - self.fluid_t
        if dt > 0 and self.jobs:
            idx = self._job_units()
            r = self.j_rate[idx]
            fin = np.isfinite(r)
            if not fin.all():
                idx, r = idx[fin], r[fin]
            self.j_rem[idx] -= r * dt
        self.fluid_t = self.now

    def _col(self, key: tuple) -> int:
        i = self.col_id.get(key)
        if i is None:
            i = self.col_id[key] = self.col_cap.size
            self.col_cap = np.append(self.col_cap, self.cap(key))
            self.col_use = np.append(self.col_use, 0.0)
            self.col_cnt = np.append(self.col_cnt, 0)
        return i

    def _add_use(self, job: Job, sign: int) -> None:
        """Add (sign 1) or remove (-1) a streaming job's demands to the column sums."""
        if job.cols is None and job.cost.cols_of == self.token:  # for an earlier block
            job.cols, job.use, job.crit = job.cost.cols, job.cost.use, job.cost.crit
        if job.cols is None:
            cost, banks = job.cost, self.m.hbsm_banks
            w = cost.alone
            cols, use = [], []
            if math.isfinite(w):  # else no streaming work: no demand (share freezes it)
                for t, acc in cost.banks.items():
                    acc = np.asarray(acc, dtype=np.float64)
                    nz = np.flatnonzero(acc)
                    cols.append(t * banks + nz)
                    use.append(w * acc[nz])
                links = [(self._col(k), w * v) for k, v in cost.links.items() if v != 0]
                cols.append(np.array([c for c, _ in links], dtype=np.int64))
                use.append(np.array([u for _, u in links], dtype=np.float64))
            job.cols = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
            job.use = np.concatenate(use) if use else np.zeros(0)
            cap = self.col_cap[job.cols]
            inc = np.divide(cap, job.use, out=np.full(cap.shape, np.inf), where=job.use > 1e-12)
            job.crit = bool((inc < 1.0).any())
            cost.cols, cost.use, cost.crit, cost.cols_of = job.cols, job.use, job.crit, \
                self.token
        if job.cols.size:
            self.col_use[job.cols] += sign * job.use  # distinct columns per job
            self.col_cnt[job.cols] += sign
        self.crit_jobs += sign * job.crit
        self.col_updates += 1

    def _unlimited(self, jobs: list[Job]) -> bool:
        """True when :func:`share` would give every job exactly its alone rate.

        ``share``'s first step raises every job by ``d = min(1, min over columns of capacity /
        demand)`` and stops with rates ``d * alone`` if ``d >= 1 - 1e-12``; ``d`` is exactly 1
        when no ratio is below 1. A column used by several jobs whose running demand sum is under
        its capacity by a 1e-7 margin (far more than the rounding of either sum: each job's own
        demand is at most the capacity) has a ratio above 1; a column used by one job has that
        job's own ratio (``crit``: one below 1, from rounding, sends the case to ``share``)."""
        if not self.jobs:
            self.col_use[:] = 0.0  # no drift carried over
            return True
        if self.col_updates >= 4096:  # recompute the running sums now and then (drift)
            self.col_use[:] = 0.0
            self.col_cnt[:] = 0
            self.crit_jobs = 0
            for j in jobs:
                self._add_use(j, 1)
            self.col_updates = 0
        if self.crit_jobs:
            return False
        multi = self.col_cnt >= 2
        return bool((self.col_use[multi] <= self.col_cap[multi] * (1.0 - 1e-7)).all())

    def _reshare(self) -> None:
        jobs = list(self.jobs.values())
        self.fluid_version += 1
        if not jobs:
            self._unlimited(jobs)
            return
        idx = self._job_units()
        if SHARE_SHORTCUT and self._unlimited(jobs):
            rates = self.j_alone[idx]
        else:
            causes: list[str] = []
            # every streaming job's links are in caps_cache (ev_stream) and its alone rate is set
            rates = np.asarray(share([j.cost for j in jobs], self.caps_cache, self.m.hbsm_banks,
                                     causes), dtype=np.float64)
            for j, cause in zip(jobs, causes):
                if cause:
                    self.units[j.unit].bottleneck = cause
        self.j_rate[idx] = rates
        fin = np.isfinite(rates)
        t = np.zeros(idx.size)
        t[fin] = np.maximum(self.j_rem[idx[fin]], 0.0) / np.maximum(rates[fin], 1e-300)
        self.push(self.now + float(t.min()), "fluid", self.fluid_version)

    def ev_stream(self, u: int) -> None:
        us = self.units[u]
        us.state = "run"
        cost = us.cost
        from .timing import alone_rate
        caps = {k: self.cap(k) for k in cost.links}
        r = alone_rate(cost, caps)
        us.alone += 0.0 if not math.isfinite(r) else 1.0 / r
        self._advance()
        self.jobs[u] = Job(u, cost)
        self.j_rem[u], self.j_rate[u], self.j_alone[u] = 1.0, 0.0, cost.alone
        self._add_use(self.jobs[u], 1)
        self._reshare()

    def ev_fluid(self, version: int) -> None:
        if version != self.fluid_version:
            return
        self._advance()
        idx = self._job_units()
        r = self.j_rate[idx]
        done = idx[~np.isfinite(r) | (self.j_rem[idx] <= 1e-9)].tolist()
        if not done:  # float drift: finish the closest
            self._reshare()
            return
        for u in done:
            self._add_use(self.jobs.pop(u), -1)
        self._reshare()
        for u in done:
            self.ev_block_done(u)

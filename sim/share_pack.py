"""The streaming jobs' demand entries for :func:`~m100.sim.timing.share`, kept from one call to
the next (the engine's ``Fluid._reshare``).

``share`` reads every streaming job's alone rate and nonzero demands, concatenated in job order
(and within a job in column order). Building those arrays from ~50 jobs' cached terms was over a
third of each call (ResNet-18 224: 3 662 calls a timing run). Between two calls the engine's jobs
change only by jobs that finished (removed, the others keep their order) and jobs that started
(appended: the jobs are a dict in start order; each job has a number, ``Job.serial``, in start
order), so :meth:`SharePack.arrays` finds the kept jobs by their numbers (two searches), filters
their entries with one mask and appends the new jobs' terms: the same arrays, element for element,
as building them afresh (the tests compare the two bit for bit: ``test_share_pack.py`` against a
written-out reference, ``test_speed_paths.py`` against a pack that forgets every call), hence the
same rates and causes. (Until session 32 a switch, ``PACK``, chose between the two.)
"""

from __future__ import annotations

import numpy as np

from .timing import alone_rate, share_entries, share_terms

_NO_INT = np.zeros(0, dtype=np.int64)
_NO_FLOAT = np.zeros(0, dtype=np.float64)


class SharePack:
    """The packed entries of the jobs of the last call (``serials``: their numbers)."""

    def __init__(self) -> None:
        self.serials = _NO_INT
        self.w, self.code, self.val, self.job = _NO_FLOAT, _NO_INT, _NO_FLOAT, _NO_INT

    def arrays(self, serials: np.ndarray, costs: list, caps: dict, banks: int) -> tuple:
        """(w, code, val, job) of ``share`` for the jobs numbered ``serials`` (the engine's:
        strictly increasing, in start order, a number never reused; anything else is built
        afresh) with costs ``costs``."""
        old = self.serials
        nk = 0
        if old.size and serials.size and (serials.size == 1 or bool(
                (serials[1:] > serials[:-1]).all())):
            # the jobs of the last call still there are the new ones numbered <= its last; they
            # are the first nk of them, in the same order
            nk = int(np.searchsorted(serials, old[-1], side="right"))
            pos = np.searchsorted(serials[:nk], old)
            alive = pos < nk
            alive[alive] = serials[pos[alive]] == old[alive]
            if int(np.count_nonzero(alive)) != nk:  # (a number of the last call reused)
                nk = 0
        if nk == 0:
            w, code, val, job = _NO_FLOAT, _NO_INT, _NO_FLOAT, _NO_INT
        elif nk == old.size:
            w, code, val, job = self.w, self.code, self.val, self.job
        else:  # the kept jobs' entries, renumbered 0.. in the same order
            e = alive[self.job]
            # (a kept job's rank among the kept ones, as (cumsum(alive) - 1)[...])
            renum = np.empty(alive.size, dtype=np.int64)
            renum[alive] = np.arange(nk)
            w, code, val, job = self.w[alive], self.code[e], self.val[e], renum[self.job[e]]
        if nk < serials.size:  # the jobs that started since: appended
            new = costs[nk:]
            terms = [share_terms(c, banks) for c in new]
            sizes = [t[0].size for t in terms]
            w = np.concatenate([w, np.array([c.alone if c.alone is not None
                                             else alone_rate(c, caps) for c in new],
                                            dtype=np.float64)])
            code = np.concatenate([code] + [t[0] for t in terms]).astype(np.int64, copy=False)
            val = np.concatenate([val] + [t[1] for t in terms]).astype(np.float64, copy=False)
            job = np.concatenate([job, np.repeat(np.arange(nk, serials.size), sizes)])
        self.serials = serials
        self.w, self.code, self.val, self.job = w, code, val, job
        return w, code, val, job

    def share(self, serials: np.ndarray, costs: list, caps: dict, banks: int,
              causes: list[str] | None = None) -> np.ndarray:
        """``share(costs, caps, banks, causes)`` on the packed entries."""
        w, code, val, job = self.arrays(serials, costs, caps, banks)
        return share_entries(w, code, val, job, caps, causes)

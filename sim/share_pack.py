"""The streaming jobs' demand entries for :func:`~m100.sim.timing.share`, kept from one call to
the next (the engine's ``Fluid._reshare``).

``share`` reads every streaming job's alone rate and nonzero demands, concatenated in job order
(and within a job in column order). Building those arrays from ~50 jobs' cached terms was over a
third of each call (ResNet-18 224: 3 662 calls a timing run). Between two calls the engine's jobs
change only by jobs that finished (removed, the others keep their order) and jobs that started
(appended: the jobs are a dict in start order), so :meth:`SharePack.arrays` filters the kept
jobs' entries with one mask and appends the new jobs' terms: the same arrays, element for element,
as building them afresh (``PACK = False`` does that; the tests compare the two bit for bit), hence
the same rates and causes.
"""

from __future__ import annotations

import numpy as np

from .timing import alone_rate, share_entries, share_terms

#: Keep the packed entries between ``share`` calls. False: build them afresh every call.
PACK = True

_NO_INT = np.zeros(0, dtype=np.int64)
_NO_FLOAT = np.zeros(0, dtype=np.float64)


class SharePack:
    """The packed entries of the jobs of the last call (``keys``: the jobs' identities)."""

    def __init__(self) -> None:
        self.keys: list = []
        self.w, self.code, self.val, self.job = _NO_FLOAT, _NO_INT, _NO_FLOAT, _NO_INT

    def arrays(self, keys: list, costs: list, caps: dict, banks: int) -> tuple:
        """(w, code, val, job) of ``share`` for the jobs ``keys`` (distinct objects, job order)
        with costs ``costs``."""
        old = self.keys
        live = set(map(id, keys))
        alive = [id(k) in live for k in old]
        kept = [k for k, a in zip(old, alive) if a]
        nk = len(kept)
        if PACK and nk and nk <= len(keys) and all(x is y for x, y in zip(kept, keys)):
            if nk == len(old):
                w, code, val, job = self.w, self.code, self.val, self.job
            else:  # the kept jobs' entries, renumbered 0.. in the same order
                am = np.array(alive, dtype=bool)
                e = am[self.job]
                renum = np.cumsum(am) - 1
                w, code, val, job = self.w[am], self.code[e], self.val[e], renum[self.job[e]]
        else:
            nk = 0
            w, code, val, job = _NO_FLOAT, _NO_INT, _NO_FLOAT, _NO_INT
        if nk < len(keys):  # the jobs that started since: appended
            new = costs[nk:]
            terms = [share_terms(c, banks) for c in new]
            sizes = [t[0].size for t in terms]
            w = np.concatenate([w, np.array([c.alone if c.alone is not None
                                             else alone_rate(c, caps) for c in new],
                                            dtype=np.float64)])
            code = np.concatenate([code] + [t[0] for t in terms]).astype(np.int64, copy=False)
            val = np.concatenate([val] + [t[1] for t in terms]).astype(np.float64, copy=False)
            job = np.concatenate([job, np.repeat(np.arange(nk, len(keys)), sizes)])
        self.keys = list(keys)
        self.w, self.code, self.val, self.job = w, code, val, job
        return w, code, val, job

    def share(self, keys: list, costs: list, caps: dict, banks: int,
              causes: list[str] | None = None) -> np.ndarray:
        """``share(costs, caps, banks, causes)`` on the packed entries."""
        w, code, val, job = self.arrays(keys, costs, caps, banks)
        return share_entries(w, code, val, job, caps, causes)

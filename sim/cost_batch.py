"""The derived fields of many block costs at once: a timed run builds every instruction's cost
before it starts (``Engine._derive_costs``) and derives, with a few numpy calls over all of
them, what each cost's first streaming block and ``share`` would derive one cost at a time
(~50 us of small numpy calls per cost, ~0.4 CPU-s of a first ResNet-18 224 timing run):

* ``alone`` (:func:`~m100.sim.timing.alone_rate`): ``r = 1.0 / cycles`` (inf without cycles),
  then ``min(r, 1.0 / max(bank demands))`` when that maximum is > 0;
* ``nzb`` / ``terms`` (:func:`~m100.sim.timing.bank_terms`, ``_terms``): the nonzero bank
  demands, column codes ``tpb * banks + bank`` ascending;
* ``cols`` / ``use`` / ``crit`` (``Fluid._add_use``): those columns, the demands times the
  alone rate, and whether some column's ``capacity / use < 1.0`` (``use > 1e-12``).

Only costs with demands on one TPB's banks and no links (TCU, CVU, local DTDU copies and fills)
are taken: for them every one of these is an elementwise IEEE operation on the same operands
here as there (divisions, products, comparisons; maxima and minima pick one of the values), so
the bits are the same. Any other cost (links, several TPBs) keeps its own path.
``BATCH = False`` derives one cost at a time as before (``test_cost_batch`` compares the
fields, and whole runs bit for bit).
"""

from __future__ import annotations

import numpy as np

from .timing import _CODES, Cost

#: Derive the single-TPB costs of a timed run in one batch (False: one cost at a time).
BATCH = True


def derive_batch(costs: list[Cost], col_cap: np.ndarray, token: int, banks: int) -> int:
    """Fill the derived fields of every cost of ``costs`` with demands on one TPB's banks and no
    links that has none yet; ``col_cap``: the engine's column capacities, ``token``: its column
    registry's. Returns how many were derived."""
    todo = [c for c in costs if c.alone is None and c.nzb is None and c.terms is None
            and c.cols is None and not c.links and len(c.banks) == 1]
    if not todo:
        return 0
    n = len(todo)
    tpb = np.fromiter((next(iter(c.banks)) for c in todo), dtype=np.int64, count=n)
    X = np.stack([np.asarray(next(iter(c.banks.values())), dtype=np.float64) for c in todo])
    if X.shape[1] != banks:
        raise AssertionError(f"cost batch: a bank histogram of {X.shape[1]} banks, not {banks}")
    cyc = np.fromiter((c.cycles for c in todo), dtype=np.float64, count=n)
    with np.errstate(divide="ignore"):
        r = np.where(cyc > 0, 1.0 / np.where(cyc > 0, cyc, 1.0), np.inf)
        mx = X.max(axis=1)
        r = np.where(mx > 0, np.minimum(r, 1.0 / np.where(mx > 0, mx, 1.0)), r)
    rows, bank = X.nonzero()  # by cost, banks ascending
    vals = X[rows, bank]
    codes = tpb[rows] * banks + bank
    use = r[rows] * vals
    cap = col_cap[codes]
    inc = np.divide(cap, use, out=np.full(cap.shape, np.inf), where=use > 1e-12)
    crit = np.bincount(rows[inc < 1.0], minlength=n) > 0
    ends = np.cumsum(np.bincount(rows, minlength=n)).tolist()
    alone = r.tolist()
    crit_l = crit.tolist()
    tpb_l = tpb.tolist()
    s = 0
    for i, c in enumerate(todo):
        e = ends[i]
        cd, v = codes[s:e], vals[s:e]
        c.alone = alone[i]
        c.nzb = [(tpb_l[i], cd, v)]
        c.terms = (cd, v, _CODES)
        if alone[i] == np.inf:  # no streaming work: no demand (as Fluid._add_use)
            c.cols, c.use, c.crit = np.zeros(0, dtype=np.int64), np.zeros(0), False
        else:
            c.cols, c.use, c.crit = cd, use[s:e], crit_l[i]
        c.cols_of = token
        c.colmap = None
        s = e
    return n

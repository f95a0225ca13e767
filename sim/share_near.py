"""Max-min fair rates from the columns that can bind only (the engine's ``Fluid._rates``).

:func:`~m100.sim.timing.share` works on every nonzero demand of the streaming jobs (ResNet-18
224: ~2 300 entries over ~2 300 columns per call, ~50 jobs) to find the few columns whose
first-step demand is near their capacity (``use > (1 - 1e-6) * cap``: ~4 per call, ~11 entries
of ~10 jobs); its steps then run on those alone (see its docstring: no other column ever binds
or saturates). The engine already keeps, per column, the running sum of the streaming jobs'
demands at their alone rates (``Engine.col_use``, the same products ``w[j] * D[j, c]``, summed in
another order and carried across job changes). That sum is within ~1e-11 of the capacity of the
job-order sum (at most ~100 terms each at most the capacity, at most 4096 updates between two
recomputations, ``Fluid._resum``), so every near column is among the *candidates* whose running
sum exceeds ``(1 - 2e-6) * cap`` -- a margin of 1e-6 of the capacity, five orders of magnitude
above the drift. :func:`near_rates` sums the candidates' demands exactly (job order, from 0.0:
the IEEE additions of ``share``'s ``bincount``), keeps the near ones and runs ``share``'s steps
on their entries with Python floats: the same IEEE products, quotients, sums and comparisons,
element by element, as ``share``'s numpy arrays, so the same rates and causes bit for bit
(``fluid.NEAR = False`` calls ``share`` on every entry; the tests compare whole runs both ways
and this function against ``share`` on random job sets).
"""

from __future__ import annotations

import math

import numpy as np

from .timing import _NEAR

_INF = math.inf
_MIN, _MAX = np.minimum.reduce, np.maximum.reduce


def near_rates(maps: list[dict], w: np.ndarray, cands: list[int], caps: list[float],
               nbank: int, keys: list, causes: list[str]) -> np.ndarray:
    """``share``'s rates of the jobs whose demands at their alone rates are ``maps`` (per job,
    in job order: ``{column: w[j] * D[j, column]}`` of its nonzero demands; a bank column is
    ``< nbank``, a link column ``c``'s key is ``keys[c]``) and alone rates ``w``, given
    ``cands``: columns (ascending) among which are all whose job-order demand sum exceeds
    ``(1 - 1e-6)`` of their capacity ``caps[c]``. ``causes`` gets ``share``'s causes (one per
    job: "" or the kind of the first saturated column in ``share``'s column order -- banks
    before links, links by name)."""
    cset = set(cands)
    # the candidates' entries in job order: (job, column, demand) (a job with no streaming
    # work, w = inf, has none in share: near_rates_entries drops them)
    ej, ec, ep = [], [], []
    for j, m in enumerate(maps):
        if m.keys().isdisjoint(cset):
            continue
        for c in cands:
            v = m.get(c)
            if v is not None:
                ej.append(j)
                ec.append(c)
                ep.append(v)
    return near_rates_entries(ej, ec, ep, w, cands, caps, nbank, keys, causes)


def near_rates_entries(ej: list[int], ec: list[int], ep: list[float], w: np.ndarray,
                       cands: list[int], caps: list[float], nbank: int, keys: list,
                       causes: list[str]) -> np.ndarray:
    """:func:`near_rates` given the candidates' entries instead of the maps: job ``ej[i]``'s
    demand ``ep[i]`` on column ``ec[i]``, in job order (within a job in any order: only each
    column's job-order sums and the jobs' sets of saturated columns are read) -- what
    :func:`near_rates` reads of the maps (the engine finds them without a map per job,
    ``Fluid._cand_entries``)."""
    n = w.size
    causes[:] = [""] * n
    # (share tests a demand's sign, this function its product with w: equal for w > 0)
    if n and float(_MIN(w)) > 0.0 and float(_MAX(w)) < _INF:  # (a NaN fails both)
        finite, fin_all = None, True
    else:
        finite = np.isfinite(w)
        fin_all = bool(finite.all())
        if n and not float(np.minimum.reduce(w[finite], initial=_INF)) > 0.0:
            raise ValueError("near_rates: an alone rate <= 0")
        keep = [i for i, j in enumerate(ej) if finite[j]]
        if len(keep) < len(ej):  # (a job with no streaming work has no entry in share)
            ej, ec, ep = [ej[i] for i in keep], [ec[i] for i in keep], [ep[i] for i in keep]
    return _near(ej, ec, ep, w, n, finite, fin_all, cands, caps, nbank, keys, causes)


def _near(ej, ec, ep, w, n, finite, fin_all, cands, caps, nbank, keys, causes) -> np.ndarray:
    # the job-order sums from 0.0 (share's bincount) of the candidates; the near ones
    tot: dict[int, float] = {}
    for c, p in zip(ec, ep):
        tot[c] = tot.get(c, 0.0) + p
    f = 1.0 - _NEAR
    near = {}
    for c in cands:
        s = tot.get(c)
        if s is not None and s > caps[c] * f:
            near[c] = len(near)
    if not near:  # the first step is 1: every job at its alone rate
        return w.copy() if fin_all else np.where(finite, w, np.inf)
    # the near columns' entries (share's ecol / ejob / eprod), in job order
    ek, ejn, epn = [], [], []
    for j, c, p in zip(ej, ec, ep):
        k = near.get(c)
        if k is not None:
            ek.append(k)
            ejn.append(j)
            epn.append(p)
    cols = list(near)
    cc = [caps[c] for c in cols]
    use = [tot[c] for c in cols]
    rem = list(cc)
    nk = len(cols)
    lam = 0.0
    frozen: dict[int, float] = {}  # job -> its lam when it froze
    n_fin = n if fin_all else int(np.count_nonzero(finite))
    while True:
        m = _INF
        for r, u in zip(rem, use):
            if u > 1e-12:
                x = r / u
                if x < m:
                    m = x
        d = min(m, 1.0 - lam)
        lam += d
        rem = [r - d * u for r, u in zip(rem, use)]
        if lam >= 1.0 - 1e-12:  # every active job reached its alone rate
            break
        sat = [r <= 1e-9 * c for r, c in zip(rem, cc)]
        if any(sat):
            hit: dict[int, list[int]] = {}  # a newly frozen job -> its saturated columns
            for j, k, p in zip(ejn, ek, epn):
                if sat[k] and p > 0 and j not in frozen:
                    hit.setdefault(j, []).append(k)
            for j, ks in hit.items():
                frozen[j] = lam
                causes[j] = _cause(cols[ks[0]] if len(ks) == 1 else [cols[k] for k in ks],
                                   nbank, keys)
        if len(frozen) >= n_fin:  # (every finite job frozen)
            break
        rem = [max(r, 0.0) for r in rem]
        use = [0.0] * nk
        for j, k, p in zip(ejn, ek, epn):
            if j not in frozen:
                use[k] += p
    rates = w * lam  # (the jobs still active: lam * w)
    for j, lj in frozen.items():
        rates[j] = lj * float(w[j])
    if not fin_all:
        rates[~finite] = np.inf
    return rates


def _cause(cols, nbank: int, keys: list) -> str:
    """The kind of a job's first saturated column (``cols``: one column or a list) in
    ``share``'s order: a bank's before any link's, links by their name (``str`` of the key)."""
    if not isinstance(cols, list):
        return "hbsm_bank" if cols < nbank else _name(keys[cols])[1]
    if min(cols) < nbank:
        return "hbsm_bank"
    return min(_name(keys[c]) for c in cols)[1]


_NAMES: dict[tuple, tuple[str, str]] = {}  # a link key -> (its name, its kind)


def _name(key: tuple) -> tuple[str, str]:
    got = _NAMES.get(key)
    if got is None:
        got = _NAMES[key] = (str(key), str(key[0]))
    return got

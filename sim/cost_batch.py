"""The derived fields of many block costs at once: a timed run builds every instruction's cost
before it starts (``Engine._derive_costs``) and derives, with a few numpy calls over all of
them, what each cost's first streaming block and ``share`` would derive one cost at a time
(~50 us of small numpy calls per cost, ~0.4 CPU-s of a first ResNet-18 224 timing run):

* ``alone`` (:func:`~m100.sim.timing.alone_rate`): the minimum of ``1.0 / cycles`` (when > 0),
  ``1.0 / max`` of each bank histogram (when > 0) and ``capacity / bytes`` of each link (bytes
  > 0); inf when there is none;
* ``cols`` / ``use`` / ``crit`` (``Fluid._add_use``): those columns in the cost's TPB order,
  then the engine columns of its nonzero links in its order; the demands times the alone rate
  (none without streaming work); whether some column's ``capacity / use < 1.0`` (``use >
  1e-12``).

``nzb`` and ``terms`` are left for their own functions to compute on demand (``bank_terms`` /
``timing._terms``, the one-cost-at-a-time definitions): only ``share`` on every entry reads them
(``fluid.NEAR`` False, a cost of another registry), never the engine's default path, and
building them here was ~1/5 of the batch (an argsort of every entry: 1.2 M on ResNet-50).

Every value is the same elementwise IEEE operation on the same operands here as there
(divisions, products, comparisons; a minimum or maximum picks one of the values, in any order),
so the bits are the same; only the order in which links get their (arbitrary) column numbers
and codes can differ, which changes no result
(``test_column_registry_order_does_not_change_a_run``).
``BATCH = False`` derives one cost at a time as before (``test_cost_batch`` compares the
fields, and whole runs bit for bit).
"""

from __future__ import annotations

import numpy as np

from .timing import Cost

#: Derive the costs of a timed run in one batch (False: one cost at a time, at its first block).
BATCH = True


def derive_batch(costs: list[Cost], cap, col, col_cap, token: int, banks: int) -> int:
    """Fill the derived fields (module docstring) of every cost of ``costs`` that has none
    yet. ``cap(key)``: a link's capacity; ``col(key)``: its engine column (registering it);
    ``col_cap()``: the engine's column capacities after that; ``token``: its column
    registry's; ``banks``: HBSM banks per TPB. Returns how many were derived."""
    todo, moved, seen = [], [], set()
    remote = False
    for c in costs:
        if c.alone is None and c.nzb is None and c.terms is None and c.cols is None \
                and id(c) not in seen:  # (a cost shared by geometry is listed again)
            seen.add(id(c))
            if c.moved is None:
                todo.append(c)
            else:
                moved.append(c)
                remote = remote or c.links
    if remote:  # links get their columns in cost order, as when every cost is built
        done = set()  # (a link's column is registered at its first occurrence; later calls
        for c in costs:  # return it: only the first is made)
            if c.links:
                for k, v in c.links.items():
                    if v != 0 and k not in done:
                        done.add(k)
                        col(k)
    for c in moved:  # the base's fields moved (timing.moved): the same values (below)
        b = c.moved[0]
        if id(b) not in seen and (b.cols_of != token or b.cols is None or b.alone is None):
            todo.append(c)  # (its base is not derived and will not be: derived as any cost)
    n = _derive(todo, cap, col, col_cap, token, banks)
    k = 0
    split: dict = {}  # a remote base's column parts (_remote_parts), by id
    for c in moved:
        if c.alone is not None:  # (derived above)
            continue
        b, shift = c.moved
        # a one-TPB cost: its engine columns are its bank columns ``tpb * banks + bank``,
        # each of capacity 1.0 like its base's, so its alone rate, demands and crit are its
        # base's and its columns its base's moved by the TPBs' difference
        c.alone, c.use, c.crit = b.alone, b.use, b.crit
        if shift.__class__ is int:
            c.cols = b.cols + shift
        else:  # a remote copy (timing.moved_remote): its first TPB's bank columns, then its
            # second's, then its mesh link's, each moved (the link of the same capacity)
            t0, t1, t, u = shift
            parts = split.get(id(b))
            if parts is None:
                parts = split[id(b)] = _remote_parts(b.cols, t0, t1, col(("mesh", t0, t1)),
                                                     banks)
            if parts is not False:  # (its columns in that order: moved part by part)
                c.cols = np.concatenate((parts[0] + (t - t0) * banks,
                                         parts[1] + (u - t1) * banks, [col(("mesh", t, u))]))
            else:
                c.cols = moved_remote_cols(b.cols, t0, t1, t, u, col, banks)
        c.cols_of = token
        c.neg_use = None
        k += 1
    return n + k


def moved_remote_cols(bc: np.ndarray, t0: int, t1: int, t: int, u: int, col,
                      banks: int) -> np.ndarray:
    """The engine columns ``bc`` of a remote copy from TPB ``t0`` to ``t1`` as a copy from ``t``
    to ``u``: each bank column of ``t0`` moved by ``(t - t0) * banks``, of ``t1`` by ``(u - t1) *
    banks``, the mesh link's column ``t0 -> t1`` replaced by ``t -> u``'s (the definition)."""
    tb = bc // banks
    out = np.where(tb == t0, bc + (t - t0) * banks, np.where(
        tb == t1, bc + (u - t1) * banks,
        np.where(bc == col(("mesh", t0, t1)), col(("mesh", t, u)), -1)))
    if out.size and out.min() < 0:  # pragma: no cover - defensive
        raise AssertionError("cost batch: a moved remote copy's column not found")
    return out


def _remote_parts(bc: np.ndarray, t0: int, t1: int, mesh: int, banks: int):
    """A remote copy's engine columns ``bc`` as (its bank columns of TPB ``t0``, of ``t1``) when
    they are those, then those, then its mesh link's column ``mesh`` -- the order ``_derive``
    gives them (the cost's TPB order, then its links) -- so that moving each part
    (:func:`moved_remote_cols`' values, position by position) is two additions and a
    concatenation; else False (the definition then)."""
    if bc.size < 1 or int(bc[-1]) != mesh:
        return False
    tb = bc[:-1] // banks
    n0 = int(np.count_nonzero(tb == t0))
    if not ((tb[:n0] == t0).all() and (tb[n0:] == t1).all()):
        return False
    return bc[:n0], bc[n0:-1]


def _derive(todo: list[Cost], cap, col, col_cap, token: int, banks: int) -> int:
    if not todo:
        return 0
    n = len(todo)
    owner, tpbs, hists = [], [], []
    l_own, l_col, l_val, l_cap = [], [], [], []
    for i, c in enumerate(todo):
        for t, acc in c.banks.items():  # (the cost's order)
            owner.append(i)
            tpbs.append(t)
            hists.append(acc)
        if c.links:
            for k, v in c.links.items():
                if v != 0:
                    l_own.append(i)
                    l_col.append(col(k))
                    l_val.append(v)
                    l_cap.append(cap(k))
    cyc = np.fromiter((c.cycles for c in todo), dtype=np.float64, count=n)
    r = np.full(n, np.inf)
    pos = cyc > 0
    r[pos] = 1.0 / cyc[pos]
    nb = len(hists)
    if nb:
        X = np.stack(hists).astype(np.float64, copy=False)  # (np.asarray of each, stacked)
        if X.ndim != 2 or X.shape[1] != banks:
            raise AssertionError(f"cost batch: a histogram of {X.shape[1:]} banks, not {banks}")
        own = np.array(owner, dtype=np.int64)
        mx = X.max(axis=1)
        pos = mx > 0
        np.minimum.at(r, own[pos], 1.0 / mx[pos])
        # the nonzero entries by (cost, its TPB order), banks ascending: X.nonzero()'s row-major
        # order, found on the flat array (a 1-D gather instead of a 2-D one)
        flat = X.ravel()
        nz = flat.nonzero()[0]
        b_val = flat[nz]
        rows = nz // banks
        b_code = (np.array(tpbs, dtype=np.int64) * banks)[rows] + (nz - rows * banks)
        b_own = own[rows]
    else:
        b_val = np.zeros(0)
        b_code = b_own = np.zeros(0, dtype=np.int64)
    lv = np.array(l_val, dtype=np.float64)
    lo = np.array(l_own, dtype=np.int64)
    if lv.size:  # links with bytes > 0 bound the alone rate
        pos = lv > 0
        np.minimum.at(r, lo[pos], np.array(l_cap, dtype=np.float64)[pos] / lv[pos])
    alone = r.tolist()
    # engine columns: per cost its bank entries (its TPB order, banks ascending), then links.
    # The bank entries are in that order by cost already (row-major, rows in cost order) and so
    # are the links (in cost order, each cost's in its order): a stable sort by cost of [banks,
    # links] is that order -- the order of a lexsort by (cost, bank before link, rank) -- and
    # merges two sorted runs (timsort: linear), without the keys' arrays
    e_own = np.concatenate([b_own, lo])
    o = np.argsort(e_own, kind="stable")
    e_own = e_own[o]
    e_col = np.concatenate([b_code, np.array(l_col, dtype=np.int64)])[o]
    e_val = np.concatenate([b_val, lv])[o]
    fin = np.isfinite(r)[e_own]  # a cost with no streaming work has no demand
    if not fin.all():  # (else the same arrays: no copies)
        e_own, e_col, e_val = e_own[fin], e_col[fin], e_val[fin]
    e_use = r[e_own] * e_val
    cp = col_cap()[e_col]
    inc = np.divide(cp, e_use, out=np.full(cp.shape, np.inf), where=e_use > 1e-12)
    crit = (np.bincount(e_own[inc < 1.0], minlength=n) > 0).tolist()
    e_end = np.cumsum(np.bincount(e_own, minlength=n)).tolist()
    es = 0
    for c, a, e, k in zip(todo, alone, e_end, crit):
        c.alone = a
        c.cols, c.use, c.crit = e_col[es:e], e_use[es:e], k
        es = e
        c.cols_of = token
        c.neg_use = None
    return n

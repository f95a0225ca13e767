"""Row-bucket indexes of piece lists: which pieces of a producer may meet a range of rows.

The emitter (``emit_units.UnitEmitter.act_in`` / ``kept_chunk``) looks, for every consumer piece,
for the producer pieces that hold part of its input rows. A scan of the producer's whole piece
list per consumer piece grows with rows x rows (the 1024-token LLaMA prefill layer's kept q / k /
v and attention pieces, session 28); the builder answers the same question from a row-bucket
index (``build_transfers.Transfers._pieces_over``), and so does :func:`rows_over` here.
"""

from __future__ import annotations


def new_index(src: list) -> list:
    """An empty index of ``src`` (non-empty): ``[pieces indexed, bucket width, buckets]``;
    buckets are the first piece's row count wide."""
    return [0, max(1, src[0].r1 - src[0].r0), {}]


def grow(ix: list, src: list) -> None:
    """Extend index ``ix`` of ``src`` with the pieces appended since its last use."""
    w, buckets = ix[1], ix[2]
    for i in range(ix[0], len(src)):
        q = src[i]
        for bk in range(q.r0 // w, max(q.r0, q.r1 - 1) // w + 1):
            buckets.setdefault(bk, []).append(i)
    ix[0] = len(src)


def over(ix: list, src: list, a0: int, a1: int) -> list:
    """The pieces of ``src`` in the buckets of rows [a0, a1), in ``src``'s order."""
    w, buckets = ix[1], ix[2]
    found: set[int] = set()
    for bk in range(a0 // w, max(a0, a1 - 1) // w + 1):
        found.update(buckets.get(bk, ()))
    return [src[i] for i in sorted(found)]


def rows_over(table: dict[int, list], src: list, a0: int, a1: int) -> list:
    """The pieces of ``src`` (a list of pieces with rows ``[r0, r1)``, only ever appended to)
    that may meet rows [a0, a1), in ``src``'s order: a superset of those that do (the caller
    tests the exact overlap), so that filtering the answer gives what filtering ``src`` gives.
    ``table``: the indexes kept so far, per ``id(src)`` (the entry holds the list, so an id is
    not reused while it lives); each is extended with the pieces appended since its last use."""
    if not src:
        return []
    ix = table.get(id(src))
    if ix is None or ix[3] is not src:
        ix = table[id(src)] = new_index(src) + [src]
    if ix[0] < len(src):
        grow(ix, src)
    return over(ix, src, a0, a1)


__all__ = ["grow", "new_index", "over", "rows_over"]

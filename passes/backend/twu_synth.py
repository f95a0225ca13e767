"""Tensor Walker synthesis: an affine loop-nest access -> TWU levels (behind ``twu-materialize``).

An operand access is a loop nest ``counts`` (outermost first) over which the element offset is

    offset(i) = base + sum_l coeff[l] * i[l]  (+ (i[s] mod slots) * slot_stride  for a slot loop s)

in elements of the operand's buffer (the composition of the tile loops, the op's indexing map and the
buffer's row-major layout: ``coeff[l] = sum_d map[d][l] * stride[d]``). The TWU walks levels of
(Initial, Step, Final), outermost first, the address being the sum of every level's value; a level
with step 0 repeats (model extension for broadcasts). Synthesis:

1. a slot loop (double/multi buffering) whose count is a multiple of ``slots`` becomes two levels:
   an outer repeat level ``count / slots`` (step 0) and an inner level of ``slots`` values whose step
   is the slot offset -- the paper's "outer level whose Step is the buffer offset";
2. loops of count 1 vanish (their index is always 0);
3. adjacent loops fold when the outer stride equals inner stride x inner count (contiguous dims),
   and two adjacent repeat levels fold into one;
4. if more levels remain than the machine's budget (``twu_max_levels``), the outermost loop is
   peeled: the instruction splits into one piece per outer index (recursively), each piece with
   the remaining levels and its own constant offset. A slot loop whose count is not a multiple of
   its slots is peeled the same way.

:func:`synthesize` works on several operands that share one iteration space (the operands of one
instruction), so a split cuts every operand at the same iteration boundary. The property test in
``test/unit/schedule/test_twu_synth.py`` checks, for random accesses, that the pieces' walks
enumerate exactly the loop nest's offsets, element for element.
"""

from __future__ import annotations

from dataclasses import dataclass

from m100.targets.m100.isa import Level


@dataclass(frozen=True)
class Access:
    """One operand's affine access over a shared loop nest (offsets in elements)."""
    coeffs: tuple[int, ...]
    base: int = 0
    slot_loop: int = -1  # index of the loop whose position selects the slot (-1: none)
    slots: int = 1
    slot_stride: int = 0

    def offset(self, idx: tuple[int, ...]) -> int:
        """Reference semantics (used by tests' independent enumeration)."""
        o = self.base + sum(c * i for c, i in zip(self.coeffs, idx))
        if self.slot_loop >= 0:
            o += (idx[self.slot_loop] % self.slots) * self.slot_stride
        return o


@dataclass(frozen=True)
class Piece:
    """One instruction after splitting: the outer indices it covers and one level list per operand."""
    outer: tuple[int, ...]  # values of the peeled outer loops
    levels: tuple[tuple[Level, ...], ...]

    @property
    def count(self) -> int:
        n = 1
        for lv in self.levels[0]:
            n *= lv.count
        return n


class TwuError(ValueError):
    pass


def _expand_slots(counts: list[int], acc: Access) -> tuple[list[int], list[int], list[int], int] | None:
    """(counts, coeffs, map of new loop -> original loop, base) with the slot loop expanded into
    (repeat, slot) levels; None when the slot loop's count is not a multiple of the slots."""
    coeffs = list(acc.coeffs)
    if acc.slot_loop < 0 or acc.slots <= 1:
        return counts, coeffs, list(range(len(counts))), acc.base
    s = acc.slot_loop
    n = counts[s]
    if n % acc.slots:
        return None
    # i = hi * slots + lo: linear part c*i = c*slots*hi + c*lo; slot part = lo * slot_stride
    c = coeffs[s]
    new_counts = counts[:s] + [n // acc.slots, acc.slots] + counts[s + 1:]
    new_coeffs = coeffs[:s] + [c * acc.slots, c + acc.slot_stride] + coeffs[s + 1:]
    origin = list(range(s)) + [s, s] + list(range(s + 1, len(counts)))
    return new_counts, new_coeffs, origin, acc.base


def fold_levels(counts: list[int], coeffs: list[int], base: int) -> tuple[Level, ...]:
    """Levels for a loop nest of one operand: drop count-1 loops, fold contiguous/repeat loops."""
    loops = [(n, c) for n, c in zip(counts, coeffs) if n > 1]
    folded: list[tuple[int, int]] = []
    for n, c in loops:
        if folded:
            on, oc = folded[-1]
            if (c == 0 and oc == 0) or (c != 0 and oc == c * n):
                folded[-1] = (on * n, c)
                continue
        folded.append((n, c))
    if not folded:
        return (Level(base, 1, base),)
    levels = []
    for k, (n, c) in enumerate(folded):
        init = base if k == 0 else 0
        if c == 0:
            levels.append(Level(init, 0, n))
        else:
            levels.append(Level(init, c, init + c * (n - 1)))
    return tuple(levels)


def _try_levels(counts: list[int], accs: list[Access]) -> list[tuple[Level, ...]] | None:
    out = []
    for a in accs:
        ex = _expand_slots(counts, a)
        if ex is None:
            return None
        c, co, _, base = ex
        out.append(fold_levels(c, co, base))
    return out


def synthesize(counts: list[int] | tuple[int, ...], accs: list[Access], max_levels: int,
               _outer: tuple[int, ...] = ()) -> list[Piece]:
    """Pieces (instructions) whose walks enumerate ``accs`` over ``counts`` in row-major order."""
    counts = list(counts)
    if any(n < 1 for n in counts):
        raise TwuError(f"loop counts must be >= 1, got {counts}")
    levels = _try_levels(counts, accs)
    if levels is not None and all(len(lv) <= max_levels for lv in levels):
        return [Piece(_outer, tuple(levels))]
    if not counts:
        raise TwuError("an access with no loops can not exceed the level budget")
    # peel the outermost loop: one piece per index, constant folded into the base
    pieces: list[Piece] = []
    n0 = counts[0]
    for i in range(n0):
        sub = []
        for a in accs:
            o = a.base + a.coeffs[0] * i
            if a.slot_loop == 0:
                o += (i % a.slots) * a.slot_stride
                sub.append(Access(a.coeffs[1:], o))
            elif a.slot_loop > 0:
                sub.append(Access(a.coeffs[1:], o, a.slot_loop - 1, a.slots, a.slot_stride))
            else:
                sub.append(Access(a.coeffs[1:], o))
        pieces += synthesize(counts[1:], sub, max_levels, _outer + (i,))
    return pieces


def walk_offsets(levels: tuple[Level, ...]):
    """Element offsets of a level list (same semantics as ``isa.Walk.offsets``)."""
    from m100.targets.m100.isa import DType, Space, Walk
    return Walk(Space.HBSM, 0, 0, DType.I8, tuple(levels)).offsets()


def access_from_map(counts: list[int], map_rows: list[tuple[int, ...]], map_consts: list[int],
                    buffer_shape: tuple[int, ...], base: int = 0) -> Access:
    """Compose an affine indexing map (one row of loop coefficients + constant per buffer dim) with
    the buffer's row-major layout into a flat :class:`Access`."""
    strides = []
    s = 1
    for d in reversed(buffer_shape):
        strides.append(s)
        s *= d
    strides = strides[::-1]
    coeffs = [0] * len(counts)
    const = base
    for row, c0, st in zip(map_rows, map_consts, strides):
        const += c0 * st
        for l, a in enumerate(row):
            coeffs[l] += a * st
    return Access(tuple(coeffs), const)


__all__ = ["Access", "Piece", "TwuError", "synthesize", "fold_levels", "access_from_map",
           "walk_offsets"]

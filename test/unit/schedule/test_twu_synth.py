"""TWU synthesis: the pieces' walks enumerate exactly the original loop nest (property test)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from m100.passes.backend.twu_synth import (Access, TwuError, access_from_map, fold_levels,
                                           synthesize)
from m100.targets.m100.isa import DType, Space, Walk
from m100.targets.m100.machine import get_machine


def enumerate_nest(counts, acc):
    """Independent oracle: visit the loop nest row-major and compute each offset directly."""
    out = []
    for idx in itertools.product(*[range(n) for n in counts]):
        o = acc.base
        for c, i in zip(acc.coeffs, idx):
            o += c * i
        if acc.slot_loop >= 0:
            o += (idx[acc.slot_loop] % acc.slots) * acc.slot_stride
        out.append(o)
    return out


def pieces_offsets(pieces, k):
    seq = []
    for p in pieces:
        seq.extend(Walk(Space.HBSM, 0, 0, DType.F32, p.levels[k]).offsets().tolist())
    return seq


@st.composite
def nests(draw):
    depth = draw(st.integers(1, 7))
    counts = draw(st.lists(st.integers(1, 4), min_size=depth, max_size=depth))
    n_ops = draw(st.integers(1, 3))
    accs = []
    for _ in range(n_ops):
        kind = draw(st.sampled_from(["random", "contiguous", "transposed"]))
        if kind == "contiguous":  # row-major over the nest: must fold to one level
            coeffs, s = [], 1
            for n in reversed(counts):
                coeffs.append(s)
                s *= n
            coeffs = coeffs[::-1]
        elif kind == "transposed":
            coeffs, s = [0] * depth, 1
            for l in range(depth):
                coeffs[l] = s
                s *= counts[l]
        else:
            coeffs = draw(st.lists(st.integers(-6, 9), min_size=depth, max_size=depth))
        base = draw(st.integers(0, 200))
        if draw(st.booleans()):
            sl = draw(st.integers(0, depth - 1))
            slots = draw(st.integers(2, 3))
            ss = draw(st.integers(1, 300))
            accs.append(Access(tuple(coeffs), base, sl, slots, ss))
        else:
            accs.append(Access(tuple(coeffs), base))
    max_levels = draw(st.integers(1, 6))
    return counts, accs, max_levels


@settings(max_examples=300, deadline=None)
@given(nests())
def test_walks_enumerate_the_loop_nest(case):
    counts, accs, max_levels = case
    pieces = synthesize(counts, accs, max_levels)
    for k, acc in enumerate(accs):
        assert pieces_offsets(pieces, k) == enumerate_nest(counts, acc)
    for p in pieces:
        for lv in p.levels:
            assert len(lv) <= max_levels
            # every piece's operands walk the same number of beats (one instruction)
        assert len({int(np.prod([l.count for l in lv])) for lv in p.levels}) == 1


def test_contiguous_dims_fold_to_one_level():
    lv = fold_levels([4, 8, 16], [128, 16, 1], 10)
    assert len(lv) == 1 and lv[0].count == 512 and lv[0].initial == 10 and lv[0].step == 1


def test_double_buffering_is_an_outer_level_stepping_by_the_slot_offset():
    # 6 tiles of 64 contiguous elements into a 2-slot buffer whose slots are 100 elements apart
    pieces = synthesize([6, 64], [Access((0, 1), 0, 0, 2, 100)], 6)
    assert len(pieces) == 1
    levels = pieces[0].levels[0]
    assert [(l.initial, l.step, l.count) for l in levels] == [(0, 0, 3), (0, 100, 2), (0, 1, 64)]


def test_split_when_the_budget_is_too_small():
    counts, acc = [3, 5, 7], Access((100, 10, 2), 0)  # no dim folds: 3 levels
    pieces = synthesize(counts, [acc], 2)
    assert len(pieces) == 3 and all(len(p.levels[0]) == 2 for p in pieces)
    assert [p.outer for p in pieces] == [(0,), (1,), (2,)]
    assert pieces_offsets(pieces, 0) == enumerate_nest(counts, acc)


def test_access_from_map_composes_indexing_map_and_layout():
    # transpose read of a 32x64 buffer as a 64x32 iteration: buffer index (d1, d0)
    acc = access_from_map([64, 32], [(0, 1), (1, 0)], [0, 0], (32, 64), base=5)
    assert acc.coeffs == (1, 64) and acc.base == 5
    ref = [5 + d1 * 64 + d0 for d0 in range(64) for d1 in range(32)]
    pieces = synthesize([64, 32], [acc], get_machine("m100").twu_max_levels)
    assert pieces_offsets(pieces, 0) == ref


def test_bad_counts_rejected():
    with pytest.raises(TwuError):
        synthesize([0, 3], [Access((1, 1))], 6)

"""Walk address sequences against a beat-by-beat simulation of the TWU counters (the oracle).

The oracle implements the M100 semantics literally, with plain Python loops: every level holds a
Value counter starting at Initial; each beat emits the sum of all Values; the innermost level
advances every beat; a level that has reached Final wraps to Initial and carries into the level
outside it; the walk ends when the outermost level wraps. A Step-0 level is the model's repeat
level: it contributes Initial for ``final`` beats.
"""

import m100_isa_strategies as S
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m100.targets.m100.isa import DType, Level, Space, Walk
from m100.targets.m100.machine import get_machine

TINY = get_machine("tiny")


def twu_beats(levels):
    if not levels:
        return [0]
    n = len(levels)
    value = [lv.initial for lv in levels]
    repeats = [0] * n
    out = []
    while True:
        out.append(sum(value))
        i = n - 1
        while i >= 0:  # advance the innermost level, carry outwards on wrap
            lv = levels[i]
            if lv.step == 0:
                repeats[i] += 1
                if repeats[i] < lv.final:
                    break
                repeats[i] = 0
            else:
                if value[i] != lv.final:
                    value[i] += lv.step
                    break
                value[i] = lv.initial
            i -= 1
        if i < 0:
            return out


def nested_loops_2(l0, l1):
    """The same for two ordinary levels written as the textbook nested loop."""
    out = []
    a = l0.initial
    while True:
        b = l1.initial
        while True:
            out.append(a + b)
            if b == l1.final:
                break
            b += l1.step
        if a == l0.final:
            break
        a += l0.step
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(1, 96).flatmap(lambda n: S.walks(TINY, n)))
def test_offsets_match_twu_simulation(w):
    beats = twu_beats(w.levels)
    assert list(w.offsets()) == beats
    assert w.num_elements == len(beats)
    assert w.shape == tuple(lv.count for lv in w.levels)
    lo, hi = w.offset_range()
    assert (lo, hi) == (min(beats), max(beats))
    bits = w.dtype.bits
    addrs = [w.base + (o * bits) // 8 for o in beats]  # i4: the byte holding the nibble
    assert list(w.byte_addresses()) == addrs
    start, end = w.byte_range()
    assert start == min(addrs)
    assert end == max(a + max(1, bits // 8) for a in addrs)
    # kept on the walk: asked again it is the same, and the walk still equals a fresh copy
    assert w.byte_range() == (start, end)
    assert w == Walk(w.space, w.tpb, w.base, w.dtype, w.levels) and \
        hash(w) == hash(Walk(w.space, w.tpb, w.base, w.dtype, w.levels))


@given(st.integers(-5, 5), st.integers(-3, 3).filter(bool), st.integers(1, 5),
       st.integers(-5, 5), st.integers(-3, 3).filter(bool), st.integers(1, 5))
@settings(max_examples=200, deadline=None)
def test_two_level_textbook_loop(i0, s0, c0, i1, s1, c1):
    l0, l1 = Level(i0, s0, i0 + s0 * (c0 - 1)), Level(i1, s1, i1 + s1 * (c1 - 1))
    w = Walk(Space.HBSM, 0, 0, DType.I8, (l0, l1))
    assert list(w.offsets()) == nested_loops_2(l0, l1) == twu_beats((l0, l1))


def test_known_patterns():
    # a transpose of a row-major [2,3] tensor: columns outer
    w = Walk(Space.HBSM, 0, 0, DType.F32, (Level(0, 1, 2), Level(0, 3, 3)))
    assert list(w.offsets()) == [0, 3, 1, 4, 2, 5]
    # double buffering: an outer level whose step is the buffer offset
    w = Walk(Space.HBSM, 0, 0, DType.I8, (Level(0, 100, 100), Level(0, 1, 2)))
    assert list(w.offsets()) == [0, 1, 2, 100, 101, 102]
    # a repeat level (broadcast) and a count-1 level
    w = Walk(Space.HBSM, 0, 0, DType.I8, (Level(0, 0, 3), Level(7, 1, 7), Level(0, 1, 1)))
    assert list(w.offsets()) == [7, 8, 7, 8, 7, 8]
    # a descending level
    w = Walk(Space.HBSM, 0, 0, DType.I8, (Level(4, -2, 0),))
    assert list(w.offsets()) == [4, 2, 0]
    # packed i4: two elements per byte
    w = Walk(Space.HBSM, 0, 10, DType.I4, (Level(0, 1, 4),))
    assert list(w.byte_addresses()) == [10, 10, 11, 11, 12]


def _answer(w, machine):
    """``w.check(machine)``'s message (None: valid)."""
    from m100.errors import M100Error
    try:
        w.check(machine)
    except M100Error as e:
        return f"{type(e).__name__}: {e}"
    return None


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_moved_walk_checks(data):
    """``Walk.moved`` shares the facts of the levels alone (offset range; the machine whose level
    checks they passed) among walks moved from one another. Oracle: a fresh ``Walk`` with the same
    fields (no shared facts). On three machines (tiny, a roomy one, one with narrow TWU registers
    and two levels, where valid levels elsewhere fail) in a random order, each moved walk -- valid
    and invalid TPBs and bases -- is equal to the fresh one, has its offset and byte ranges, and
    ``check`` gives the same answer; a holder that forgets which machine passed (a mutant keeping
    a bool) accepts the narrow machine's bad levels."""
    roomy = TINY.with_overrides(name="roomy", hbsm_bytes=2**21, twu_max_levels=8)
    narrow = TINY.with_overrides(name="narrow", twu_field_bits=8, twu_max_levels=2)
    space = data.draw(st.sampled_from(list(Space)))
    w = data.draw(S.walks(roomy, data.draw(st.integers(1, 64)), space=space))
    machines = data.draw(st.permutations([TINY, roomy, narrow]))
    src = w
    for _ in range(4):
        tpb = data.draw(st.integers(0, TINY.num_tpbs + 1)) if space is Space.HBSM else \
            data.draw(st.sampled_from([0, 0, 1]))
        base = data.draw(st.sampled_from([0, 1, 64, TINY.hbsm_bytes - 1, 2**21 + 5,
                                          data.draw(st.integers(0, 1 << 16))]))
        moved = src.moved(tpb, base)
        fresh = Walk(w.space, tpb, base, w.dtype, w.levels)
        assert moved == fresh and moved.levels is w.levels
        assert moved.offset_range() == fresh.offset_range()
        assert moved.byte_range() == fresh.byte_range()
        for m in machines:
            assert _answer(moved, m) == _answer(fresh, m), (m.name, tpb, base)
        src = data.draw(st.sampled_from([w, moved]))
    for m in machines:
        assert _answer(w, m) == _answer(Walk(w.space, w.tpb, w.base, w.dtype, w.levels), m)


def test_moved_walk_checks_its_levels_on_each_machine():
    """The case the random test may not draw: levels valid on one machine and not on another,
    checked on the first through one walk, then on the second through another moved walk."""
    narrow = TINY.with_overrides(name="narrow", twu_field_bits=8)
    w = Walk(Space.DDR, 0, 0, DType.I8, (Level(0, 200, 400),))
    assert _answer(w.moved(0, 8), TINY) is None  # (the shared holder: passed on tiny)
    assert _answer(w, TINY) is None
    assert "does not fit the TWU's 8-bit registers" in _answer(w.moved(0, 16), narrow)
    assert "does not fit the TWU's 8-bit registers" in _answer(w, narrow)
    assert _answer(w.moved(0, 32), TINY) is None

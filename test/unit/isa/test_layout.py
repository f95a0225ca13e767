"""Encoded sizes against the width formulas of docs/isa.md, re-derived here from the Machine."""

import m100_isa_strategies as S
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m100.targets.m100 import encoding as E
from m100.targets.m100 import encoding_fields as F
from m100.targets.m100 import encoding_write as W
from m100.targets.m100.isa import (DType, Dma, Fill, Level, Monitor, Space, Sync, Trigger, Update,
                                   Walk)
from m100.targets.m100.machine import get_machine


def _bits(x):
    return max(1, x.bit_length())


def _uv(x):  # varint: 7-bit length + minimal value bits
    return 7 + x.bit_length()


def _walk_bits(m, w):
    size = {Space.DDR: m.ddr_bytes, Space.SRAM: m.ccb_sram_bytes, Space.HBSM: m.hbsm_bytes}[w.space]
    tpb = _bits(m.num_tpbs - 1) if w.space is Space.HBSM else 0
    return (2 + tpb + _bits(size - 1) + 4 + m.twu_max_levels.bit_length()
            + 3 * m.twu_field_bits * len(w.levels))


def _sync_bits(m, s):
    mon = _bits(m.num_tpbs - 1) + _bits(m.su_counters - 1) + 2 * m.su_counter_bits
    upd = _bits(m.su_counters - 1) + m.num_tpbs + m.su_counter_bits + 1
    return (_uv(s.blocks) + _uv(len(s.monitors)) + len(s.monitors) * mon
            + _uv(len(s.updates)) + len(s.updates) * upd)


@pytest.mark.parametrize("name", ["tiny", "m100", "m100-12c"])
def test_fill_size_formula(name):
    m = get_machine(name)
    w = Walk.strided(Space.HBSM, 1, 0x40, DType.F16, (4, 8, 2))
    for sync in (Sync(), Sync(4, (Monitor(1, 3, 7, 2),), (Update(2, 0b11, 5, Trigger.BLOCK),) * 2)):
        inst = Fill(1, w, -2.5, sync)
        want = 8 + 24 + _bits(m.num_tpbs - 1) + _walk_bits(m, w) + 64 + _sync_bits(m, sync)
        assert E.instruction_bits(inst, m) == want
        assert len(E.encode_instruction(inst, m)) == (want + 7) // 8


@pytest.mark.parametrize("name", ["tiny", "m100"])
def test_dma_size_formula(name):
    m = get_machine(name)
    src = Walk.strided(Space.DDR, 0, 0x123456, DType.I8, (64, 32), (1024, 1))
    dst = Walk.strided(Space.HBSM, 0, 0x100, DType.I8, (64, 32))
    inst = Dma(1, src, dst, 0b1)
    want = (32 + _bits(m.ccb_dma_engines - 1) + _walk_bits(m, src) + _walk_bits(m, dst) + m.num_tpbs
            + _sync_bits(m, Sync()))
    assert E.instruction_bits(inst, m) == want


def test_widths_follow_the_machine():
    tiny, big = get_machine("tiny"), get_machine("m100")
    wt, wb = E.field_widths(tiny), E.field_widths(big)
    assert (wt["tpb"], wb["tpb"]) == (1, 6)  # 2 TPBs vs 56
    assert (wt["counter"], wb["counter"]) == (4, 6)  # 16 vs 64 counters
    assert (wt["addr_hbsm"], wb["addr_hbsm"]) == (16, 21)  # 64 KiB vs 2 MiB
    assert wt["nlevels"] == 3 and wt["field"] == 32
    # a machine override changes the encoding: more TWU levels need a wider level count
    wide = big.with_overrides(name="wide", twu_max_levels=8, twu_field_bits=24)
    assert E.field_widths(wide)["nlevels"] == 4 and E.field_widths(wide)["field"] == 24


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_walk_bits_equal_the_generic_coder(data):
    """The encoder's direct walk writer (``_walk_bits``, remembered per walk) against the field
    description the decoder shares (``_Coder.walk`` on a fresh writer), and against the width
    formula of docs/isa.md; encoding the same walk twice (from the memo) gives the same bits."""
    m = get_machine(data.draw(st.sampled_from(["tiny", "m100", "m100-12c"])))
    L = E.layout(m)
    w = data.draw(S.walks(m, data.draw(st.integers(1, 300))))
    g = W._Writer(L)
    F._Coder.walk(g, w, "w")
    assert W._walk_bits(L, w) == (g.v, g.n)
    assert g.n == _walk_bits(m, w)
    for _ in range(2):
        f = W._Writer(L)
        f.u(3, 5, "x")
        f.walk(w, "w")
        assert (f.v, f.n) == ((5 << g.n) | g.v, 3 + g.n)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_moved_walks_bits_equal_the_generic_coder(data):
    """Walks moved from one another (``Walk.moved``: twu-materialize's) keep their levels' bits
    in the shared holder, per layout: each moved walk, encoded on machines of different layouts
    in a random order (one with 12-bit TWU fields refuses some levels the others take), gives
    the generic coder's bits, or the generic coder's error when a field does not fit (a holder
    keeping the bits of the first layout for every layout fails it)."""
    ms = data.draw(st.permutations([get_machine("tiny"), get_machine("m100"),
                                    get_machine("tiny").with_overrides(name="narrow",
                                                                       twu_field_bits=12)]))
    src = w = data.draw(S.walks(ms[0], data.draw(st.integers(1, 300))))
    for _ in range(4):
        moved = src.moved(data.draw(st.integers(0, 3)) if w.space is Space.HBSM else 0,
                          data.draw(st.integers(0, 1 << 12)))
        for m in ms:
            L = E.layout(m)
            g = W._Writer(L)
            try:
                F._Coder.walk(g, moved, "w")
            except E.EncodeError as e:
                want = str(e)
            else:
                want = (g.v, g.n)
            f = W._Writer(L)
            try:
                f.walk(moved, "w")
            except E.EncodeError as e:
                got = str(e)
            else:
                got = (f.v, f.n)
            assert got == want, m.name
        src = data.draw(st.sampled_from([w, moved]))


@pytest.mark.parametrize("field", ["base", "tpb", "initial", "step", "final"])
def test_walk_field_that_does_not_fit_is_named(field):
    m = get_machine("tiny")
    big = 1 << (m.twu_field_bits - 1)
    lv = {"initial": Level(big, 1, big + 3), "step": Level(0, big, big),
          "final": Level(-big - 2, 1, -big + 1)}.get(field, Level(0, 1, 3))
    w = Walk(Space.HBSM, m.num_tpbs + 7 if field == "tpb" else 0,
             m.hbsm_bytes + 64 if field == "base" else 0, DType.I8, (lv,))
    assert W._walk_bits(E.layout(m), w) is None
    with pytest.raises(E.EncodeError) as fast:
        W._Writer(E.layout(m)).walk(w, "dst")
    g = W._Writer(E.layout(m))
    with pytest.raises(E.EncodeError) as generic:
        F._Coder.walk(g, w, "dst")
    assert str(fast.value) == str(generic.value) and "dst" in str(fast.value)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_sync_bits_equal_the_generic_coder(data):
    """The encoder's direct Sync writer against ``_Coder.sync`` on a fresh writer and the width
    formula of docs/isa.md; a field that does not fit is named as the generic coder names it."""
    m = get_machine(data.draw(st.sampled_from(["tiny", "m100", "m100-12c"])))
    L = E.layout(m)
    y = data.draw(S.syncs(m, data.draw(st.sampled_from([None, 0])), data.draw(st.integers(1, 64))))
    g = W._Writer(L)
    F._Coder.sync(g, y)
    assert W._sync_bits(L, y) == (g.v, g.n)
    assert g.n == _sync_bits(m, y)
    f = W._Writer(L)
    f.sync(y)
    assert (f.v, f.n) == (g.v, g.n)
    bad = Sync(y.blocks, y.monitors, y.updates + (Update(m.su_counters, 1),))
    assert W._sync_bits(L, bad) is None
    with pytest.raises(E.EncodeError) as fast:
        W._Writer(L).sync(bad)
    with pytest.raises(E.EncodeError) as generic:
        F._Coder.sync(W._Writer(L), bad)
    assert str(fast.value) == str(generic.value)


# ---- the writer's one-step primitives (``_Writer.uv`` / ``flag`` / ``opt_f64`` / ``pair``, the
# encode direction's ``_Src``) against the generic coder the decoder shares
class _GenericWriter(W._Writer):
    """The writer as the shared field description writes it: every primitive, walk and sync
    through ``_Coder``'s generic method (the oracle)."""
    uv = F._Coder.uv
    flag = F._Coder.flag
    opt_f64 = F._Coder.opt_f64
    pair = F._Coder.pair
    walk = F._Coder.walk
    sync = F._Coder.sync


class _Wrapped:
    """Attribute access through a wrapper (what ``_Src`` returned in the encode direction)."""
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __getattr__(self, name):
        return getattr(self.obj, name)


def _generic_bits(inst, m, monkeypatch):
    with monkeypatch.context() as mp:
        mp.setattr(F, "_Src", lambda o: F._NO_SRC if o is None else _Wrapped(o))
        w = _GenericWriter(E.layout(m))
        w.u(E.OPCODE_BITS, type(inst).OPCODE, "opcode")
        w.u(E.LENGTH_BITS, 0, "length")
        F._BODY[type(inst)](w, inst)
    return w.v | (w.n << (w.n - E.HEADER_BITS)), w.n


def _both(call):
    """(value, bit count, result) of ``call(writer)`` on a fresh writer of each kind, or the
    error's class and message."""
    out = []
    for cls in (W._Writer, _GenericWriter):
        w = cls(E.layout(get_machine("tiny")))
        w.u(5, 17, "x")  # bits already written: the primitives append to them
        try:
            r = call(w)
            out.append((w.v, w.n, repr(r), type(r)))
        except Exception as e:  # noqa: BLE001 -- the same error both ways is the claim
            out.append((type(e), str(e)))
    return out


@pytest.mark.parametrize("kind", sorted(F._BODY, key=lambda k: k.__name__))
def test_writer_primitives_equal_the_generic_coder(kind, monkeypatch):
    """Every instruction kind, drawn at random on three machines: the writer's bits are the
    generic coder's (through the old attribute wrapper)."""
    import numpy as np

    @settings(max_examples=60, deadline=None)
    @given(st.data())
    def run(data):
        m = get_machine(data.draw(st.sampled_from(["tiny", "m100", "m100-12c"])))
        inst = data.draw(S.instructions(m, [kind]))
        assert W._encode_bits(inst, m, False) == _generic_bits(inst, m, monkeypatch)
        assert W._encode_bits(inst, m, False, E.layout(m)) == _generic_bits(inst, m, monkeypatch)
    run()
    # the primitives at their edges, other number types included: the same bits and result,
    # or the same error
    big = (1 << 127) - 1
    for x in (0, 1, 2, 127, 128, big, big + 1, -1, True, False, np.int64(5), np.uint8(3)):
        a, b = _both(lambda w, x=x: w.uv(x, ("f", ".x")))
        assert a == b, x
    for x in (True, False, 1, 0, np.bool_(True), np.bool_(False)):
        a, b = _both(lambda w, x=x: w.flag(x, "f"))
        assert a == b, x
    for x in (0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), 0, 3, np.float32(0.5),
              np.float64(-0.0), 1e-320):
        a, b = _both(lambda w, x=x: w.opt_f64(x, "imm"))
        assert a == b, x
    nan = _both(lambda w: w.opt_f64(float("nan"), "imm"))
    assert nan[0][:2] == nan[1][:2]  # (a NaN result is not equal to itself: the bits are)
    for x, n in (((1, 2), 2), ((0, 0, 3, 4), 4), ((1, 2), 4), ((1, -1), 2), ((big + 1, 0), 2),
                 ([1, 2], 2), ((True, 2), 2), ((np.int64(2), 1), 2)):
        a, b = _both(lambda w, x=x, n=n: w.pair(x, n, "stride"))
        assert a == b, x

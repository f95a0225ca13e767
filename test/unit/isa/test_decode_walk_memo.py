"""The decoder's walk memo (``encoding_read._Reader.walk``): equal walk fields decode to one shared Walk
object (equal levels to one shared tuple), and a decode with the memo and the sync fast path (``_Reader.sync``) is the decode
without them -- the same instructions, the same
sizes, the same bytes when re-encoded, the same error (offset and message) on corrupted bytes.
The oracle is the decoder without a memo (``decode_instruction_at(..., walks=None)``), field by
field as ``docs/isa.md`` defines the encoding."""

import random

import m100_isa_strategies as S
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m100.targets.m100 import encoding as E
from m100.targets.m100 import encoding_fields as F
from m100.targets.m100 import encoding_read as R
from m100.targets.m100.isa import Copy, DType, Level, Space, Sync, Walk
from m100.targets.m100.machine import get_machine

TINY = get_machine("tiny")
M100 = get_machine("m100")
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))


def _plain(data: bytes, machine):
    """The decode without a memo and with the general sync path (``_Coder.sync``, field by
    field): each walk field decoded on its own."""
    fast = R._Reader.sync
    R._Reader.sync = F._Coder.sync
    try:
        out, pos = [], 0
        while pos < len(data):
            inst, pos = E.decode_instruction_at(data, pos, machine, None)
            out.append(inst)
    finally:
        R._Reader.sync = fast
    return out


def _outcome(fn, data, machine):
    try:
        insts = fn(data, machine)
    except E.DecodeError as e:
        return ("error", e.offset, str(e))
    # compared by text and bytes, not ==: a NaN immediate is not equal to itself
    return ("ok", repr(insts), [i.__dict__["_bits_on"][1] for i in insts],
            E.encode_instructions(insts, machine))


def _walks(insts):
    return [w for i in insts for _, w, _ in i.walks()]


def test_equal_walks_share_one_object_and_decode_as_without_memo():
    a = Walk(Space.HBSM, 1, 64, DType.I8, (Level(0, 1, 15),))
    c = Walk(Space.HBSM, 1, 128, DType.I8, (Level(0, 1, 15),))  # another base
    b = Walk(Space.HBSM, 1, 64, DType.I8, (Level(0, 1, 15), Level(0, 0, 2)))  # a's bits + a level
    b2 = Walk(Space.HBSM, 1, 256, DType.I8, (Level(0, 1, 31),))
    insts = [Copy(1, a, c, Sync(1, (), ())), Copy(1, c, a, Sync(1, (), ())),
             Copy(1, b, b2, Sync(1, (), ())), Copy(1, b2, b, Sync(1, (), ())),
             Copy(1, a, c, Sync(1, (), ()))]
    data = E.encode_instructions(insts, TINY)
    got = E.decode_instructions(data, TINY)
    assert got == insts == _plain(data, TINY)
    ws = _walks(got)
    assert len({id(w) for w in ws}) == 4  # one object per distinct walk
    assert ws[0] is ws[3] is ws[8] and ws[1] is ws[2] is ws[9]
    assert ws[4] is ws[7] and ws[4] == b and ws[5] is ws[6] and ws[5] == b2
    plain = _walks(_plain(data, TINY))
    assert len({id(w) for w in plain}) == len(plain)  # without the memo: one object per field
    assert E.encode_instructions(got, TINY) == data
    # equal levels are one tuple too (a and c: other bases), other levels another
    assert ws[0].levels is ws[1].levels and ws[4].levels is not ws[5].levels
    assert ws[0].levels is not ws[4].levels and ws[4].levels == b.levels


def test_memo_shared_across_calls():
    w = Walk(Space.HBSM, 0, 0, DType.F32, (Level(0, 1, 7),))
    data = E.encode_instructions([Copy(0, w, w, Sync(1, (), ()))], M100)
    memo: dict = {}
    x = E.decode_instructions(data, M100, memo)[0]
    y = E.decode_instructions(data, M100, memo)[0]
    assert x.src is x.dst is y.src is y.dst
    assert E.decode_instructions(data, M100)[0].src is not x.src  # a fresh memo per call


@settings(max_examples=80, **SETTINGS)
@given(S.st.lists(S.instructions(TINY), min_size=1, max_size=4))
def test_random_streams_decode_as_without_memo(insts):
    data = E.encode_instructions(insts, TINY)
    got, ref = _outcome(E.decode_instructions, data, TINY), _outcome(_plain, data, TINY)
    assert got == ref and got[1] == repr(insts) and got[3] == data
    walks = _walks(E.decode_instructions(data, TINY))
    assert len({id(w) for w in walks}) == len(set(walks))  # equal walks are one object
    # equal levels are one tuple (m100.sim.twu.per_levels finds it by identity)
    assert len({id(w.levels) for w in walks}) == len({w.levels for w in walks})


@settings(max_examples=60, **SETTINGS)
@given(S.st.lists(S.instructions(TINY), min_size=1, max_size=3), st.randoms(use_true_random=False))
def test_corrupted_streams_fail_as_without_memo(insts, rng: random.Random):
    data = E.encode_instructions(insts, TINY)
    for _ in range(25):
        b = bytearray(data)
        for _ in range(rng.randrange(1, 3)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        b = bytes(b) if rng.random() < 0.8 else bytes(b[:rng.randrange(len(b))])
        # the memo filled by the good stream first: a corrupted walk must not hit a good one
        memo: dict = {}
        E.decode_instructions(data, TINY, memo)
        got = _outcome(lambda d, m: E.decode_instructions(d, m, memo), b, TINY)
        assert got == _outcome(_plain, b, TINY)

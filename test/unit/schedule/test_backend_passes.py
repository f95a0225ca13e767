"""hbsm-allocate and twu-materialize on scheduled programs, checked independently.

* HBSM: from the allocated IR alone, every buffer's byte range must lie inside its TPB's HBSM and no
  two buffers of a TPB whose live ranges (first..last using instruction, computed here) intersect
  may share a byte -- checked pairwise, not by trusting the allocator.
* walks: for every operand, the materialized walk's byte addresses must equal the enumeration of the
  placed access (map evaluated point by point with xDSL's AffineMap.eval, row-major layout).
"""

import itertools
import math

import numpy as np
import pytest

from m100.dialects.hbsm import AllocOp, BufferType
from m100.dialects.tpb import BroadcastOp, DmaOp, InstrOp, ProgramOp
from m100.dialects.twu import AccessAttr, WalkAttr
from m100.frontend import models
from m100.frontend.mlir_load import default_context
from m100.tools.onnx_backend import compile_onnx
from m100.passes.backend.hbsm_allocate import HbsmAllocate
from m100.passes.backend.twu_materialize import TwuMaterialize
from m100.passes.schedule.m100_schedule import M100Schedule
from m100.targets.m100.isa import Space
from m100.targets.m100.machine import get_machine


def scheduled(model, **opts):
    ctx = default_context()
    mod = compile_onnx(model, ctx, graph=True)
    M100Schedule(**opts).apply(ctx, mod)
    return ctx, mod


def live_ranges(prog):
    ops = [o for o in prog.body.ops if isinstance(o, InstrOp)]
    rng = {}
    for i, o in enumerate(ops):
        for b in o.bufs:
            a = b.owner
            lo, hi = rng.get(id(a), (i, i))
            rng[id(a)] = (min(lo, i), max(hi, i))
    return rng


@pytest.mark.parametrize("machine,model", [("tiny", "mlp_big"), ("m100", "convnet")])
def test_allocated_buffers_never_overlap_while_live(machine, model):
    m = models.mlp(batch=64, d_in=512, hidden=256, d_out=10) if model == "mlp_big" else \
        models.conv_relu_maxpool(hw=32, f=32)
    ctx, mod = scheduled(m, machine=machine, tpbs=8 if machine == "m100" else 0)
    HbsmAllocate().apply(ctx, mod)
    prog = next(o for o in mod.walk() if isinstance(o, ProgramOp))
    mc = get_machine(machine)
    rng = live_ranges(prog)
    bufs = []
    for o in prog.body.ops:
        if isinstance(o, AllocOp):
            t: BufferType = o.result.type
            assert o.offset is not None
            if t.space_enum is Space.HBSM and id(o) in rng:
                off = o.offset.value.data
                assert off % mc.hbsm_bank_width == 0
                assert 0 <= off and off + t.total_bytes <= mc.hbsm_bytes
                bufs.append((t.tpb_index, off, off + t.total_bytes, *rng[id(o)]))
    assert len(bufs) > 10
    for (t1, a1, e1, l1, h1), (t2, a2, e2, l2, h2) in itertools.combinations(bufs, 2):
        if t1 == t2 and l1 <= h2 and l2 <= h1:
            assert e1 <= a2 or e2 <= a1, "two live buffers share HBSM bytes"


def enumerate_access(buf_type: BufferType, base: int, acc) -> list[int]:
    dims = buf_type.dims
    bounds = acc.shape if acc is not None else dims
    amap = acc.affine_map if acc is not None else None
    es = buf_type.dtype.bits // 8
    out = []
    for idx in itertools.product(*[range(b) for b in bounds]):
        pos = amap.eval(list(idx), []) if amap is not None else idx
        flat = 0
        for p, d in zip(pos, dims):
            assert 0 <= p < d
            flat = flat * d + p
        out.append(base + flat * es)
    return out


def test_walks_enumerate_the_placed_accesses(monkeypatch):
    """The walks twu-materialize writes enumerate the placed accesses (the oracle: each access
    enumerated point by point) and name the space and TPB the ISA asks for (the buffer's; TPB 0
    for a memory walk and a DRB broadcast's destination; a DTDU broadcast's destination its own
    TPB), and a loop nest (bounds, flat access) is synthesized once per program, however many
    operands share it. The program has a (buffer, access) pair walked on two TPBs (a DRB
    broadcast's destination read by its TPB's compute): the pass keeps one walk per pair and
    TPB (session 28), and one kept per pair alone would fail here."""
    from m100.passes.backend import twu_materialize
    from m100.passes.backend.twu_materialize import operand_access

    ctx, mod = scheduled(models.conv_relu_maxpool(hw=16, f=8), machine="m100", tpbs=4)
    HbsmAllocate().apply(ctx, mod)
    prog = next(o for o in mod.walk() if isinstance(o, ProgramOp))
    before = []
    nests = set()
    where = []  # the (space, TPB) of each operand's walk, from the ISA's conventions
    tpbs_of_pair: dict = {}
    for o in prog.body.ops:
        if isinstance(o, InstrOp):
            accs = o.slot_accesses()
            for name, b in o.slot_buffers().items():
                a = accs.get(name)
                before.append(enumerate_access(b.type, b.owner.offset.value.data,
                                               a if isinstance(a, AccessAttr) else None))
                bounds, flat, _, _ = operand_access(b, a)
                nests.add((tuple(bounds), flat))
                t = b.type
                if t.space_enum is not Space.HBSM or (
                        isinstance(o, DmaOp) and o.tpb_mask is not None and
                        o.tpb_mask.value.data and name == "dst"):
                    tpb = 0
                elif isinstance(o, BroadcastOp) and name == "dst":
                    tpb = o.unit_index
                else:
                    tpb = t.tpb_index
                where.append((t.space_enum, tpb))
                tpbs_of_pair.setdefault((b, a), set()).add(tpb)
    assert any(len(v) > 1 for v in tpbs_of_pair.values())
    n = [0]

    def counted(*args, _f=twu_materialize.synthesize):
        n[0] += 1
        return _f(*args)

    monkeypatch.setattr(twu_materialize, "synthesize", counted)
    done = mod.clone()
    TwuMaterialize().apply(ctx, done)
    monkeypatch.undo()
    walks = [o.slot_accesses()[name].to_isa()
             for o in next(p for p in done.walk() if isinstance(p, ProgramOp)).body.ops
             if isinstance(o, InstrOp) for name in o.slot_buffers()]
    got = [w.byte_addresses().tolist() for w in walks]
    assert got == before and len(got) > 20
    assert [(w.space, w.tpb) for w in walks] == where
    assert n[0] == len(nests) < len(got)
    _ = (math, np)


def test_operand_access_is_the_enumerated_element_of_every_point():
    """twu-materialize's ``operand_access`` (with and without its per-value memo and its memo
    of flat accesses shared by every buffer and view: equal-shaped roots at other offsets, a view
    of another root with the same first element, a root of another shape) against an enumeration: at every iteration
    point the access's element is the row-major index, in the root buffer, of the map's result
    plus the views' offsets (views of views, slots, identity accesses, transposes, broadcasts,
    constants)."""
    from xdsl.parser import Parser

    from m100.context import make_context
    from m100.passes.backend.twu_materialize import operand_access

    text = """
    %a = hbsm.alloc offset 4096 : !hbsm.buffer<hbsm[1], 4x6x8xf32, slots = 2>
    %v = hbsm.view %a[1, 2, 0] slot 1 : !hbsm.buffer<hbsm[1], 4x6x8xf32, slots = 2> -> !hbsm.buffer<hbsm[1], 2x3x8xf32>
    %w = hbsm.view %v[1, 1, 4] : !hbsm.buffer<hbsm[1], 2x3x8xf32> -> !hbsm.buffer<hbsm[1], 1x2x4xf32>
    %b = hbsm.alloc offset 512 : !hbsm.buffer<hbsm[0], 5x7xi8>
    %c = hbsm.alloc offset 8192 : !hbsm.buffer<hbsm[1], 4x6x8xf32, slots = 2>
    %x = hbsm.view %c[1, 2, 0] slot 0 : !hbsm.buffer<hbsm[1], 4x6x8xf32, slots = 2> -> !hbsm.buffer<hbsm[1], 2x3x8xf32>
    %y = hbsm.view %c[0, 0, 0] : !hbsm.buffer<hbsm[1], 4x6x8xf32, slots = 2> -> !hbsm.buffer<hbsm[1], 2x3x8xf32>
    %d = hbsm.alloc offset 1024 : !hbsm.buffer<hbsm[0], 5x7xi8>
    %e = hbsm.alloc offset 2048 : !hbsm.buffer<hbsm[0], 3x9xi8>
    """
    mod = Parser(make_context(), text).parse_module()
    vals = {o.results[0].name_hint: o.results[0] for o in mod.ops}
    maps = {3: ["(d0, d1, d2) -> (d0, d1, d2)", "(d0, d1, d2) -> (d0, d2, d1)",
                "(d0, d1) -> (d0, 1, d1)", "(d0, d1, d2, d3) -> (d1, d0 + d2, d3 * 2)"],
            2: ["(d0, d1) -> (d1, d0)", "(d0) -> (2, d0 + 1)", "(d0, d1) -> (d0 * 2, d1 + d0)"]}
    ctx = make_context()

    def acc_attr(m: str, shape: list[int]) -> AccessAttr:
        return Parser(ctx, f"#twu.access<affine_map<{m}>, {shape}>").parse_attribute()

    def root_and_offsets(v):
        offs, slot, o = None, -1, v.owner
        while not isinstance(o, AllocOp):
            vo = list(o.offsets.get_values())
            offs = vo if offs is None else [x + y for x, y in zip(vo, offs)]
            if o.slot is not None:
                slot = o.slot.value.data
            o = o.source.owner
        rt = o.results[0].type
        return o, rt, offs or [0] * len(rt.dims), slot

    rng = np.random.default_rng(3)
    cases = 0
    by_rank = {}  # one set of access attributes per rank: the flat memo meets them again
    flats = {}
    for name in ("a", "v", "w", "b", "c", "x", "y", "d", "e"):
        v = vals[name]
        root, rt, offs, slot = root_and_offsets(v)
        rank = len(rt.dims)
        if rank not in by_rank:
            by_rank[rank] = [None]
            for m in maps[rank]:
                nd = m.split("->")[0].count("d")
                for _ in range(2):
                    by_rank[rank].append(acc_attr(m, [int(x) for x in rng.integers(1, 3, nd)]))
        for acc in by_rank[rank]:
            views = {}
            for memo, fl in ((None, None), (views, None), (views, None), (None, flats),
                             (views, flats)):
                bounds, flat, got_rt, byte_base = operand_access(v, acc, memo, fl)
                assert got_rt is rt
                assert byte_base == root.offset.value.data + max(slot, 0) * rt.slot_bytes
                vshape = list(v.type.dims)
                assert bounds == (vshape if acc is None else list(acc.shape))
                for pt in itertools.product(*(range(b) for b in bounds)):
                    idx = list(pt) if acc is None else acc.affine_map.eval(list(pt), [])
                    elem = np.ravel_multi_index([i + o for i, o in zip(idx, offs)], rt.dims,
                                                mode="raise") if rank else 0
                    assert flat.base + sum(s * i for s, i in zip(flat.coeffs, pt)) == elem
                cases += 1
    assert cases > 40

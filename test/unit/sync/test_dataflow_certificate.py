"""The dataflow certificate (``sync_insert/dataflow.py``) and its independent check
(``m100.sim.dataflow``): every read reads the tensor the compiler meant.

Oracles: hand-written programs whose last writer of every byte is known by construction; a
compiler mutant (hbsm-allocate's offset of one live buffer moved onto another's) whose program
the race check passes and onnxruntime fails -- the dataflow check names the read and the two
tensors; whole models compiled unchanged pass it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from m100.passes.backend.sync_insert import insert_sync
from m100.sim import dataflow
from m100.sim.testing import hb
from m100.targets.m100.isa import Copy, DType, Fill, Sync
from m100.targets.m100.machine import get_machine

TINY = get_machine("tiny")
F32 = DType.F32


def _cert(insts, ops, names, loaded=()):
    """A certificate of ``insts`` written by hand: ``ops[i]`` = [[field, id], ...] (the fields
    in ``Instruction.walks`` order, as the certificate lists the ids)."""
    return {"format": dataflow.FORMAT, "version": dataflow.VERSION,
            "program": dataflow.program_crc(insts), "instructions": len(insts),
            "tensors": list(names), "operands": [[k for _, k in o] for o in ops],
            "loaded": [list(x) for x in loaded]}


def _sync(insts):
    return insert_sync([dataclasses.replace(i, sync=Sync()) for i in insts], TINY).instructions


def test_a_read_of_bytes_another_tensor_overwrote_is_named():
    # x = 16 f32 at byte 0, y = 16 f32 at byte 32 (over x's last 8 elements), then a copy of x
    insts = _sync([Fill(0, hb(0, 0, F32, (16,)), 1.0), Fill(0, hb(0, 32, F32, (16,)), 2.0),
                   Copy(0, hb(0, 0, F32, (16,)), hb(0, 256, F32, (16,)))])
    cert = _cert(insts, [[["dst", 1]], [["dst", 2]], [["src", 1], ["dst", 3]]], ["x", "y", "z"])
    got = dataflow.verify_instructions(insts, cert)
    assert got == ["#2 dtdu.copy block 0 operand 'src' reads HBSM[0] byte 32: expected 'x', "
                   "found 'y', written by #1 dtdu.fill block 0"]
    # y beside x instead: clean
    insts = _sync([Fill(0, hb(0, 0, F32, (16,)), 1.0), Fill(0, hb(0, 64, F32, (16,)), 2.0),
                   Copy(0, hb(0, 0, F32, (16,)), hb(0, 256, F32, (16,)))])
    assert dataflow.verify_instructions(insts, _cert(insts, [[["dst", 1]], [["dst", 2]],
                                                             [["src", 1], ["dst", 3]]],
                                                     ["x", "y", "z"])) == []


def test_interleaved_tensors_are_told_apart_byte_by_byte():
    # x on the even elements, y on the odd ones: reading x's elements is clean, reading the
    # whole run finds y at byte 4 (element 1)
    ev, od = hb(0, 0, F32, (8,), (2,)), hb(0, 4, F32, (8,), (2,))
    for src, want in ((ev, []), (hb(0, 0, F32, (16,)), ["#2 dtdu.copy block 0 operand 'src' "
                                                         "reads HBSM[0] byte 4: expected 'x', "
                                                         "found 'y', written by #1 dtdu.fill "
                                                         "block 0"])):
        insts = _sync([Fill(0, ev, 1.0), Fill(0, od, 2.0),
                       Copy(0, src, hb(0, 256, F32, (src.num_elements,)))])
        cert = _cert(insts, [[["dst", 1]], [["dst", 2]], [["src", 1], ["dst", 3]]],
                     ["x", "y", "z"])
        assert dataflow.verify_instructions(insts, cert) == want


def test_never_written_loaded_and_unknown():
    insts = _sync([Copy(0, hb(0, 0, F32, (16,)), hb(0, 256, F32, (16,))),
                   Fill(0, hb(0, 0, F32, (16,)), 1.0)])
    names = ["x", "z"]
    got = dataflow.verify_instructions(insts, _cert(insts, [[["src", 1], ["dst", 2]],
                                                            [["dst", 1]]], names))
    assert got == ["#0 dtdu.copy block 0 operand 'src' reads HBSM[0] byte 0: expected 'x', found "
                   "nothing: never written; the program writes it later in its order, by #1 "
                   "dtdu.fill block 0 ('x')"]
    # the same bytes loaded as x (an input): clean; an operand of unknown tensor (-1): unchecked
    loaded = [[2, 0, 0, 64, 1]]  # (Space.HBSM, TPB 0, bytes [0, 64), x)
    assert dataflow.verify_instructions(
        insts, _cert(insts, [[["src", 1], ["dst", 2]], [["dst", 1]]], names, loaded)) == []
    assert dataflow.verify_instructions(
        insts, _cert(insts, [[["src", -1], ["dst", 2]], [["dst", 1]]], names)) == []
    # the output z: the copy writes its bytes [256, 320) -- clean; said to be 16 bytes longer,
    # the host would read 16 bytes nobody wrote
    cert = _cert(insts, [[["src", 1], ["dst", 2]], [["dst", 1]]], names, loaded)
    assert dataflow.verify_instructions(insts, {**cert, "outputs": [[2, 0, 256, 320, 2]]}) == []
    assert dataflow.verify_instructions(insts, {**cert, "outputs": [[2, 0, 256, 336, 2]]}) == [
        "the output 'z' at HBSM [256, 336) ends with byte 320 holding nothing: never written"]


def test_the_certificate_belongs_to_the_program():
    from m100.tools import driver
    from m100.frontend import models
    cr = driver.compile(models.mlp(), machine="tiny")
    assert cr.dataflow["format"] == dataflow.FORMAT and driver.check_dataflow(cr) == []
    # every operand of the compiled program has a tensor (a buffer)
    assert all(k > 0 for row in cr.dataflow["operands"] for k in row)
    from m100.passes.backend.sync_insert.certificate import dumps  # (m100 compile's writer)
    text = dumps(cr.dataflow)
    assert json.loads(text) == json.loads(json.dumps(cr.dataflow))
    assert dataflow.verify(cr.program, {**cr.dataflow, "version": 99}) == [
        "dataflow certificate version 99 is not one this checker reads (1)"]
    # one operand's address moved in the program: the certificate is not for it
    prog = cr.program
    key, k, inst, f, w = next((key, k, inst, f, w) for key, s in prog.streams.items()
                              for k, inst in enumerate(s) for f, w, _ in inst.walks()[:1]
                              if f.isidentifier())
    prog.streams[key][k] = dataclasses.replace(inst, **{f: dataclasses.replace(
        w, base=w.base + 32)})
    got = dataflow.verify(prog, cr.dataflow)
    assert len(got) == 1 and got[0].startswith("the dataflow certificate is for other operand "
                                                "addresses")


def test_a_buffer_placed_over_a_live_one_is_caught_where_the_race_check_is_not(monkeypatch):
    """The mutant: hbsm-allocate's offset of the first matmul's B buffer moved onto its A
    buffer's (both live: the matmul reads both). sync-insert orders the program as its body
    says, so the interpreter reports no race; the result is wrong (onnxruntime), and the
    dataflow check names the matmul's read of A finding B's tensor."""
    from m100.dialects.tpb import MatmulOp
    from m100.frontend import models
    from m100.passes.backend import hbsm_allocate
    from m100.tools import driver
    orig = hbsm_allocate.HbsmAllocate.apply
    moved = {}

    def mutant(self, ctx, op):
        orig(self, ctx, op)
        mm = next(o for o in op.walk() if isinstance(o, MatmulOp))
        bufs = mm.slot_buffers()
        ra, rb = hbsm_allocate._root(bufs["a"]), hbsm_allocate._root(bufs["b"])
        assert ra.properties["offset"].value.data != rb.properties["offset"].value.data
        rb.properties["offset"] = ra.properties["offset"]
        moved["tpb"] = ra.results[0].type.tpb_index

    monkeypatch.setattr(hbsm_allocate.HbsmAllocate, "apply", mutant)
    cr = driver.compile(models.mlp(), machine="tiny")
    ck = driver.check_compiled(cr)
    assert ck.result.reports == []  # race-free: the race check sees nothing
    assert not all(e.ok for e in ck.errors)  # and the result is wrong
    flow = [p for p in ck.problems if p.startswith("dataflow: ")]
    assert flow and len(flow) == len(ck.problems)
    names = cr.dataflow["tensors"]
    from m100.sim.certificate import global_order
    insts, _ = global_order(cr.program, cr.dataflow)
    mm = next(i for i, x in enumerate(insts) if x.MNEMONIC == "tcu.matmul"
              and x.tpb == moved["tpb"])
    ids = {f: k for (f, _, _), k in zip(insts[mm].walks(), cr.dataflow["operands"][mm])}
    a, b = names[ids["a"] - 1], names[ids["b"] - 1]
    pat = (rf"dataflow: #{mm} tcu\.matmul block 0 operand 'a' reads HBSM\[{moved['tpb']}\] byte "
           rf"\d+: expected '{re.escape(a)}', found '{re.escape(b)}', written by #\d+ ccb\.dma "
           r"block \d+")
    assert any(re.fullmatch(pat, p) for p in flow), flow


def test_a_load_emitted_before_the_store_it_reads_is_caught(monkeypatch):
    """The mutant of session 25's ACT_PREFETCH program: the scheduler's first load of a tensor
    kept in the CCB SRAM (a Reshape between two CVU ops on ``tiny``) hoisted before the stores
    that write it, its waits for them dropped. sync-insert then orders the stores after the
    load (a WAR), so the run is race-free and the load reads SRAM nobody wrote; onnxruntime
    disagrees, and the dataflow check names the load, the tensor and the store that writes it
    later in the program's order."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    from m100.dialects.hbsm import AllocOp
    from m100.dialects.tpb import DmaOp, ProgramOp
    from m100.dialects.hbsm import buffer_root as _root
    from m100.passes.schedule.m100_schedule import M100Schedule
    from m100.tools import driver
    g = helper.make_graph([helper.make_node("Abs", ["x"], ["a"]),
                           helper.make_node("Reshape", ["a", "s"], ["b"]),
                           helper.make_node("Neg", ["b"], ["y"])], "rs",
                          [helper.make_tensor_value_info("x", T.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [8, 4])],
                          [numpy_helper.from_array(np.array([8, 4], np.int64), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    orig = M100Schedule.apply
    hoisted = []

    def mutant(self, ctx, op):
        orig(self, ctx, op)
        prog = next(o for o in op.walk() if isinstance(o, ProgramOp))
        body = list(prog.body.block.ops)
        sram = [o for o in body if isinstance(o, DmaOp) and
                _root(o.slot_buffers()["src"]).results[0].type.space.data == "sram"]
        load = sram[0]
        root = _root(load.slot_buffers()["src"])
        at = root.properties["offset"].value.data  # (the Reshape is a view: another alloc)
        stores = [o for o in body if isinstance(o, DmaOp) and o is not load and
                  _root(o.slot_buffers()["dst"]).results[0].type.space.data == "sram" and
                  _root(o.slot_buffers()["dst"]).properties["offset"].value.data == at]
        first = min(body.index(o) for o in stores)
        early = set(map(id, body[:first]))
        deps = [d for d in load.deps if id(d.owner) in early]
        slots = {n: (b, load.walks.data.get(n)) for n, b in load.slot_buffers().items()}
        new = DmaOp(load.unit_index, slots, deps, attributes=dict(load.attributes))
        prog.body.block.insert_op_before(new, body[first])
        load.done.replace_all_uses_with(new.done)
        load.detach()
        load.erase()
        hoisted.append(isinstance(root, AllocOp))

    monkeypatch.setattr(M100Schedule, "apply", mutant)
    cr = driver.compile(m, machine="tiny")
    assert hoisted == [True]
    ck = driver.check_compiled(cr)
    assert ck.result.reports == []  # race-free
    assert not all(e.ok for e in ck.errors)  # and wrong
    flow = [p for p in ck.problems if p.startswith("dataflow: ")]
    assert flow and len(flow) == len(ck.problems), ck.problems
    pat = (r"dataflow: #\d+ ccb\.dma block 0 operand 'src' reads SRAM byte \d+: expected '(\w+)', "
           r"found nothing: never written; the program writes it later in its order, by #\d+ "
           r"ccb\.dma block 0 \('(\w+)'\)")
    hits = [re.fullmatch(pat, p) for p in flow]
    assert any(h and h.group(1) == h.group(2) for h in hits), flow


@pytest.mark.parametrize("name", ["llama_layer_small", "llama_lm_small"])
def test_small_llama_models_pass(name):
    import onnx

    from m100.tools import driver
    model = onnx.load(str(Path(__file__).resolve().parents[2] / "data" / f"{name}.onnx"))
    cr = driver.compile(model, machine="m100", tpbs=8)
    assert driver.check_dataflow(cr) == []
    assert len(cr.dataflow["tensors"]) > 10 and cr.dataflow["loaded"]
    # not vacuous on the aliases: some memory tensor is read across the boxes of two writers
    # (a concat's parts, the columns a view reads of stores in boxes)
    from m100.sim.certificate import global_order
    from m100.targets.m100.isa import Space
    insts, _ = global_order(cr.program, cr.dataflow)
    wr, rd = {}, {}
    for i, x in enumerate(insts):
        for (_, w, written), k in zip(x.walks(), cr.dataflow["operands"][i]):
            if w.space is not Space.HBSM:
                (wr if written else rd).setdefault(k, set()).add(w.byte_range())
    assert any(sum(lo < b and a < hi for a, b in wr.get(k, ())) >= 2
               for k, rs in rd.items() for lo, hi in rs)


def test_a_constant_is_as_long_as_its_tensor():
    """Found by the dataflow check (session 26, the int fuzz family): a table Cast's gather
    offsets of a 1-D tensor were ``sum()`` of nothing -- the int 0, a 4-byte segment for an
    8-element constant, whose other 28 bytes the program read from wherever they were. Oracle:
    onnxruntime, on a run whose DDR outside the loaded bytes is garbage (0xff) -- the old program
    gathered at index -1 there (a fault)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto as T
    from onnx import helper

    from m100.sim import Simulator
    from m100.targets.m100.isa import Space, Walk
    from m100.tools import driver
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=T.INT16)], "cast",
                          [helper.make_tensor_value_info("x", T.INT32, [8])],
                          [helper.make_tensor_value_info("y", T.INT16, [8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    cr = driver.compile(m, machine="tiny")
    assert driver.check_dataflow(cr) == []
    prog = cr.program
    x = np.arange(-3, 5, dtype=np.int32) * 9000
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) \
        .run(None, {"x": x})[0]
    sim = Simulator(prog, mode="functional")
    used = sorted([(s.address, s.address + len(s.data)) for s in prog.segments
                   if s.space is Space.DDR] +
                  [(s.address, s.address + s.nbytes) for s in prog.symbols if s.space is Space.DDR])
    pos = 0
    for a, b in used + [(used[-1][1] + 4096,) * 2]:
        if a > pos:
            sim.write(Walk.strided(Space.DDR, 0, pos, DType.I8, (a - pos,)), np.full(a - pos, -1))
        pos = max(pos, b)
    res = sim.run({"x": x})
    assert res.reports == []
    np.testing.assert_array_equal(res.outputs["y"], want)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))

"""Transposes written by their producers (session 14, prefill attention): ``from_ir.writer_maps``
makes a transpose whose input only its producers write (the RoPE halves' concat) no transfer --
the producers store straight into the transposed layout -- and ``find_output_reshapes`` moves a
root read through views only (``transpose -> collapse -> expand`` into the kT output) into the
output. Checked against numpy written from the ops' definitions with the interpreter's race
checks on, and against the same model compiled without the writer maps (the transposes come
back as copies, the values are the same)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as TP, helper as h, numpy_helper as nh

from m100.passes.schedule.from_ir import movement as fm
from m100.passes.schedule.from_ir import strided_views as sv
from m100.passes.schedule.from_ir import writer_maps as wm
from m100.tools import driver

from e2e_helpers import op_graph as _graph  # noqa: E402

T, N, HD = 64, 4, 16
HALF = HD // 2


def _ints(name, vals):
    return nh.from_array(np.array(vals, np.int64), name)


def _model():
    """The prefill layer's attention inputs in small (f32): RoPE on the halves of q and k
    (``llm.PREFILL_ROPE = "halves"``), q transposed to ``[N, T, HD]`` (not an output), k to the
    output ``kT [1, N, HD, T]`` (transpose -> reshape), v = x @ wv transposed to the output
    ``v [1, N, T, HD]`` (a reshape splitting the columns: no affine map, stays a copy); per head
    ``s_h = q_h @ kT_h`` read through views of both, side by side in ``S [T, N*T]``, and
    ``o_h = s_h @ v_h`` with ``v_h`` the columns of the projection (column views) in ``O``."""
    nodes = []
    inits = [_ints("ax2", [2]), _ints("one", [1]), _ints("z", [0]), _ints("h", [HALF]),
             _ints("e", [HD]), _ints("s3", [T, N, HD]), _ints("sp", [1, T, N, HALF]),
             _ints("sq", [N, T, HD]), _ints("sk", [1, N, HD, T]), _ints("sk3", [N, HD, T]),
             _ints("sv", [1, T, N, HD]), _ints("ax0", [0]), _ints("qh", [T, HD]),
             _ints("kh", [HD, T])]
    inits += [_ints(f"i{i}", [i]) for i in range(N + 1)]
    inits += [_ints(f"c{i}", [i * HD]) for i in range(N + 1)]

    def halves(t):
        nodes.append(h.make_node("Slice", [t, "z", "h", "ax2", "one"], [t + "_lo"]))
        nodes.append(h.make_node("Slice", [t, "h", "e", "ax2", "one"], [t + "_hi"]))
        return t + "_lo", t + "_hi"
    cl, ch = halves("c")
    sl, sh = halves("s")

    def rope(x):  # [T, N*HD] -> Y [2, T, N, HALF]
        nodes.append(h.make_node("Reshape", [x, "s3"], [x + "3"]))
        xl, xh = halves(x + "3")
        nodes.extend([h.make_node("Mul", [xl, cl], [x + "a"]), h.make_node("Mul", [xh, sl], [x + "b"]),
                      h.make_node("Sub", [x + "a", x + "b"], [x + "lo"]),
                      h.make_node("Mul", [xh, ch], [x + "p"]), h.make_node("Mul", [xl, sh], [x + "q"]),
                      h.make_node("Add", [x + "p", x + "q"], [x + "hi"]),
                      h.make_node("Reshape", [x + "lo", "sp"], [x + "lo4"]),
                      h.make_node("Reshape", [x + "hi", "sp"], [x + "hi4"]),
                      h.make_node("Concat", [x + "lo4", x + "hi4"], [x + "Y"], axis=0)])
        return x + "Y"
    yq, yk = rope("xq"), rope("xk")
    nodes += [h.make_node("Transpose", [yq], ["tq"], perm=[2, 1, 0, 3]),
              h.make_node("Reshape", ["tq", "sq"], ["q3"]),
              h.make_node("Transpose", [yk], ["tk"], perm=[2, 0, 3, 1]),
              h.make_node("Reshape", ["tk", "sk"], ["kT"]),
              h.make_node("Reshape", ["kT", "sk3"], ["k3"]),
              h.make_node("MatMul", ["x", "wv"], ["vp"]),
              h.make_node("Reshape", ["vp", "sv"], ["v4"]),
              h.make_node("Transpose", ["v4"], ["v"], perm=[0, 2, 1, 3])]
    heads = []
    for i in range(N):
        for t, shp in (("q3", "qh"), ("k3", "kh")):
            nodes += [h.make_node("Slice", [t, f"i{i}", f"i{i + 1}", "ax0", "one"], [f"{t}s{i}"]),
                      h.make_node("Reshape", [f"{t}s{i}", shp], [f"{t}h{i}"])]
        nodes.append(h.make_node("MatMul", [f"q3h{i}", f"k3h{i}"], [f"sc{i}"]))
        heads.append(f"sc{i}")
        # P V with v_i the columns of the projection (a column view)
        nodes += [h.make_node("Slice", ["vp", f"c{i}", f"c{i + 1}", "one", "one"], [f"vh{i}"]),
                  h.make_node("MatMul", [f"sc{i}", f"vh{i}"], [f"o{i}"])]
    nodes.append(h.make_node("Concat", heads, ["S"], axis=1))
    nodes.append(h.make_node("Concat", [f"o{i}" for i in range(N)], ["O"], axis=1))
    f = TP.FLOAT
    g = h.make_graph(nodes, "rope_heads",
                     [h.make_tensor_value_info("xq", f, [T, N * HD]),
                      h.make_tensor_value_info("xk", f, [T, N * HD]),
                      h.make_tensor_value_info("x", f, [T, N * HD]),
                      h.make_tensor_value_info("c", f, [T, 1, HD]),
                      h.make_tensor_value_info("s", f, [T, 1, HD])],
                     [h.make_tensor_value_info("S", f, [T, N * T]),
                      h.make_tensor_value_info("O", f, [T, N * HD]),
                      h.make_tensor_value_info("kT", f, [1, N, HD, T]),
                      h.make_tensor_value_info("v", f, [1, N, T, HD])],
                     inits + [nh.from_array(np.random.default_rng(5).standard_normal(
                         (N * HD, N * HD)).astype(np.float32) / 8, "wv")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _dmas(program) -> int:
    return sum(1 for _, ins in program.instructions() if type(ins).__name__ == "Dma")


def _rope(x, c, s):
    """Rotate-half RoPE from its definition (f32 ops as the CVU): [T, N, HD]."""
    x3 = x.reshape(T, N, HD)
    rot = np.concatenate([-x3[..., HALF:], x3[..., :HALF]], axis=-1)
    return (x3 * c + rot * s).astype(np.float32)


def test_rope_transposes_written_by_their_producers_exact(monkeypatch):
    m = _model()
    rng = np.random.default_rng(3)
    feed = {k: rng.standard_normal(shp).astype(np.float32) for k, shp in
            (("xq", (T, N * HD)), ("xk", (T, N * HD)), ("x", (T, N * HD)),
             ("c", (T, 1, HD)), ("s", (T, 1, HD)))}
    wv = onnx.numpy_helper.to_array([i for i in m.graph.initializer if i.name == "wv"][0])
    q = _rope(feed["xq"], feed["c"], feed["s"]).transpose(1, 0, 2)    # [N, T, HD]
    kT = _rope(feed["xk"], feed["c"], feed["s"]).transpose(1, 2, 0)   # [N, HD, T]
    s_want = np.concatenate([q[i].astype(np.float64) @ kT[i] for i in range(N)], axis=1)
    vp = feed["x"].astype(np.float64) @ wv
    v_want = vp.reshape(T, N, HD).transpose(1, 0, 2)[None]

    found = {}
    real = wm.find_transpose_writes

    def spy(*a):
        found["r"] = real(*a)
        return found["r"]
    realc = wm.find_column_views

    def spyc(*a):
        found["c"] = realc(*a)
        return found["c"]
    monkeypatch.setattr(wm, "find_transpose_writes", spy)
    monkeypatch.setattr(wm, "find_column_views", spyc)
    on = driver.compile(m, machine="m100")
    ops, wmap = found["r"]
    assert len(ops) == 2 and len(wmap) >= 4  # q's and k's transposes; v's stays a copy
    assert len(found["c"]) == N                # the heads' v columns
    got = driver.run(on.program, feed)
    assert got.ok and not got.reports
    np.testing.assert_array_equal(got.outputs["kT"].reshape(kT[None].shape), kT[None])
    np.testing.assert_allclose(got.outputs["S"], s_want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got.outputs["v"], v_want, rtol=1e-4, atol=1e-4)
    o_want = np.concatenate([got.outputs["S"][:, i * T:(i + 1) * T].astype(np.float64)
                             @ vp[:, i * HD:(i + 1) * HD] for i in range(N)], axis=1)
    np.testing.assert_allclose(got.outputs["O"], o_want, rtol=1e-4, atol=1e-3)
    # without the writer maps and column views: transposes and slices are copies again, the
    # same values
    monkeypatch.setattr(wm, "find_transpose_writes", lambda *a: (set(), {}))
    monkeypatch.setattr(wm, "find_column_views", lambda *a: {})
    monkeypatch.setattr(sv, "ENABLED", False)  # (nor strided views: session 17)
    off = driver.compile(m, machine="m100")
    got_off = driver.run(off.program, feed)
    assert got_off.ok and not got_off.reports
    for k in ("S", "O", "kT", "v"):
        np.testing.assert_array_equal(got.outputs[k], got_off.outputs[k])
    assert _dmas(on.program) <= _dmas(off.program) - 2 - N


def test_find_transpose_writes_rules():
    """Taken: a transpose whose input one op writes and nothing else reads (the map: the root's
    element index of each input element). Not taken: an input read by another op too; a
    reshape that splits a dim across the permutation (no affine map: v's heads)."""
    g, low = _graph([("x", (2, 3), "f32", "input"), ("y", (2, 3)), ("t", (3, 2)),
                     ("y2", (2, 3)), ("t2", (3, 2)), ("r2", (2, 3)),
                     ("y3", (2, 6)), ("y3v", (2, 2, 3)), ("t3", (2, 2, 3))],
                    [("e", "cvu.elementwise", None, ["x"], ["y"], {}),
                     ("tr", "dtdu.copy", "transpose", ["y"], ["t"], {"perm": [1, 0]}),
                     ("e2", "cvu.elementwise", None, ["x"], ["y2"], {}),
                     ("tr2", "dtdu.copy", "transpose", ["y2"], ["t2"], {"perm": [1, 0]}),
                     ("other", "cvu.elementwise", None, ["y2"], ["r2"], {}),
                     ("e3", "tcu.matmul", None, ["x"], ["y3"], {}),
                     ("rs", "dtdu.copy", "reshape", ["y3"], ["y3v"], {}),
                     ("tr3", "dtdu.copy", "transpose", ["y3v"], ["t3"], {"perm": [1, 0, 2]})])
    views = fm.find_views(g, low, 4)
    assert views == {"y3v": ("y3", 0)}
    ops, wmap = wm.find_transpose_writes(g, low, views, {}, {}, {"rs"})
    assert ops == {"tr"}
    assert wmap == {"y": ("t", (1, 2), 0)}  # y[i, j] is t[j, i]: element 2 j + i


def test_output_reshape_of_a_view_chain_moves_the_root():
    """``find_output_reshapes``: the input of a reshape into an output that is a whole-size view
    (offset 0) of a root read only through views moves with its views into the output; a root
    that another op reads directly stays a copy."""
    g, low = _graph([("x", (8, 4), "f32", "input"), ("t", (4, 8)), ("tc", (32,)),
                     ("y", (1, 32), "f32", "output"), ("ts", (8,)),
                     ("u", (4, 8)), ("uc", (32,)), ("z", (1, 32), "f32", "output"),
                     ("w", (4, 8))],
                    [("tr", "dtdu.copy", "transpose", ["x"], ["t"], {"perm": [1, 0]}),
                     ("c", "dtdu.copy", "reshape", ["t"], ["tc"], {}),
                     ("ry", "dtdu.copy", "reshape", ["tc"], ["y"], {}),
                     ("sl", "dtdu.copy", "slice", ["tc"], ["ts"],
                      {"offsets": [8], "sizes": [8], "strides": [1]}),
                     ("tu", "dtdu.copy", "transpose", ["x"], ["u"], {"perm": [1, 0]}),
                     ("cu", "dtdu.copy", "reshape", ["u"], ["uc"], {}),
                     ("rz", "dtdu.copy", "reshape", ["uc"], ["z"], {}),
                     ("ux", "dtdu.copy", "gcopy", ["u"], ["w"], {})])
    views = fm.find_views(g, low, 4)
    assert views == {"tc": ("t", 0), "ts": ("t", 32), "uc": ("u", 0)}
    assert fm.find_output_reshapes(g, low, views) == {"ry"}
    assert views == {"tc": ("y", 0), "ts": ("y", 32), "t": ("y", 0), "uc": ("u", 0)}


def test_find_column_views_rules():
    """A column slice of a 2-D tensor read only by TCU matmuls reads the root in place (byte
    offset, root columns); not one a CVU op reads (its walk may be a whole run), nor a slice
    whose offset is not a multiple of the alignment."""
    g, low = _graph([("x", (8, 32), "f32", "input"), ("y", (8, 32)), ("a", (8, 16)),
                     ("b", (8, 16)), ("c", (8, 4)), ("ma", (8, 8)), ("eb", (8, 16)),
                     ("mc", (8, 8))],
                    [("p", "tcu.matmul", None, ["x"], ["y"], {}),
                     ("sa", "dtdu.copy", "slice", ["y"], ["a"],
                      {"offsets": [0, 16], "sizes": [8, 16], "strides": [1, 1]}),
                     ("sb", "dtdu.copy", "slice", ["y"], ["b"],
                      {"offsets": [0, 0], "sizes": [8, 16], "strides": [1, 1]}),
                     ("sc", "dtdu.copy", "slice", ["y"], ["c"],
                      {"offsets": [0, 2], "sizes": [8, 4], "strides": [1, 1]}),
                     ("ua", "tcu.matmul", None, ["a"], ["ma"], {}),
                     ("ub", "cvu.elementwise", None, ["b"], ["eb"], {}),
                     ("uc", "tcu.matmul", None, ["c"], ["mc"], {})])
    views = fm.find_views(g, low, 64)
    assert views == {}
    assert wm.find_column_views(g, low, views, 64, set()) == {"a": ("y", 64, 32)}

"""String tensors compared by Equal (frontend/onnx_rewrite_string.py, driver.intern_strings):
received as int32 ids interned per call; checked against numpy's elementwise == on the strings
(the ONNX definition of Equal), and what stays refused is one line."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from m100.errors import M100Error
from m100.tools.onnx_backend import M100Backend

from test_int_tensors import _model  # one checked opset-18 model builder for the e2e int tests

S = T.STRING


@pytest.mark.onnx_op("Equal", kind="oracle")
def test_equal_of_strings_with_broadcast_and_two_equals():
    # three string inputs, two Equals sharing one (the ids must be interned over the whole call),
    # broadcasting, repeated / empty / non-ASCII strings
    m = _model([h.make_node("Equal", ["a", "b"], ["e1"]), h.make_node("Equal", ["b", "c"], ["e2"]),
                h.make_node("And", ["e1", "e2"], ["both"])],
               [h.make_tensor_value_info("a", S, [3, 4]), h.make_tensor_value_info("b", S, [4]),
                h.make_tensor_value_info("c", S, [3, 1])],
               [h.make_tensor_value_info("e1", T.BOOL, [3, 4]),
                h.make_tensor_value_info("both", T.BOOL, [3, 4])])
    words = np.array(["", "a", "ab", "b", "ä", "a "], dtype=object)
    rng = np.random.default_rng(5)
    a = rng.choice(words, size=(3, 4))
    b = rng.choice(words, size=(4,))
    c = rng.choice(words, size=(3, 1))
    a[0] = b  # some matches for sure
    c[1, 0] = b[2]
    rep = M100Backend.prepare(m, machine="tiny")
    e1, both = rep.run([a, b, c])
    want1 = np.array([[x == y for x, y in zip(r, b)] for r in a])
    want2 = np.array([[y == r[0] for y in b] for r in c])
    np.testing.assert_array_equal(np.asarray(e1, bool).reshape(3, 4), want1)
    np.testing.assert_array_equal(np.asarray(both, bool).reshape(3, 4), want1 & want2)
    assert want1.any() and not want1.all()
    # the ids are per call: other strings in another call
    e1, _ = rep.run([np.full((3, 4), "q", dtype=object), np.array(["q", "r", "q", "s"], object), c])
    np.testing.assert_array_equal(np.asarray(e1, bool).reshape(3, 4), [[1, 0, 1, 0]] * 3)


def test_strings_for_a_numeric_input_stay_an_error():
    # interning is only for the model's string inputs: strings given for an int32 input are not
    # turned into ids
    from m100.tools import driver

    m = _model([h.make_node("Equal", ["a", "b"], ["e"])],
               [h.make_tensor_value_info("a", S, [2]), h.make_tensor_value_info("b", S, [2])],
               [h.make_tensor_value_info("e", T.BOOL, [2])])
    prog = driver.compile(m, machine="tiny").program
    assert prog.metadata[driver.META_STRINGS] == "a,b"
    n = _model([h.make_node("Equal", ["a", "b"], ["e"])],
               [h.make_tensor_value_info("a", T.INT32, [2]), h.make_tensor_value_info("b", T.INT32, [2])],
               [h.make_tensor_value_info("e", T.BOOL, [2])])
    prog = driver.compile(n, machine="tiny").program
    with pytest.raises(Exception, match="not numbers"):
        driver.run(prog, {"a": np.array(["x", "y"]), "b": np.array(["x", "z"])})


@pytest.mark.onnx_op("Equal", kind="negative")
def test_string_compared_with_a_constant_is_one_line_refusal():
    m = _model([h.make_node("Equal", ["a", "k"], ["e"])], [h.make_tensor_value_info("a", S, [2])],
               [h.make_tensor_value_info("e", T.BOOL, [2])],
               [h.make_tensor("k", S, [2], [b"x", b"y"])])
    with pytest.raises(M100Error) as e:
        M100Backend.prepare(m, machine="tiny").run([np.array(["x", "z"], dtype=object)])
    assert "\n" not in str(e.value).strip() and "Equal" in str(e.value), str(e.value)

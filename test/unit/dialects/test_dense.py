"""The one dense-attribute decoder (m100.dialects.dense) against values written by hand / by numpy,
and the graph passes' and reference executor's use of it (bf16 included)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import (BytesAttr, DenseIntOrFPElementsAttr, TensorType, bf16, f16, f32, i1,
                                   i8, i32)
from xdsl.parser import Parser

from m100.context import make_context
from m100.dialects.dense import (DenseError, bf16_bits_to_f32, dense_to_numpy, dense_view,
                                 f32_to_bf16_bits, numpy_to_dense)


def _const(text: str) -> DenseIntOrFPElementsAttr:
    m = Parser(make_context(), f'%0 = "arith.constant"() {{value = {text}}} : () -> '
               f'{text.rsplit(": ", 1)[1]}').parse_module()
    return next(iter(m.ops)).value


@pytest.mark.parametrize("text,expected", [
    ("dense<[1.5, -2.0, 0.099609375]> : tensor<3xbf16>", np.array([1.5, -2.0, 0.099609375], np.float32)),
    ("dense<[[1, -2], [3, 127]]> : tensor<2x2xi8>", np.array([[1, -2], [3, 127]], np.int8)),
    ("dense<[true, false, true]> : tensor<3xi1>", np.array([True, False, True])),
    ("dense<2.5> : tensor<2x3xf32>", np.full((2, 3), 2.5, np.float32)),
    ("dense<[0.5, 65504.0]> : tensor<2xf16>", np.array([0.5, 65504.0], np.float16)),
])
def test_decodes_what_the_parser_stored(text, expected):
    got = dense_to_numpy(_const(text))
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_graph_and_reference_decode_bf16_through_the_same_decoder():
    from m100.frontend.reference import dense_to_numpy as reference_decode
    from m100.passes.graph.common import dense_to_numpy as graph_decode

    attr = _const("dense<[1.5, -2.0, 3.0e38]> : tensor<3xbf16>")
    want = bf16_bits_to_f32(np.frombuffer(attr.data.data, "<u2"))
    np.testing.assert_array_equal(graph_decode(attr), want)  # the graph one used to give None
    np.testing.assert_array_equal(reference_decode(attr), want)


@pytest.mark.parametrize("elem,values", [
    (f32, np.array([1.0, -0.0, 3.25], np.float32)), (f16, np.array([1.0, 2.0, -4.5], np.float16)),
    (i32, np.array([7, -1, 2**31 - 1], np.int32)), (i8, np.array([-128, 0, 5], np.int8)),
    (i1, np.array([True, False, True])), (bf16, np.array([1.0, -3.5, 1e-3], np.float32)),
])
def test_encode_decode_round_trip(elem, values):
    ty = TensorType(elem, [3])
    attr = numpy_to_dense(values, ty)
    got = dense_to_numpy(attr)
    if elem == bf16:  # bf16 keeps 8 significant bits: the round trip is the bf16 rounding
        np.testing.assert_array_equal(got, bf16_bits_to_f32(f32_to_bf16_bits(values)))
        np.testing.assert_allclose(got, values, rtol=2**-8)
    else:
        np.testing.assert_array_equal(got, values)
    assert numpy_to_dense(got, ty) == attr


def test_bf16_rounding_is_to_nearest_even():
    # bf16 spacing just above 1.0 is 2^-7: halfway cases go to the even mantissa
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -(1 + 2**-8)], np.float32)
    want = np.array([1.0, 1 + 2**-6, 1 + 2**-7, -1.0], np.float32)
    np.testing.assert_array_equal(bf16_bits_to_f32(f32_to_bf16_bits(x)), want)
    assert np.isnan(bf16_bits_to_f32(f32_to_bf16_bits(np.array([np.nan], np.float32))))[0]


def test_unknown_element_type_is_one_clear_error():
    from xdsl.dialects.builtin import ComplexType
    with pytest.raises(DenseError, match="not supported"):
        from m100.dialects.dense import storage_dtype
        storage_dtype(ComplexType(f32))


@pytest.mark.parametrize("elem", [f32, f16, i8, i32, bf16, i1])
def test_encoded_bytes_of_any_layout_are_the_c_order_bytes(elem):
    """numpy_to_dense writes C-order bytes whatever the input's layout (a transposed weight as
    layout-nhwc packs it, a broadcast scalar or row, another dtype or byte order): oracle, the
    element-by-element C-order bytes of a contiguous array of the storage type."""
    rng = np.random.default_rng(7)
    base = rng.standard_normal((3, 4, 2, 5)) * 20
    sd = {f32: "<f4", f16: "<f2", i8: "<i1", i32: "<i4"}
    inputs = [base.transpose(2, 3, 1, 0), base.astype(np.float32).transpose(2, 3, 1, 0),
              base[::-1, ::2].transpose(1, 0, 2, 3)[:, :, :, :1].repeat(5, axis=3)[:2],
              np.float32(1.25), base[0, 0, 0][None, None, None, :2].astype(">f4")]
    for a in inputs:
        a = np.asarray(a)
        shape = (2, 5, 4, 3) if a.ndim == 4 and a.shape[0] == 2 and a.shape[1] == 5 else \
            np.broadcast_shapes(a.shape, (2, 1, 1, 1))
        shape = tuple(shape)
        ty = TensorType(elem, list(shape))
        got = numpy_to_dense(a, ty).data.data
        full = np.array(np.broadcast_to(a, shape), order="C")
        if elem is bf16:
            want = f32_to_bf16_bits(full.astype(np.float32)).astype("<u2")
        elif elem is i1:
            want = full.astype(bool).astype(np.uint8) * np.uint8(0xFF)
        else:
            want = full.astype(sd[elem])
        assert got == b"".join(want.reshape(-1)[k].tobytes() for k in range(want.size))


@pytest.mark.parametrize("text", ["dense<[[1.5, -2.0], [3.0, 4.0]]> : tensor<2x2xf32>",
                                  "dense<[1.5, -2.0]> : tensor<2xbf16>",
                                  "dense<[true, false]> : tensor<2xi1>",
                                  "dense<[1, 2]> : tensor<2xi8>"])
def test_decoded_array_is_a_writable_copy_of_its_own(text):
    attr = _const(text)
    before = bytes(attr.data.data)
    got = dense_to_numpy(attr)
    assert got.flags.writeable and got.flags.owndata or got.base is not None
    got[...] = got.dtype.type(0)
    assert bytes(attr.data.data) == before
    assert not np.shares_memory(got, dense_to_numpy(attr))


@pytest.mark.parametrize("text,viewed", [
    ("dense<[[1.5, -2.0, 7.25], [3.0, 4.0, -0.0]]> : tensor<2x3xf32>", True),
    ("dense<[0.5, 65504.0, -1.0]> : tensor<3xf16>", True),
    ("dense<[0.5, 1.0e300]> : tensor<2xf64>", True),
    ("dense<[[1, -2], [3, 127]]> : tensor<2x2xi8>", True),
    ("dense<[1, 255, 7]> : tensor<3xui8>", True),
    ("dense<[1, -70000, 2147483647]> : tensor<3xi32>", True),
    ("dense<[1, -5000000000]> : tensor<2xi64>", True),
    ("dense<[3, -4, 7]> : tensor<3xi4>", True),
    ("dense<[0, 9]> : tensor<2xindex>", True),
    ("dense<[1.5, -2.0]> : tensor<2xbf16>", False),  # widened to float32: a copy
    ("dense<[true, false, true]> : tensor<3xi1>", False),  # bool: a copy
    ("dense<2.5> : tensor<2x3xf32>", True),  # (xDSL's parser stores a splat expanded)
    ("dense<7> : tensor<1xi32>", True),  # one element is not a splat's expansion
])
def test_dense_view_is_dense_to_numpy(text, viewed):
    """Where ``dense_view`` answers: dense_to_numpy's dtype, shape and bits, read-only, over the
    attribute's own bytes; elsewhere None (the callers decode)."""
    attr = _const(text)
    want = dense_to_numpy(attr)
    got = dense_view(attr)
    if not viewed:
        assert got is None
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()
    assert not got.flags.writeable and np.shares_memory(got, np.frombuffer(attr.data.data, np.uint8))
    with pytest.raises(ValueError):
        got[(0,) * got.ndim] = 0


def test_dense_view_of_a_splat_or_a_short_payload_is_none():
    """A splat stored as one element is dense_to_numpy's expansion (a copy), a payload of
    another wrong length its error: neither is a view."""
    ty = TensorType(f32, [2, 3])
    splat = DenseIntOrFPElementsAttr(ty, BytesAttr(np.float32(2.5).tobytes()))
    assert dense_view(splat) is None and (dense_to_numpy(splat) == 2.5).all()
    short = DenseIntOrFPElementsAttr(ty, BytesAttr(np.zeros(4, np.float32).tobytes()))
    assert dense_view(short) is None
    with pytest.raises(DenseError):
        dense_to_numpy(short)

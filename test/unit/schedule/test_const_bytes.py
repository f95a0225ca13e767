"""``emit_core.const_bytes`` (a constant's byte image): the no-copy path for an array already in the
scheduler dtype gives the bytes of the definition (values cast to the dtype, C order), for
contiguous, transposed, sliced, Fortran-order and foreign-byte-order inputs."""
import numpy as np
import pytest

from m100.passes.schedule.emit_core import const_bytes

_NP = {"f32": "<f4", "f16": "<f2", "i8": "i1", "i32": "<i4", "i16": "<i2"}


def _cases():
    rng = np.random.default_rng(27)
    base = rng.normal(size=(6, 10)) * 20  # |values| < 127: no cast overflows
    for src in ("f32", "f16", "i8", "i32", "i16"):
        a = base.astype(_NP[src])
        yield a
        yield a.T  # not C-contiguous
        yield a[::2, 1:7]  # strided
        yield np.asfortranarray(a)
        yield a.astype(np.dtype(_NP[src]).newbyteorder(">"))  # same kind, other byte order


@pytest.mark.parametrize("dtype", sorted(_NP))
def test_const_bytes_is_the_cast_in_c_order(dtype):
    for a in _cases():
        want = b"".join(np.array(v).astype(_NP[dtype]).tobytes() for v in a.ravel(order="C"))
        assert const_bytes(a, dtype) == want


def _whole_views():
    """Arrays that are a bytes object's memory exactly, and arrays that are only part of it or in
    another order (the reference for both: ``tobytes`` of the array)."""
    rng = np.random.default_rng(33)
    for src, shape in (("f32", (4, 6)), ("f16", (2, 3, 4)), ("i8", (24,)), ("i32", (6, 4)),
                       ("i16", (3, 8))):
        raw = (rng.normal(size=shape) * 20).astype(_NP[src]).tobytes()
        flat = np.frombuffer(raw, _NP[src])
        whole = flat.reshape(shape)
        yield src, whole, raw  # the whole object: answered by it
        yield src, flat, raw  # (flat, the same memory)
        yield src, whole[1:], None  # a part: copied
        yield src, whole[:-1], None
        yield src, whole.T, None  # the same bytes, another order: copied (when 2-D or more)
        yield src, flat[::-1], None
        yield src, np.frombuffer(bytearray(raw), _NP[src]).reshape(shape), None  # not bytes
        yield src, np.frombuffer(memoryview(raw), _NP[src]).reshape(shape), None
        yield src, np.frombuffer(raw, _NP[src], count=flat.size - 1, offset=flat.itemsize), None
    empty = b""
    yield "f32", np.frombuffer(empty, "<f4"), None


@pytest.mark.parametrize("dtype", sorted(_NP))
def test_const_bytes_is_tobytes(dtype):
    """A whole-object view in the scheduler dtype is answered by the object itself (no copy);
    everything else is the cast's C-order bytes as before."""
    for src, a, raw in _whole_views():
        want = b"".join(np.array(v).astype(_NP[dtype]).tobytes() for v in a.ravel(order="C"))
        got = const_bytes(a, dtype)
        assert type(got) is bytes and got == want
        if src == dtype and raw is not None:
            assert got is raw
        elif src == dtype and a.ndim > 1 and a.flags.c_contiguous is False:
            assert got is not raw

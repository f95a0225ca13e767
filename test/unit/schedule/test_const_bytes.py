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

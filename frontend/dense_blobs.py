"""The weights of imported MLIR text as raw bytes, not hex: how the frontend hands big constants
from torch-mlir to xDSL.

xDSL's lexer and parser spend most of an imported CNN's parse time on hex strings (ResNet-18: ~47 MB
of weights = ~94 MB of hex). :func:`split_dense_blobs` (on the printed text) or
:func:`split_via_elision` (inside torch-mlir, from the attributes' numpy buffers) replace each big
``arith.constant`` by a one-element placeholder (of type ``tensor<1xET>``) tagged
``{m100.dense_blob = k}`` and return the bytes in order; :func:`attach_dense_blobs` puts them back into the parsed module, bit-exact
(``test/unit/frontend/test_onnx_import.py``). Used by :mod:`m100.frontend.onnx_import` and
:mod:`m100.frontend.torch_import`.
"""

from __future__ import annotations

_ELEM_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i1": 1, "i8": 1, "i16": 2, "i32": 4,
               "i64": 8, "ui8": 1, "ui16": 2, "ui32": 4, "ui64": 8, "si8": 1, "si16": 2, "si32": 4,
               "si64": 8, "index": 8}
_BLOB_HEAD = '"arith.constant"() <{value = dense<"0x'
BLOB_ATTR = "m100.dense_blob"


def split_dense_blobs(text: str, min_elements: int = 256) -> tuple[str, list[bytes]]:
    """Move the big hex weights of generic-form ``arith.constant``s out of the MLIR text.

    xDSL's lexer and parser spend most of an imported CNN's parse time on the hex strings (ResNet-18:
    ~47 MB of weights = ~94 MB of hex). Each constant of more than ``min_elements`` gets a one-element hex
    splat placeholder and a ``{m100.dense_blob = k}`` attribute; the raw bytes are returned in order.
    :func:`attach_dense_blobs` puts them back into the parsed module (bit-exact).
    """
    out: list[str] = []
    blobs: list[bytes] = []
    pos = 0
    while True:
        i = text.find(_BLOB_HEAD, pos)
        if i < 0:
            break
        a = i + len(_BLOB_HEAD)
        b = text.find('"', a)
        close = text.find("}>", b)
        type_text = text[b:close]  # '"> : tensor<64x3x7x7xf32>'
        lt, gt = type_text.find("<"), type_text.rfind(">")
        elem = type_text[lt + 1 : gt].rsplit("x", 1)[-1] if lt >= 0 else ""
        size = _ELEM_BYTES.get(elem)
        if size is None or (b - a) // 2 // size <= min_elements or close < 0:
            out.append(text[pos:a])
            pos = a
            continue
        out.append(text[pos:a])
        out.append("00" * size)
        out.append(f'"> : tensor<1x{elem}>}}>')  # one element: :func:`attach_dense_blobs`
        out.append(f" {{{BLOB_ATTR} = {len(blobs)} : i64}}")
        blobs.append(bytes.fromhex(text[a:b]))
        pos = close + 2
    out.append(text[pos:])
    return "".join(out), blobs


_ELIDED = "dense_resource<__elided__>"
#: elements; torch-mlir prints bigger non-splat constants elided when asked, and they travel as
#: blobs. 16, not 256 (until session 27): MLIR prints a constant of up to 256 elements such as a
#: folded BatchNorm's 1x256x1x1 scale as a nested decimal list (``[[[[5.894600e-01]], ...``,
#: ~1 000 tokens for xDSL's lexer): ResNet-50's text 501 -> 312 KB, its parse ~0.07 CPU-s less
_ELIDE_LIMIT = 16


def _preorder(top, visit) -> None:
    """``visit(op)`` for every op nested in ``top`` (``top`` too), in pre-order: the order the
    printer writes them in.

    MLIR's own walk hands the callback plain ``Operation``s; iterating ``block.operations`` makes
    an ``OpView`` of each op, and the first ``linalg`` op there imports torch-mlir's Python
    ``linalg`` dialect module (its OpDSL named ops: ~0.2 CPU-s of every import worker, for
    nothing). Bindings without ``Operation.walk`` iterate the blocks."""
    try:
        from torch_mlir.ir import WalkOrder, WalkResult
        walk = top.walk
    except (ImportError, AttributeError):
        walk = None
    if walk is not None:
        def cb(o):
            visit(o)
            return WalkResult.ADVANCE
        walk(cb, WalkOrder.PRE_ORDER)
        return
    visit(top)
    for region in top.regions:
        for block in region.blocks:
            for o in block.operations:
                _preorder(o.operation, visit)


def split_via_elision(module, put=None) -> tuple[str, list] | None:
    """Faster :func:`split_dense_blobs` done inside torch-mlir: take the big constants' data straight
    from the MLIR attributes (numpy buffer, no hex) and print the module with them elided; the elided
    markers become the same placeholders. Returns None (caller falls back to the hex path) if anything
    does not line up: an element type numpy cannot hold, a count mismatch, an elided non-constant.
    ``put``: called with each constant's little-endian array; what it returns other than None
    stands for the bytes in the list (the forked worker's ``put`` returns the array itself, whose
    bytes its reply streams after the text: ``onnx_import._write_reply``)."""
    import numpy as np

    blobs: list = []
    sizes: list[int] = []

    def visit(o) -> None:
        if o.name == "arith.constant":
            a = o.attributes["value"]
            if type(a).__name__ in ("DenseFPElementsAttr", "DenseIntElementsAttr") \
                    and not a.is_splat and len(a) > _ELIDE_LIMIT:
                arr = np.ascontiguousarray(np.array(a))
                arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
                tok = put(arr) if put is not None else None
                blobs.append(arr.tobytes() if tok is None else tok)
                sizes.append(arr.nbytes)

    _preorder(module.operation, visit)
    text = module.operation.get_asm(print_generic_op_form=True, large_elements_limit=_ELIDE_LIMIT)
    out: list[str] = []
    pos = k = 0
    while True:
        i = text.find(_ELIDED, pos)
        if i < 0:
            break
        if k >= len(blobs) or not text[max(0, i - 40) : i].endswith('"arith.constant"() <{value = '):
            return None
        close = text.find("}>", i)
        type_text = text[i + len(_ELIDED) : close]
        lt, gt = type_text.find("<"), type_text.rfind(">")
        dims = type_text[lt + 1 : gt].split("x")
        size = _ELEM_BYTES.get(dims[-1])
        count = 1
        for d in dims[:-1]:
            count *= int(d)
        if size is None or close < 0 or count * size != sizes[k]:
            return None
        out += [text[pos:i], f'dense<"0x{"00" * size}"> : tensor<1x{dims[-1]}>}}>',
                f" {{{BLOB_ATTR} = {k} : i64}}"]
        pos, k = close + 2, k + 1
    if k != len(blobs):
        return None
    out.append(text[pos:])
    return "".join(out), blobs


def attach_dense_blobs(module, blobs: list[bytes]) -> None:
    """Inverse of :func:`split_dense_blobs` on the parsed xDSL module.

    A placeholder is a one-element constant of the weight's element type (``dense<"0x00000000">
    : tensor<1xf32>``), not of its shape: xDSL's parser expands a one-element hex string to the
    whole type (``bytes * n``: ResNet-50's placeholders were ~60 MB of zeros written and thrown
    away, ~15 000 page faults). The attached constant takes the op's result type, which
    ``arith.constant`` requires its value's type to be (and torch-mlir printed it so); a result
    of another element type keeps the placeholder's (the verification after it fails as
    before). ``test_placeholders_attach_as_the_whole_text_parses``."""
    from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr, TensorType

    if not blobs:
        return
    for op in module.walk():
        k = op.attributes.get(BLOB_ATTR)
        if k is None:
            continue
        del op.attributes[BLOB_ATTR]
        old = op.properties["value"]
        ty = op.results[0].type if len(op.results) == 1 else old.type
        if not isinstance(ty, TensorType) or ty.element_type != old.type.element_type:
            ty = old.type
        op.properties["value"] = DenseIntOrFPElementsAttr(ty, BytesAttr(blobs[k.value.data]))

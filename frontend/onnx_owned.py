"""The ONNX preparation and the torch-mlir lowering in one forked child, whose copy of the caller's
model is its own: the weights are not copied back into the shape-inferred model.

Why: :func:`m100.frontend.onnx_import.check_and_infer` checks and shape-infers a light copy of
the model (the big weights as graph inputs) and then puts every initializer back into the
inferred model -- one copy of all the weights (ResNet-50: 100 MB, ~25 000 page faults, ~0.065
CPU-s) -- only for the torch-mlir child to read them. A forked child holds the caller's model
(copy on write: reading it copies nothing), so there the inferred model's other fields can go
into the model instead (:func:`merge_inferred`: a few hundred KB of nodes and value infos), and
the weights stay where they are.

What: :func:`prepare_and_lower` is the job :meth:`m100.frontend.onnx_import._Worker.
prepare_and_lower` runs in the child: ``prepare_model(..., owned=True)`` (the same message as the
parent's ``prepare_model``), ``_without_int4_values``, ``lower_in_process`` as
:func:`~m100.frontend.onnx_import.load_onnx` ran them in the parent and the child until session
34, and the prepared model for the parent's ``name_io`` and error messages without the big
weights' bytes (:func:`io_model`: every field but the ``raw_data`` of initializers of
``CONVERT_STRIP_BYTES`` or more that are not a W4 weight's values or scales -- what ``name_io``
reads). Errors: a :class:`FrontendError` is the same one-line error as before; any other
exception of the preparation reaches the parent as itself (pickled), as when the parent raised
it. ``test/unit/frontend/test_onnx_owned.py``.
"""

from __future__ import annotations


def merge_inferred(model, out):
    """``model`` changed in place into ``out`` with ``model``'s graph inputs and initializers --
    the message ``check_and_infer`` made by putting them back into ``out`` (every other field of
    the model and of its graph from ``out``; fields are written in field-number order whatever
    order they are set in). None (``model`` unchanged) when ``model``, its graph or ``out`` has
    fields protobuf does not know (they would stay in ``model``)."""
    from google.protobuf.unknown_fields import UnknownFieldSet

    if any(len(UnknownFieldSet(x)) for x in (model, model.graph, out, out.graph)):
        return None
    _take(model, out, keep=("graph",))
    _take(model.graph, out.graph, keep=("input", "initializer"))
    return model


def copy_fields(dst, src, skip: tuple[str, ...]) -> None:
    """Every field ``src`` holds but those of ``skip`` set on ``dst`` as in ``src`` (``skip``'s not
    copied at all)."""
    for fd, v in src.ListFields():
        if fd.name in skip:
            continue
        if fd.is_repeated:
            getattr(dst, fd.name).extend(v)
        elif fd.type == fd.TYPE_MESSAGE:
            getattr(dst, fd.name).CopyFrom(v)
        else:
            setattr(dst, fd.name, v)


def _take(dst, src, keep: tuple[str, ...]) -> None:
    """Every field of ``dst`` but ``keep`` set as in ``src`` (cleared, then ``src``'s copied)."""
    for fd in dst.DESCRIPTOR.fields:
        if fd.name not in keep:
            dst.ClearField(fd.name)
    copy_fields(dst, src, keep)


def io_model(prepared) -> bytes:
    """The serialized ``prepared`` without the ``raw_data`` of its big initializers (those of
    ``CONVERT_STRIP_BYTES`` or more by dims, not named by a W4 weight's ``q`` / ``scale``)."""
    from m100.frontend.onnx_import import CONVERT_STRIP_BYTES, _light_copy, _tensor_bytes
    from m100.frontend.shape_only import int4_weights

    w4 = {n for d in int4_weights(prepared).values() for n in (d.get("q"), d.get("scale"))}
    big = {t.name: t for t in prepared.graph.initializer
           if t.HasField("raw_data") and t.name not in w4
           and _tensor_bytes(t) >= CONVERT_STRIP_BYTES}
    return (_light_copy(prepared, big) if big else prepared).SerializeToString()


class PrepareFailed(Exception):
    """An exception other than :class:`FrontendError` raised by the preparation (``exc``)."""

    def __init__(self, exc: BaseException):
        super().__init__(repr(exc))
        self.exc = exc


def prepare_and_lower(model, name: str, opset, put):
    """In a forked child: ``(text, blobs, io_model bytes)`` of ``model`` (module doc)."""
    from m100.frontend.onnx_import import (FrontendError, _without_int4_values, lower_in_process,
                                           prepare_model)

    try:
        prepared = prepare_model(model, name, opset, owned=True)
    except FrontendError:
        raise
    except Exception as e:  # noqa: BLE001 - the parent raises it (PrepareFailed)
        raise PrepareFailed(e) from None
    text, blobs = lower_in_process(_without_int4_values(prepared), name, True, split=True, put=put)
    return text, blobs, io_model(prepared)


__all__ = ["PrepareFailed", "io_model", "merge_inferred", "prepare_and_lower"]

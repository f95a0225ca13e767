"""Compile by shape: ONNX weights whose bytes are not there become DDR weight symbols.

A 7B-parameter model has 13 GB of f16 weights; the compiler needs only their shapes, element types
and (for quantized weights) how they are dequantized. An ONNX model saved with external data
(``onnx.save(..., save_as_external_data=True)``) whose data file is left out -- or a
``ModelProto`` built with initializers that point at external data that is never written
(:mod:`m100.frontend.llm` does this) -- is compiled *by shape*:

1. :func:`load_onnx_lazy` reads the model without its external data and loads the external data of
   the initializers whose file is present (those stay ordinary constants);
2. :func:`lift_shape_only_weights` turns each initializer whose bytes are absent into a graph input
   and records the names in the model's ``metadata_props`` under :data:`WEIGHTS_KEY`;
3. the importer (``onnx_import.name_io``) marks those function arguments ``{m100.weight}``;
   ``m100-schedule`` (``from_ir``) makes them scheduler tensors of kind ``weight`` without data, and
   the emitter gives each one a program symbol of role ``weight`` (DDR address, shape, dtype) in
   place of a data segment. Nothing of the weights' size is ever allocated by the compiler.

A program with weight symbols runs ``m100-sim --timing-only`` as is; a functional run needs every
weight supplied like an input (``--inputs`` npz keyed by the weight's ONNX name). Quantization
parameters of a weight (the ``DequantizeLinear`` that consumes it: scale / zero-point tensor names,
axis, block size) are recorded in the program metadata under :data:`WEIGHTS_KEY` as JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: ``ModelProto.metadata_props`` key (comma-separated weight names) and program metadata key
#: (JSON object: weight name -> {"quant": {...}}) of the shape-only weights.
WEIGHTS_KEY = "m100.weights"
#: ``func.func`` argument attribute of a shape-only weight (a unit attribute next to ``m100.name``).
WEIGHT_ATTR = "m100.weight"


def _is_external(t) -> bool:
    from onnx import TensorProto
    return t.data_location == TensorProto.EXTERNAL and not t.raw_data


def _location(t) -> str:
    for e in t.external_data:
        if e.key == "location":
            return e.value
    return ""


def load_onnx_lazy(path: str | os.PathLike):
    """``onnx.load`` of ``path`` that loads only the external data whose file exists next to the
    model; the other external initializers stay shape-only."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_tensor

    model = onnx.load(os.fspath(path), load_external_data=False)
    base = str(Path(path).parent)
    for t in model.graph.initializer:
        if _is_external(t) and _location(t) and (Path(base) / _location(t)).is_file():
            load_external_data_for_tensor(t, base)
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]
    return model


def shape_only_names(model) -> list[str]:
    """The names recorded by :func:`lift_shape_only_weights` (empty if none)."""
    for p in model.metadata_props:
        if p.key == WEIGHTS_KEY:
            return [n for n in p.value.split(",") if n]
    return []


def lift_shape_only_weights(model) -> list[str]:
    """Turn every initializer without its bytes (external data not loaded) into a graph input of the
    same name, type and shape, in place; return their names (also recorded in ``metadata_props``)."""
    from onnx import helper

    lifted = []
    keep = []
    for t in model.graph.initializer:
        if _is_external(t):
            lifted.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            keep.append(t)
    if not lifted:
        return shape_only_names(model)
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    model.graph.input.extend(lifted)
    names = shape_only_names(model) + [v.name for v in lifted]
    for p in list(model.metadata_props):
        if p.key == WEIGHTS_KEY:
            model.metadata_props.remove(p)
    model.metadata_props.add(key=WEIGHTS_KEY, value=",".join(names))
    return names


def weight_quant_info(model, names: list[str]) -> dict[str, dict]:
    """Per shape-only weight: how it is dequantized (the ``DequantizeLinear`` consuming it), if any."""
    out: dict[str, dict] = {n: {} for n in names}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input and node.input[0] in out:
            q = {"op": "DequantizeLinear", "scale": node.input[1] if len(node.input) > 1 else "",
                 "zero_point": node.input[2] if len(node.input) > 2 else ""}
            for a in node.attribute:
                if a.name in ("axis", "block_size"):
                    q[a.name] = str(a.i)
            out[node.input[0]] = {"quant": q}
    return out


def weights_metadata(model) -> str:
    """The program metadata value of :data:`WEIGHTS_KEY` for ``model`` ('' if nothing is shape-only)."""
    names = shape_only_names(model)
    return json.dumps(weight_quant_info(model, names), sort_keys=True) if names else ""


__all__ = ["WEIGHTS_KEY", "WEIGHT_ATTR", "lift_shape_only_weights", "load_onnx_lazy",
           "shape_only_names", "weight_quant_info", "weights_metadata"]

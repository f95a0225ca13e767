"""String tensors at the graph's boundary, compared by ``Equal`` (applied before torch-mlir).

The M100 has no string type and torch-mlir cannot lower an ``Equal`` of strings. Equality is all
such a graph asks of its strings, and it is preserved by any one-to-one map of the strings to
integers, so: a string graph input whose every consumer is an ``Equal`` of two string graph
inputs is received as an int32 tensor, and at run time the driver interns the string arrays of one
call into ids (:func:`m100.tools.driver.symbol_inputs`: the same string gets the same id in every
input of the call, different strings different ids). ``Equal`` of the ids is then exactly
``Equal`` of the strings.

Anything else with strings (a string initializer, a string output, a string read by another op
-- ``StringNormalizer``, ``RegexFullMatch``, ``Gather`` ...) is refused in one line naming the op.
"""

from __future__ import annotations


def string_boundary(graph) -> int:
    """Retype the string graph inputs that only ``Equal`` nodes of string graph inputs read to
    int32 (in place); return how many were retyped. Other string values: a FrontendError."""
    from onnx import TensorProto

    inits = {i.name for i in graph.initializer}
    outs = {o.name for o in graph.output}

    def is_string(v) -> bool:
        return v.type.HasField("tensor_type") and v.type.tensor_type.elem_type == TensorProto.STRING

    strings = {v.name for v in graph.input if v.name not in inits and v.name not in outs
               and is_string(v)}
    other = {i.name for i in graph.initializer if i.data_type == TensorProto.STRING} | \
        {v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info)
         if is_string(v)} | {o for n in graph.node if n.op_type == "Constant" for o in n.output
                             for a in n.attribute if a.name in ("value", "value_strings")
                             and (a.name == "value_strings" or a.t.data_type == TensorProto.STRING)}
    if not strings and not other:
        return 0
    users: dict[str, list] = {}
    for node in graph.node:
        for i in node.input:
            users.setdefault(i, []).append(node)

    def only_equals(name: str) -> bool:
        us = users.get(name, [])
        return bool(us) and all(u.op_type == "Equal" and u.domain in ("", "ai.onnx")
                                and all(i in strings for i in u.input) for u in us)

    ok = {s for s in strings if only_equals(s)}
    # an Equal reading one retyped and one kept string would compare int32 with strings
    ok = {s for s in ok if all(all(i in ok for i in u.input) for u in users[s])}
    left = sorted(other - ok)
    if left:
        from m100.frontend.onnx_import import FrontendError

        v = left[0]
        node = next((n for n in graph.node if v in n.input or v in n.output), None)
        what = f"{node.op_type} '{node.name or node.output[0]}'" if node is not None else "the graph"
        raise FrontendError(f"{what}: string tensor '{v}' is not supported (strings are supported "
                            "only as graph inputs compared with each other by Equal)")
    for v in graph.input:
        if v.name in ok:
            v.type.tensor_type.elem_type = TensorProto.INT32
    return len(ok)

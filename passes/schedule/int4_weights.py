"""W4A16 weights in the scheduler: a shape-only weight that is int4 in DDR, dequantized by the TCU.

:mod:`m100.frontend.shape_only` turns ``DequantizeLinear(q int4 [K, N], scale [K/B, N], axis=0,
block_size=B)`` of shape-only initializers into one function argument of the dequantized type
(f16 [K, N]) carrying ``{m100.int4 = {q, scale, block}}``. :func:`apply_int4_weights` rewrites the
scheduler graph built by ``from_ir``:

* the weight tensor becomes ``i4`` (packed two per byte in DDR: the DMAs move half the bytes of
  f16), its program symbol is ``q``;
* a new weight tensor (the scale's type, [K/B, N], symbol ``scale``) is recorded on every matmul
  reading it as ``op.attrs["w4"] = (scale tensor, B)``; the TCU lowering (``kinds/tcu.py``) loads
  the scale columns with the weight columns (per K chunk: chunk rows / B scale rows) and emits
  ``tcu.matmul`` with ``scale``/``block`` (``isa.MatMul``: ``B = round_f16(q * scale)`` on the
  fly, exactly ``DequantizeLinear`` followed by the f16 ``MatMul``).

Pre: ``from_ir.from_module``'s graph. Post: W4 weights are i4 with their scales attached. Only a
weight read whole as the B operand of plain 2-D matmuls (no batch, ``k == K``, ``n == N``) can be
streamed this way; anything else is one clear error.
"""
from __future__ import annotations

from xdsl.dialects import func
import numpy as np
from xdsl.dialects.builtin import (DenseIntOrFPElementsAttr, DictionaryAttr, IntegerAttr, ModuleOp,
                                   StringAttr)

from .graph import ScheduleError, Tensor
from .ir_facts import IRGraph


def _int4_args(module: ModuleOp) -> dict[int, tuple[str, str, int, tuple | None]]:
    """Argument index -> (q name, scale name, block, (q values, scale values) or None)."""
    from m100.dialects.dense import dense_to_numpy
    from m100.frontend.shape_only import INT4_KEY
    fns = [o for o in module.walk() if isinstance(o, func.FuncOp) and o.body.blocks]
    if len(fns) != 1 or fns[0].arg_attrs is None:
        return {}
    out = {}
    for i, d in enumerate(fns[0].arg_attrs.data):
        a = d.data.get(INT4_KEY)
        if isinstance(a, DictionaryAttr):
            q, s, b = a.data["q"], a.data["scale"], a.data["block"]
            assert isinstance(q, StringAttr) and isinstance(s, StringAttr)
            assert isinstance(b, IntegerAttr)
            vals = None
            if "q_data" in a.data:  # a constant W4 weight (shape_only.lift_int4_constants)
                qd, sd = a.data["q_data"], a.data["scale_data"]
                assert isinstance(qd, DenseIntOrFPElementsAttr)
                assert isinstance(sd, DenseIntOrFPElementsAttr)
                vals = (dense_to_numpy(qd), dense_to_numpy(sd))
            out[i] = (q.data, s.data, b.value.data, vals)
    return out


def apply_int4_weights(module: ModuleOp, irg: IRGraph) -> int:
    """Rewrite the W4 weights of ``irg`` in place (see the module docstring); returns their count."""
    args = _int4_args(module)
    g = irg.graph
    cons = g.consumers()
    for i, (q, s, block, vals) in args.items():
        t_name = f"arg{i}"  # from_ir's name of argument i
        t = g.tensors.get(t_name)
        if t is None or t.kind != "weight" or len(t.shape) != 2:
            raise ScheduleError(f"int4 weight '{q}': expected a 2-D shape-only weight argument")
        k, n = t.shape
        if t.dtype not in ("f16", "bf16"):
            raise ScheduleError(f"int4 weight '{q}': its scales must be f16 or bf16, not {t.dtype}")
        users = cons.get(t_name, [])
        for op in users:
            ok = (op.unit == "tcu.matmul" and len(op.inputs) >= 2 and op.inputs[1] == t_name
                  and t_name not in op.inputs[:1] + op.inputs[2:] and "batch" not in op.attrs
                  and op.attrs.get("k") == k and op.attrs.get("n") == n)
            if not ok:
                raise ScheduleError(f"int4 weight '{q}' is read by op '{op.name}' ({op.unit}) "
                                    "other than as the whole B operand of a 2-D matmul; only that "
                                    "form is dequantized on the fly (W4A16)")
            act = g.tensors[op.inputs[0]].dtype
            if act != t.dtype:
                raise ScheduleError(f"int4 weight '{q}': op '{op.name}' has {act} activations; "
                                    f"on-the-fly dequantization needs {t.dtype} (the scales' type)")
        g.tensors[t_name] = Tensor(t_name, t.shape, "i4", "weight")
        s_name = f"{t_name}.scale"
        g.add_tensor(Tensor(s_name, (k // block, n), t.dtype, "weight"))
        if vals is None:  # shape-only: the caller supplies q and the scales at run time
            irg.weight_symbols[t_name] = q
            irg.weight_symbols[s_name] = s
        else:  # constant: data segments (the int4 values packed two per byte by the emitter)
            qv, sv = vals
            if qv.shape != (k, n) or sv.shape != (k // block, n) or \
                    np.any((qv < -8) | (qv > 7)):
                raise ScheduleError(f"int4 weight '{q}': values outside int4 or shapes "
                                    f"{qv.shape}/{sv.shape} do not fit [{k}, {n}] / block {block}")
            irg.weight_symbols.pop(t_name, None)
            irg.data[t_name] = qv.astype(np.int8)
            irg.data[s_name] = sv
        for op in users:
            op.attrs["w4"] = (s_name, block)
    return len(args)


__all__ = ["apply_int4_weights"]

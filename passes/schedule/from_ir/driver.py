"""The walk over one function's ops (split out of ``from_ir.py``): arguments become input or
shape-only weight tensors, each op is handed to the translator of its concept (:mod:`.movement`,
:mod:`.contraction`, :mod:`.cvu`, :mod:`.csu`) in the order below, and anything no translator takes
is one :class:`ScheduleError` naming the op.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType

from m100.passes.graph.common import UNIT, describe_op

from ..graph import ScheduleError, Tensor
from ..ir_facts import IRGraph, _dtype, _shape
from ..ir_index import flip_map, iota_dim
from . import causal, contraction, csu, cvu, movement, rotated, silu, strided_views, writer_maps
from .builder import Builder


def _translate(ctx: Builder, op) -> None:
    """Hand ``op`` to its translator (the order matters: e.g. an idiom member is claimed by its
    group before the generic translators look at it)."""
    if id(op) in ctx.absorbed:
        return None  # computed by an earlier op's CVU op (silu.silu_tail)
    nm = op.name
    where = describe_op(op)
    unit = op.attributes.get(UNIT)
    unit = unit.data if unit is not None else None
    args = (ctx, op, nm, unit, where)
    if nm == "arith.constant":
        return movement.constant(*args)
    if nm in ("tensor.empty",):
        return None
    if nm == "func.return":
        return movement.func_return(*args)
    if nm == "quant.scast":  # quantized <-> storage type: the same buffer
        return movement.scast(*args)
    if nm in ("quant.qcast", "quant.dcast"):
        return cvu.qdcast(*args)
    if nm == "linalg.fill":
        return movement.fill(*args)
    if nm == "tensor.pad":
        return movement.pad(*args)
    if nm == "linalg.broadcast":
        return movement.broadcast(*args)
    if nm == "linalg.transpose":
        return movement.transpose(*args)
    if nm == "tensor.concat":
        return movement.concat(*args)
    if nm == "tensor.extract_slice":
        return movement.extract_slice(*args)
    if unit in ("cvu.softmax", "cvu.layernorm", "cvu.rmsnorm"):
        return cvu.idiom(*args)
    if nm in ("tensor.collapse_shape", "tensor.expand_shape", "tensor.reshape", "linalg.copy",
              "tensor.cast"):
        return movement.reshape(*args)
    if unit == "tcu.epilogue":
        return contraction.epilogue(*args)
    if nm == "linalg.batch_matmul":
        return contraction.batch_matmul(ctx, op, where)
    if nm in ("linalg.matmul",) + contraction.TCU_CONVS:
        return contraction.contraction(*args)
    if nm.startswith("linalg.pooling_"):
        return cvu.pooling(*args)
    if nm == "linalg.generic" and unit == "dtdu.copy":
        return movement.gcopy(*args)
    if nm == "linalg.generic" and unit == "cvu.reduction":
        return cvu.reduction(*args)
    if nm == "linalg.generic" and unit == "cvu.elementwise" and cvu.softmax_addend(op):
        ctx.softmax_adds[op.results[0]] = op  # lowered by the softmax group (cvu.idiom)
        return None
    if nm == "linalg.generic" and unit == "cvu.elementwise" and silu.silu_pair(op) is not None:
        return silu.silu(*args)
    if nm == "linalg.generic" and unit == "cvu.elementwise":
        return cvu.elementwise(*args)
    if nm == "linalg.generic" and unit == "csu.gather" and flip_map(op) is not None:
        return csu.flip(*args)
    if nm == "linalg.generic" and unit == "csu.gather":
        return csu.gather(*args)
    if nm == "linalg.generic" and unit == "csu.topk" and iota_dim(op) is not None:
        return csu.iota(*args)
    if nm == "tm_tensor.sort":
        return csu.sort(*args)
    if nm == "linalg.generic" and unit == "csu.argmax":
        return csu.argmax(*args)
    if unit is not None or nm.startswith("linalg."):
        raise ScheduleError(f"{where}: {nm} ({unit or 'unclassified'}) is not supported by "
                            "m100-schedule yet")
    if nm.startswith(("arith.", "math.")):
        if any(isinstance(r.type, TensorType) for r in op.results):
            raise ScheduleError(f"{where}: tensor-level {nm} is not supported")
        return None
    raise ScheduleError(f"{where}: {nm} is not supported by m100-schedule")


def from_module(module: ModuleOp, max_cvu_stages: int = 8, mem_align: int = 0,
                tcu_post_stages: int = 8) -> IRGraph:
    """The OpGraph of the single function of ``module`` (after ``m100-graph``); an elementwise
    body longer than ``max_cvu_stages`` (the machine's ``cvu_max_stages``) becomes several CVU
    ops (:mod:`..split_stages`); what follows a dequantized matmul goes into its TCU epilogue
    where it fits ``tcu_post_stages`` (the machine's; 0: never, :mod:`.tcu_post`). ``mem_align`` (the machine's buffer alignment; 0: the m100
    default): reshapes and contiguous slices become views (``movement.find_views``), concat
    inputs are written in place where a part is one contiguous run (``movement.find_in_place``),
    and so is a reshape's input into a model output (``movement.find_output_reshapes``)."""
    funcs = [o for o in module.walk() if isinstance(o, func.FuncOp) and o.body.blocks]
    if len(funcs) != 1:
        raise ScheduleError(f"m100-schedule expects exactly one function with a body, found "
                            f"{len(funcs)}")
    fn = funcs[0]
    block = fn.body.blocks[0]
    ctx = Builder(max_cvu_stages, tcu_post_stages)
    g = ctx.g
    inputs = []
    arg_syms, _ = symbol_names(fn, len(block.args), len(fn.function_type.outputs.data))
    weight_syms: dict[str, str] = {}
    in_syms: list[str] = []
    for i, a in enumerate(block.args):
        n = f"arg{i}"
        if _is_weight_arg(fn, i):  # compile by shape: a weight declared by shape and dtype only
            g.add_tensor(Tensor(n, _shape(a), _dtype(a.type), "weight"))
            weight_syms[n] = arg_syms[i]
        else:
            g.add_tensor(Tensor(n, _shape(a), _dtype(a.type), "input"))
            inputs.append(n)
            in_syms.append(arg_syms[i])
        ctx.names[a] = n

    for op in block.ops:  # convolutions the TCU lowering does not take: one clear line first
        if op.name in contraction.REFUSED_CONVS:
            raise ScheduleError(f"{describe_op(op)}: {contraction.REFUSED_CONVS[op.name]}")

    ctx.rotated, skip = rotated.find_rotated_reads(block)  # RoPE's rotate-half: no copies
    ctx.absorbed |= skip
    for op in list(block.ops):
        try:
            _translate(ctx, op)
        except ScheduleError as e:  # a helper's message without a location: name the op
            if " in @" in str(e):
                raise
            raise ScheduleError(f"{describe_op(op)}: {e}") from None
    outputs = ctx.outputs
    for o in outputs:
        t = g.tensors[o]
        g.tensors[o] = Tensor(t.name, t.shape, t.dtype, "output")
    if not g.ops:
        raise ScheduleError(f"@{fn.sym_name.data}: nothing to schedule")
    for op in g.ops:  # the CVU op's pipeline depth, which its latency is charged by (cost.py)
        lw = ctx.low.get(op.name)
        if lw is not None and lw.kind == "cvu" and lw.stages:
            op.attrs["cvu_stages"] = len(lw.stages)
    if not mem_align:
        from m100.targets.m100.machine import PRESETS
        mem_align = PRESETS["m100"].mem_align
    g.views = movement.find_views(g, ctx.low, mem_align)
    g.view_ops = {op.name for op in g.ops if op.outputs and op.outputs[0] in g.views}
    g.in_place = movement.find_in_place(g, ctx.low, mem_align, g.views, g.strided)
    g.view_ops |= movement.find_output_reshapes(g, ctx.low, g.views)
    tops, g.wmap = writer_maps.find_transpose_writes(g, ctx.low, g.views, g.strided, g.in_place,
                                                     g.view_ops)
    g.view_ops |= tops
    g.cviews = writer_maps.find_column_views(g, ctx.low, g.views, mem_align,
                                             set(g.wmap) | set(g.strided))
    g.view_ops |= {op.name for op in g.ops if op.outputs and op.outputs[0] in g.cviews}
    g.wroots = writer_maps.root_strides(g, g.wmap, g.cviews, g.views)
    if strided_views.ENABLED:
        g.rmap = strided_views.find_strided_views(g, ctx.low, g.views, g.cviews, g.wmap,
                                                  g.strided, g.in_place, g.view_ops)
        g.view_ops |= {op.name for op in g.ops if op.outputs and op.outputs[0] in g.rmap}
    g.causal = causal.find_causal(g, ctx.band_softmax)
    # the builder's walk holds the builder's bound methods: without it the builder (and what it
    # alone holds) goes by reference counts, not at the next cyclic collection
    ctx.walk = None
    _, out_syms = symbol_names(fn, len(block.args), len(outputs))
    return IRGraph(g, ctx.low, ctx.data, inputs, outputs, fn.sym_name.data, in_syms, out_syms,
                   weight_syms)


def _is_weight_arg(fn: func.FuncOp, i: int) -> bool:
    """Argument ``i`` of ``fn`` is a shape-only weight (``{m100.weight}``, :mod:`m100.frontend.shape_only`)."""
    from m100.frontend.shape_only import WEIGHT_ATTR
    attrs = fn.arg_attrs
    return attrs is not None and i < len(attrs.data) and WEIGHT_ATTR in attrs.data[i].data


def symbol_names(fn: func.FuncOp, n_in: int, n_out: int) -> tuple[list[str], list[str]]:
    """The program symbol names of ``fn``'s arguments and results: the model's names recorded by
    the frontend (``{m100.name = "x"}`` in ``arg_attrs`` / ``res_attrs``), else ``arg<i>`` /
    ``result<i>``; positional names throughout when the recorded ones are not all distinct."""
    from m100.frontend.onnx_import import NAME_ATTR

    def recorded(attrs, n: int, prefix: str) -> list[str]:
        out = [f"{prefix}{i}" for i in range(n)]
        if attrs is not None and len(attrs.data) == n:
            for i, d in enumerate(attrs.data):
                a = d.data.get(NAME_ATTR)
                if isinstance(a, StringAttr) and a.data:
                    out[i] = a.data
        return out

    ins = recorded(fn.arg_attrs, n_in, "arg")
    outs = recorded(fn.res_attrs, n_out, "result")
    if len(set(ins + outs)) != len(ins) + len(outs):
        return [f"arg{i}" for i in range(n_in)], [f"result{i}" for i in range(n_out)]
    return ins, outs

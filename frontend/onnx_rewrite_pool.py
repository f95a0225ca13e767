"""ONNX rewrites of pooling operators into the forms the M100 lowering runs best (issue 12).

Run by :func:`m100.frontend.onnx_rewrite_vision.rewrite_vision` (its stage table); each function
takes one node and a :class:`~m100.frontend.onnx_rewrite_ctx.RewriteCtx`, appends the nodes that
replace it (keeping its output names) and returns True, or returns False to leave it alone.

- **AveragePool** whose windows reach into the padding or past the end (pads, ``auto_pad``,
  ``ceil_mode``): ``AveragePool(count_include_pad=1, ceil_mode=0)`` over explicit pads holding
  every window (a sum / (kh*kw) on the CVU) times a constant ``R[oh, ow] = kh*kw / divisor`` from
  the ONNX definition (torch-mlir's divisor for ``count_include_pad=0`` is an index computation
  the CVU can not run, and with ``ceil_mode`` and ``count_include_pad=1`` it divided by kh*kw
  where ONNX divides by the window clipped to input + pads: wrong numbers before this).
- **LRN**: ``x / (bias + alpha/size * sum_{band} x^2) ^ beta`` with the band sum a 1x1 Conv by a
  constant banded ``[C, C]`` matrix (``alpha/size`` folded in, ``bias`` as its bias): the TCU does
  the cross-channel sum, the CVU the square, the power and the division.
- **LpPool** (``ceil_mode = 0``): ``AveragePool(|x|^p, count_include_pad=1) * kh*kw``, then
  ``^(1/p)`` (``p = 2``: Mul/Sqrt, ``p = 1``: Abs): CVU.
- **MaxPool with dilations**: ``Pad(-inf)``, one strided Slice per window tap (DMA), ``Max`` of
  them (CVU). **MaxPool with ceil_mode**: ``ceil_mode=0`` with larger end pads (same windows).
- **AveragePool / LpPool with dilations**: the Sum of the zero-padded strided Slices (as for
  MaxPool) times the constant ``1 / divisor`` (AveragePool) or to the power ``1/p`` (LpPool).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from m100.frontend.onnx_rewrite_ctx import (RewriteCtx, as_str, frontend_error, node_attrs,
                                            reference_run)


def avgpool_cip(node, c: RewriteCtx):
    """AveragePool whose windows reach into the padding or past the end (``ceil_mode``) ->
    ``AveragePool(count_include_pad=1, ceil_mode=0)`` over explicit pads that hold every window
    (a sum / (kh*kw)) times a constant ``R = kh*kw / divisor`` (the ONNX divisor: the window
    elements inside the input, or inside input + pads for ``count_include_pad``, computed by the
    reference implementation on ones)."""
    a = node_attrs(node)
    x = node.input[0]
    s = c.shapes.get(x)
    ys = c.shapes.get(node.output[0])
    if s is None or ys is None or len(s) != 4 or any(d != 1 for d in a.get("dilations", [1, 1])):
        return False
    auto = as_str(a.get("auto_pad", "NOTSET"))
    if not (any(a.get("pads", [])) or auto != "NOTSET" or a.get("ceil_mode", 0)):
        return False
    ks, st = list(a["kernel_shape"]), list(a.get("strides", [1, 1]))
    out = ys[2:]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pb = []
        for i in range(2):
            tot = max(0, (out[i] - 1) * st[i] + ks[i] - s[2 + i])
            pb.append(tot // 2 if auto == "SAME_UPPER" else tot - tot // 2)
    elif auto == "VALID":
        pb = [0, 0]
    else:
        pb = list(a.get("pads", [0, 0, 0, 0]))[:2]
    pe = [(out[i] - 1) * st[i] + ks[i] - s[2 + i] - pb[i] for i in range(2)]
    if min(pe) < 0:
        return False  # the last window ends inside the input: no partial windows at the end
    pads = [pb[0], pb[1], pe[0], pe[1]]
    ones = np.ones([1, 1] + s[2:], np.float32)
    want = reference_run("AveragePool", ones, **a)  # (elements in the input) / divisor
    full = reference_run("AveragePool", ones, kernel_shape=ks, strides=st, pads=pads,
                    count_include_pad=1)  # (elements in the input) / (kh*kw)
    if want.shape != full.shape or want.shape[2:] != tuple(out):
        raise frontend_error(f"AveragePool '{node.name or node.output[0]}': window arithmetic mismatch")
    ratio = want / full
    y = c.node("AveragePool", [x], kernel_shape=ks, strides=st, pads=pads, count_include_pad=1)
    if np.all(ratio == 1.0):
        c.nodes[-1].output[0] = node.output[0]
        return True
    c.node("Mul", [y, c.const(ratio.astype(c.np_type(x)), "avgpool_ratio")], node.output[0])
    return True


def maxpool_ceil(node, c: RewriteCtx):
    """MaxPool(ceil_mode=1) -> MaxPool(ceil_mode=0) with the end pads that give the same windows
    (MaxPool ignores padding, so larger end pads change nothing else); torch-mlir pads by
    stride - 1 and leaves a result smaller than its padded input, which the scheduler refused."""
    a = node_attrs(node)
    x = node.input[0]
    s, ys = c.shapes.get(x), c.shapes.get(node.output[0])
    if not a.get("ceil_mode", 0) or s is None or ys is None or len(s) != 4:
        return False
    if as_str(a.get("auto_pad", "NOTSET")) != "NOTSET" or (len(node.output) > 1 and node.output[1]):
        return False
    ks, st = list(a["kernel_shape"]), list(a.get("strides", [1, 1]))
    d = list(a.get("dilations", [1, 1]))
    pads = list(a.get("pads", [0, 0, 0, 0]))
    for i in range(2):
        end = (ys[2 + i] - 1) * st[i] + (ks[i] - 1) * d[i] + 1 - s[2 + i] - pads[i]
        pads[i + 2] = max(pads[i + 2], end)
        if (s[2 + i] + pads[i] + pads[i + 2] - (ks[i] - 1) * d[i] - 1) // st[i] + 1 != ys[2 + i]:
            return False  # leave it as it is
    c.node("MaxPool", [x], node.output[0], **{**a, "pads": pads, "ceil_mode": 0})
    return True


def lrn(node, c: RewriteCtx):
    a = node_attrs(node)
    x = node.input[0]
    s = c.shapes.get(x)
    if s is None or len(s) != 4:
        return False  # left to torch-mlir (its 3-D sum pooling is refused by the scheduler)
    C = s[1]
    size = int(a["size"])
    alpha, beta, bias = float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)), float(a.get("bias", 1.0))
    lo, hi = (size - 1) // 2, math.ceil((size - 1) / 2)
    band = np.zeros((C, C, 1, 1), np.float64)
    for o in range(C):
        band[o, max(0, o - lo):min(C - 1, o + hi) + 1, 0, 0] = alpha / size
    dt = c.np_type(x)
    sq = c.node("Mul", [x, x])
    den = c.node("Conv", [sq, c.const(band.astype(dt), "lrn_band"),
                          c.const(np.full(C, bias, dt), "lrn_bias")])
    p = c.node("Pow", [den, c.const(np.array(beta, dt), "lrn_beta")])
    c.node("Div", [x, p], node.output[0])
    return True


def lppool(node, c: RewriteCtx):
    a = node_attrs(node)
    x = node.input[0]
    s = c.shapes.get(x)
    where = f"LpPool '{node.name or node.output[0]}'"
    if s is None or len(s) != 4:
        return False  # 3-D: torch-mlir's own refusal
    if a.get("ceil_mode", 0):
        raise frontend_error(f"{where}: ceil_mode is not supported")
    dilated = any(d != 1 for d in a.get("dilations", [1, 1]))
    p = int(a.get("p", 2))
    dt = c.np_type(x)
    if p == 1:
        t = c.node("Abs", [x])
    elif p == 2:
        t = c.node("Mul", [x, x])
    else:  # |x|^p as products (torch-mlir turns an integer power into fpowi, no CVU stage)
        ab = c.node("Abs", [x])
        t = ab
        for _ in range(p - 1):
            t = c.node("Mul", [t, ab])
    pool_attrs = {k: v for k, v in a.items() if k in ("kernel_shape", "strides", "pads", "auto_pad")}
    k = int(np.prod(a["kernel_shape"]))
    if dilated:  # the Sum of the zero-padded dilated taps of |x|^p
        taps, _, _ = _dilated_taps(node, c, t, 0.0, s)
        sm = c.node("Sum", taps) if len(taps) > 1 else taps[0]
    else:
        avg = c.node("AveragePool", [t], count_include_pad=1, **pool_attrs)
        sm = c.node("Mul", [avg, c.const(np.array(k, dt), "lp_k")])
    if p == 1:
        c.nodes[-1].output[0] = node.output[0]
    else:
        if p == 2:
            c.node("Sqrt", [sm], node.output[0])
        else:
            c.node("Pow", [sm, c.const(np.array(1.0 / p, dt), "lp_inv_p")], node.output[0])
    return True


def _dilated_taps(node, c: RewriteCtx, x: str, pad_value: float, shape=None):
    """The window taps of a dilated 2-D pooling: ``x`` padded with ``pad_value`` (pads, and past
    the end for ``ceil_mode``), one strided Slice per tap (DMAs); also the padded-ones mask's taps
    counted in numpy (elements inside the input, per output)."""
    a = node_attrs(node)
    s, ys = shape or c.shapes.get(x), c.shapes.get(node.output[0])
    if s is None or ys is None or len(s) != 4:
        return None  # 3-D / dynamic: left to torch-mlir (the scheduler refuses 3-D pooling)
    ks, st = list(a["kernel_shape"]), list(a.get("strides", [1, 1]))
    d = list(a.get("dilations", [1, 1]))
    auto = as_str(a.get("auto_pad", "NOTSET"))
    out = ys[2:]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0, 0, 0, 0]
        for i in range(2):
            tot = max(0, (out[i] - 1) * st[i] + (ks[i] - 1) * d[i] + 1 - s[2 + i])
            lo = tot // 2 if auto == "SAME_UPPER" else tot - tot // 2
            pads[i], pads[i + 2] = lo, tot - lo
    elif auto == "VALID":
        pads = [0, 0, 0, 0]
    else:
        pads = list(a.get("pads", [0, 0, 0, 0]))
    ends = [pads[i + 2] + max(0, (out[i] - 1) * st[i] + (ks[i] - 1) * d[i] + 1
                              - (s[2 + i] + pads[i] + pads[i + 2])) for i in range(2)]
    dt = c.np_type(x)
    xp = x
    if any(pads[:2]) or any(ends):
        xp = c.node("Pad", [x, c.i64([0, 0, pads[0], pads[1], 0, 0, ends[0], ends[1]]),
                            c.const(np.array(pad_value, dt), "pad_value")])
    mask = np.pad(np.ones(s[2:]), [(pads[0], ends[0]), (pads[1], ends[1])])
    inside = np.zeros(out)
    taps = []
    axes = c.i64([2, 3], "axes")
    steps = c.i64(st, "steps")
    for i, j in itertools.product(range(ks[0]), range(ks[1])):
        b = [i * d[0], j * d[1]]
        e = [b[q] + (out[q] - 1) * st[q] + 1 for q in range(2)]
        taps.append(c.node("Slice", [xp, c.i64(b, "starts"), c.i64(e, "ends"), axes, steps]))
        inside += mask[b[0]:e[0]:st[0], b[1]:e[1]:st[1]]
    return taps, inside, a


def maxpool_dilated(node, c: RewriteCtx):
    a = node_attrs(node)
    d = list(a.get("dilations", []))
    if not d or all(v == 1 for v in d):
        return maxpool_ceil(node, c)
    if len(node.output) > 1 and node.output[1]:
        raise frontend_error(f"MaxPool '{node.name or node.output[0]}': dilated pooling with the Indices "
                   "output is not supported")
    r = _dilated_taps(node, c, node.input[0], -np.inf)
    if r is None:
        return False
    c.node("Max", r[0], node.output[0])
    return True


def avgpool_dilated(node, c: RewriteCtx):
    """AveragePool with dilations: the Sum of the zero-padded taps times ``1 / divisor`` (the
    divisor from the ONNX reference on ones: ``ref(ones) = inside / divisor``)."""
    a = node_attrs(node)
    if all(v == 1 for v in a.get("dilations", [1, 1])):
        return avgpool_cip(node, c)
    x = node.input[0]
    r = _dilated_taps(node, c, x, 0.0)
    if r is None:
        return False
    taps, inside, a = r
    ref = reference_run("AveragePool", np.ones([1, 1] + c.shapes[x][2:], np.float32), **a)[0, 0]
    if ref.shape != inside.shape:
        raise frontend_error(f"AveragePool '{node.name or node.output[0]}': window arithmetic mismatch")
    inv = np.where(inside > 0, ref / np.maximum(inside, 1), 0.0)  # 1 / divisor
    sm = c.node("Sum", taps) if len(taps) > 1 else taps[0]
    c.node("Mul", [sm, c.const(inv[None, None].astype(c.np_type(x)), "avgpool_inv")],
           node.output[0])
    return True


#: TensorProto INT8 / UINT8 (the integer types of MaxPool) -> numpy type
_INT_POOL = {3: np.int8, 2: np.uint8}


def integer_maxpool_pads(nodes, graph, names, types: dict) -> tuple[list, list, int]:
    """(nodes, initializers, count): every MaxPool of int8/uint8 whose windows reach past its
    input (``pads``, ``auto_pad``, ``ceil_mode``) -> an explicit ``Pad`` with the type's smallest
    value, then the same MaxPool without padding (the same windows; ONNX: padding never wins a
    max). torch-mlir pads an integer MaxPool with asymmetric (or ceil-mode, SAME) padding by 0,
    not by the smallest value: a window of negative int8 values gave 0 (found by the integer
    fuzzer, ``m100.tools.fuzz_int``). Runs before the unsigned order flip
    (``onnx_rewrite_unsigned``), so a uint8 pad of 0 is flipped with the data. The Pad's output
    gets its shape in ``graph.value_info`` (the later pooling rewrites read it) and its type in
    ``types`` (value name -> TensorProto element type; the unsigned flip reads it). Padding that
    needs unknown shapes, or a padded integer MaxPool with the Indices output, is refused."""
    c = RewriteCtx(graph, names)
    out, count = [], 0
    for node in nodes:
        a = node_attrs(node) if node.op_type == "MaxPool" else {}
        dt = _INT_POOL.get(c.types.get(node.input[0])) if a else None
        auto = as_str(a.get("auto_pad", "NOTSET"))
        if dt is None or node.domain not in ("", "ai.onnx") or \
                (not any(a.get("pads", [])) and auto in ("NOTSET", "VALID")
                 and not a.get("ceil_mode", 0)):
            out.append(node)
            continue
        name = node.name or node.output[0]
        x, y = node.input[0], node.output[0]
        s, ys = c.shapes.get(x), c.shapes.get(y)
        if s is None or ys is None:
            raise frontend_error(f"MaxPool '{name}' of {np.dtype(dt).name} with padding: its input "
                                 "and output shapes must be static (run shape inference)")
        if len(node.output) > 1 and node.output[1]:
            raise frontend_error(f"MaxPool '{name}' of {np.dtype(dt).name} with padding and the "
                                 "Indices output is not supported")
        n = len(s) - 2
        ks = list(a["kernel_shape"])
        st, dl = list(a.get("strides", [1] * n)), list(a.get("dilations", [1] * n))
        pads = list(a.get("pads", [0] * 2 * n))
        begin, end = [], []
        for i in range(n):
            keff = (ks[i] - 1) * dl[i] + 1
            span = (ys[2 + i] - 1) * st[i] + keff  # the padded extent the windows cover
            if auto in ("SAME_UPPER", "SAME_LOWER"):
                tot = max(span - s[2 + i], 0)
                b = tot // 2 if auto == "SAME_UPPER" else tot - tot // 2
            elif auto == "VALID":
                b = 0
            else:
                b = pads[i]
            # no cropping (a negative end pad): the trailing elements no window reads are left
            e = max(span - s[2 + i] - b, 0)
            if (s[2 + i] + b + e - keff) // st[i] + 1 != ys[2 + i]:
                raise frontend_error(f"MaxPool '{name}': the windows of its padded axis {i} do not "
                                     f"give the output size {ys[2 + i]}")
            begin.append(b)
            end.append(e)
        c.nodes = []
        p = c.node("Pad", [x, c.i64([0, 0] + begin + [0, 0] + end, "pads"),
                           c.const(np.array(np.iinfo(dt).min, dt), "pad_min")])
        graph.value_info.append(c.h.make_tensor_value_info(
            p, c.types[x], s[:2] + [s[2 + i] + begin[i] + end[i] for i in range(n)]))
        types[p] = c.types[x]
        keep = {k: v for k, v in a.items() if k in ("kernel_shape", "strides", "dilations",
                                                     "storage_order")}
        c.nodes.append(c.h.make_node("MaxPool", [p], [y], name=name, **keep))
        out += c.nodes
        count += 1
    return out, c.inits, count

"""ONNX rewrites of vision operators into the forms the M100 lowering runs best (issue 12).

Run by :func:`m100.frontend.onnx_rewrite.rewrite_for_torch_mlir` (top-level graph, after shape
inference, opset >= 17). Every rewritten node keeps its output names. What becomes what, and which
unit then runs it (docs/ops.md, "vision"):

- **1-D Conv / ConvTranspose / MaxPool / AveragePool / LpPool** (``[N, C, L]``): Unsqueeze to
  ``[N, C, 1, L]``, the 2-D operator with a ``1 x k`` window, Squeeze (TCU / CVU as 2-D).
- **Pooling** (padded/ceil-mode AveragePool, LRN, LpPool, dilated pooling): by
  :mod:`m100.frontend.onnx_rewrite_pool`.
- **Resize** with constant scales/sizes (every mode, every coordinate transformation except
  ``tf_crop_and_resize``, antialias): per resized axis an interpolation matrix ``M_a[in, out]``
  (column j = the ONNX Resize of the unit vectors, computed with the ONNX reference implementation,
  so every mode follows the definition), applied as ``MatMul`` along that axis (TCU; a non-last
  axis is transposed to the end and back by DMAs). Nearest with an integer factor ``r`` whose
  index map is ``i // r`` becomes ``Reshape -> Expand -> Reshape`` (DMAs only, exact).
  Non-finite inputs: a MatMul row sums products with zeros, so an inf/NaN spreads along its row
  (finite inputs are exact up to f32 rounding).
- **Pad** ``constant`` with negative pads: a Slice, then a Pad by the non-negative ones; with a
  run-time pad value: ``Where(mask, Pad(x, pads, 0), value)``.
- **Pad** ``reflect`` / ``edge`` / ``wrap`` with constant pads: per padded axis, one-row Slices
  (DMA) and a Concat (DMA); negative pads are Slices.
- **ConvTranspose**: kernel == stride, no pads/dilation/output padding, group 1 (the U-Net
  up-convolution): ``MatMul`` of the NHWC pixels with ``W[C, F*kh*kw]`` (bias per column in the
  TCU epilogue), then a pixel-shuffle Transpose (no zero MACs). Otherwise: zero insertion
  (Reshape, Pad, Reshape, Slice: DMAs) and a stride-1 Conv with the flipped, transposed filter
  and pads ``d*(k-1) - pad`` (TCU); a runtime filter is flipped by MatMuls with exchange matrices.

Refused with one line (:class:`~m100.frontend.onnx_import.FrontendError`): Resize with runtime
scales/sizes, ``tf_crop_and_resize`` or ``keep_aspect_ratio_policy`` other than ``stretch``;
LpPool with ``ceil_mode``; dilated MaxPool with the Indices output. 3-D ops and runtime Pad pads
are left to torch-mlir (the import-only reference path keeps working) and refused by the scheduler.
"""

from __future__ import annotations


import numpy as np

from m100.frontend.onnx_rewrite_ctx import (RewriteCtx, as_str, frontend_error, node_attrs,
                                            reference_run)
from m100.frontend.onnx_rewrite_pool import avgpool_dilated, lppool, lrn, maxpool_dilated


# ----------------------------------------------------------------------------------------------
def _lift_1d(node, c: RewriteCtx):
    """Conv/ConvTranspose/MaxPool/AveragePool/LpPool on [N, C, L] -> the 2-D op on [N, C, 1, L]."""
    x = node.input[0]
    if len(c.shapes.get(x, [])) != 3:
        return False
    if node.op_type == "MaxPool" and len(node.output) > 1 and node.output[1]:
        return False  # the Indices output: left to torch-mlir (and its refusal)
    a = node_attrs(node)
    new = {}
    for k, v in a.items():
        if k in ("kernel_shape", "strides", "dilations", "output_padding"):
            new[k] = [1 if k != "output_padding" else 0] + list(v)
        elif k == "pads":
            new[k] = [0, v[0], 0, v[1]]
        elif k == "output_shape":
            new[k] = [1] + list(v)
        else:
            new[k] = v
    ax = c.i64([2], "axes")
    ins = [c.node("Unsqueeze", [x, ax])]
    if node.op_type in ("Conv", "ConvTranspose"):
        w = node.input[1]
        if w in c.consts:
            ins.append(c.const(c.consts[w][:, :, None, :], "w2d"))
        else:
            ins.append(c.node("Unsqueeze", [w, ax]))
        ins += list(node.input[2:])
    y = c.node(node.op_type, ins, **new)
    c.node("Squeeze", [y, ax], node.output[0])
    return True


# ----------------------------------------------------------------------------------------------
def _resize_matrix(n_in: int, n_out: int, scale: float | None, a: dict) -> np.ndarray:
    """``M[n_in, n_out]``: column j of the 1-D ONNX Resize (attributes ``a``) of the unit vectors,
    i.e. ``resize(v) = v @ M`` -- computed by the ONNX reference implementation."""
    eye = np.eye(n_in, dtype=np.float32)
    keep = {k: v for k, v in a.items() if k in ("mode", "coordinate_transformation_mode",
                                                "nearest_mode", "cubic_coeff_a",
                                                "exclude_outside", "antialias")}
    if scale is not None:
        m = reference_run("Resize", eye, (None, np.array([1.0, scale], np.float32)), **keep)
    else:
        m = reference_run("Resize", eye, (None, None, np.array([n_in, n_out], np.int64)), **keep)
    if m.shape != (n_in, n_out):
        raise frontend_error(f"Resize: the 1-D resize gives {m.shape[1]} elements, the model says {n_out}")
    return m.astype(np.float64)


def _along_last(c: RewriteCtx, x: str, shape: list[int], m: np.ndarray) -> tuple[str, list[int]]:
    """``x @ m`` along the last axis, as a 2-D MatMul (Reshape, MatMul, Reshape)."""
    lead = int(np.prod(shape[:-1]))
    x2 = c.node("Reshape", [x, c.i64([lead, shape[-1]], "shape")])
    y2 = c.node("MatMul", [x2, c.const(m.astype(c.np_type(x) if x in c.types else np.float32),
                                       "resize_m")])
    out = shape[:-1] + [m.shape[1]]
    return c.node("Reshape", [y2, c.i64(out, "shape")]), out


def _resize(node, c: RewriteCtx):
    a = {k: as_str(v) for k, v in node_attrs(node).items()}
    where = f"Resize '{node.name or node.output[0]}'"
    x = node.input[0]
    ins = list(node.input) + [""] * (4 - len(node.input))
    scales_n, sizes_n = ins[2], ins[3]
    scales = c.consts.get(scales_n) if scales_n else None
    sizes = c.consts.get(sizes_n) if sizes_n else None
    if (scales_n and scales is None) or (sizes_n and sizes is None):
        raise frontend_error(f"{where}: runtime scales/sizes are not supported (constants only)")
    s = c.shapes.get(x)
    ys = c.shapes.get(node.output[0])
    if s is None or ys is None:
        raise frontend_error(f"{where}: needs static shapes")
    if scales is not None and scales.size == 0:
        scales = None
    if sizes is not None and sizes.size == 0:
        sizes = None
    if a.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        raise frontend_error(f"{where}: coordinate_transformation_mode tf_crop_and_resize is not supported")
    if a.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise frontend_error(f"{where}: keep_aspect_ratio_policy {a['keep_aspect_ratio_policy']} is not "
                   "supported (stretch only)")
    r = len(s)
    axes = [ax % r for ax in a.get("axes", list(range(r)))]
    per_scale = {ax: float(scales[i]) for i, ax in enumerate(axes)} if scales is not None else {}
    mats = {}
    for ax in range(r):
        if ax not in axes:
            continue
        m = _resize_matrix(s[ax], ys[ax], per_scale.get(ax), a)
        if m.shape == (s[ax], s[ax]) and np.array_equal(m, np.eye(s[ax])):
            continue
        mats[ax] = m
    if not mats:
        c.node("Identity", [x], node.output[0])
        return True
    # nearest with integer factors i // r on every resized axis: Reshape -> Expand -> Reshape
    reps = {}
    for ax, m in mats.items():
        n_in, n_out = m.shape
        f = n_out // n_in
        if n_out % n_in == 0 and np.array_equal(m, np.kron(np.eye(n_in), np.ones((1, f)))):
            reps[ax] = f
    if len(reps) == len(mats):
        split, big = [], []
        for ax in range(r):
            split += [s[ax]] + ([1] if ax in reps else [])
            big += [s[ax]] + ([reps[ax]] if ax in reps else [])
        t = c.node("Reshape", [x, c.i64(split, "shape")])
        t = c.node("Expand", [t, c.i64(big, "shape")])
        c.node("Reshape", [t, c.i64(ys, "shape")], node.output[0])
        return True
    cur, shape = x, list(s)
    for ax in sorted(mats, reverse=True):  # the last axis first: no transpose for it
        m = mats[ax]
        if ax == r - 1:
            cur, shape = _along_last(c, cur, shape, m)
            continue
        perm = [q for q in range(r) if q != ax] + [ax]
        inv = [perm.index(q) for q in range(r)]
        t = c.node("Transpose", [cur], perm=perm)
        t, tshape = _along_last(c, t, [shape[q] for q in perm], m)
        cur = c.node("Transpose", [t], perm=inv)
        shape = [tshape[inv[q]] for q in range(r)]
    c.nodes[-1].output[0] = node.output[0]
    return True


def _pad_constant(node, c: RewriteCtx) -> bool:
    """A constant-mode Pad (constant pads and axes, static shape; else left as it is) that
    torch-mlir or the scheduler would not take:

    - negative pads (cropping; its DMA addressed bytes before the buffer: an internal error):
      a Slice first, then a Pad by the non-negative pads;
    - a run-time pad value (torch-mlir reads it with a ``tensor.extract`` no unit runs):
      ``Where(mask, Pad(x, pads, 0), value)``, the mask true where the result reads ``x``."""
    ins = list(node.input) + [""] * (4 - len(node.input))
    x, pads, value, axes = ins[:4]
    s = c.shapes.get(x)
    if s is None or c.consts.get(pads) is None or (axes and c.consts.get(axes) is None):
        return False
    runtime_value = bool(value) and value not in c.consts
    p = [int(v) for v in c.consts[pads]]
    if not runtime_value and min(p, default=0) >= 0:
        return False
    r = len(s)
    ax = [int(v) % r for v in c.consts[axes]] if axes else list(range(r))
    lo, hi = [0] * r, [0] * r
    for i, a in enumerate(ax):
        lo[a], hi[a] = p[i], p[i + len(ax)]
    cur = x
    cut = [a for a in range(r) if lo[a] < 0 or hi[a] < 0]
    if cut:
        cur = c.node("Slice", [x, c.i64([max(0, -lo[a]) for a in cut], "starts"),
                               c.i64([s[a] - max(0, -hi[a]) for a in cut], "ends"),
                               c.i64(cut, "axes")])
    cropped = [d - max(0, -b) - max(0, -e) for d, b, e in zip(s, lo, hi)]
    if runtime_value:
        fill = c.const(np.zeros((), c.np_type(x)), "pad_zero")
    else:
        fill = value
    new_pads = c.i64([max(0, b) for b in lo] + [max(0, e) for e in hi], "pads")
    out = None if runtime_value else node.output[0]
    padded = c.node("Pad", [cur, new_pads] + ([fill] if fill else []), out, mode="constant")
    if runtime_value:
        # true where the result reads x
        mask = np.pad(np.ones(cropped, bool), [(max(0, b), max(0, e)) for b, e in zip(lo, hi)])
        c.node("Where", [c.const(mask, "pad_mask"), padded, value], node.output[0])
    return True


def _pad(node, c: RewriteCtx):
    a = node_attrs(node)
    mode = as_str(a.get("mode", "constant"))
    if mode == "constant":
        return _pad_constant(node, c)
    where = f"Pad '{node.name or node.output[0]}'"
    x = node.input[0]
    s = c.shapes.get(x)
    pads = c.consts.get(node.input[1]) if len(node.input) > 1 else None
    if s is None or pads is None:
        return False  # runtime pads: torch-mlir's gather form (refused by the scheduler)
    r = len(s)
    axes = list(range(r))
    if len(node.input) > 3 and node.input[3]:
        ax_c = c.consts.get(node.input[3])
        if ax_c is None:
            raise frontend_error(f"{where}: runtime axes are not supported")
        axes = [int(v) % r for v in ax_c]
    pads = [int(v) for v in pads]
    n = len(axes)
    cur, shape = x, list(s)
    for i, ax in enumerate(axes):
        b, e = pads[i], pads[i + n]
        if b == 0 and e == 0:
            continue
        L = shape[ax]
        if b < 0 or e < 0:  # negative pads crop first
            cur = c.node("Slice", [cur, c.i64([max(0, -b)], "starts"), c.i64([L - max(0, -e)], "ends"),
                                   c.i64([ax], "axes")])
            L -= max(0, -b) + max(0, -e)
            b, e = max(0, b), max(0, e)
        if mode == "reflect" and (b >= L or e >= L):
            raise frontend_error(f"{where}: reflect padding of {max(b, e)} on an axis of {L} elements")
        if mode == "wrap" and (b > L or e > L):
            raise frontend_error(f"{where}: wrap padding larger than the axis")

        def row(i0, i1):
            return c.node("Slice", [cur, c.i64([i0], "starts"), c.i64([i1], "ends"),
                                    c.i64([ax], "axes")])
        if mode == "reflect":
            before = [row(k, k + 1) for k in range(b, 0, -1)]
            after = [row(k, k + 1) for k in range(L - 2, L - 2 - e, -1)]
        elif mode == "edge":
            before = [row(0, 1)] * b
            after = [row(L - 1, L)] * e
        elif mode == "wrap":
            before = [row(L - b, L)] if b else []
            after = [row(0, e)] if e else []
        else:
            raise frontend_error(f"{where}: mode {mode} is not supported")
        cur = c.node("Concat", before + [cur] + after, axis=ax)
        shape[ax] = L + b + e
    if cur == x:
        c.node("Identity", [x], node.output[0])
    else:
        c.nodes[-1].output[0] = node.output[0]
    return True


def _flip_runtime(c: RewriteCtx, w: str, shape: list[int], g: int = 1) -> str:
    """W[C, Fg, kh, kw] -> Wf[g*Fg + f, c, i, j] = W[g*Cg + c, f, kh-1-i, kw-1-j] for a runtime W
    (group-major transpose, then MatMuls by exchange matrices: exact for finite values)."""
    C, Fg, kh, kw = shape
    dt = c.np_type(w)
    if g == 1:
        t = c.node("Transpose", [w], perm=[1, 0, 3, 2])  # [F, C, kw, kh]
    else:
        t = c.node("Reshape", [w, c.i64([g, C // g, Fg, kh, kw], "shape")])
        t = c.node("Transpose", [t], perm=[0, 2, 1, 4, 3])  # [g, Fg, Cg, kw, kh]
        t = c.node("Reshape", [t, c.i64([g * Fg, C // g, kw, kh], "shape")])
    F, Cg = Fg * g, C // g

    def flip_last(t, k, shape):  # a 2-D MatMul by the k x k exchange matrix
        t2 = c.node("Reshape", [t, c.i64([F * Cg * (kh * kw // k), k], "shape")])
        t2 = c.node("MatMul", [t2, c.const(np.eye(k, dtype=dt)[::-1], "flip")])
        return c.node("Reshape", [t2, c.i64(shape, "shape")])

    if kh > 1:
        t = flip_last(t, kh, [F, Cg, kw, kh])
    t = c.node("Transpose", [t], perm=[0, 1, 3, 2])  # [F, C, kh, kw]
    if kw > 1:
        t = flip_last(t, kw, [F, Cg, kh, kw])
    return t


def _conv_transpose(node, c: RewriteCtx):
    a = node_attrs(node)
    where = f"ConvTranspose '{node.name or node.output[0]}'"
    x, w = node.input[0], node.input[1]
    b = node.input[2] if len(node.input) > 2 and node.input[2] else None
    s, ws, ys = c.shapes.get(x), c.shapes.get(w), c.shapes.get(node.output[0])
    if s is None or ws is None or ys is None or len(s) != 4:
        return False  # 3-D / dynamic: torch-mlir's lowering (the scheduler refuses 3-D convs)
    N, C, H, W = s
    g = int(a.get("group", 1))
    Fg, kh, kw = ws[1], ws[2], ws[3]
    F = Fg * g
    st = list(a.get("strides", [1, 1]))
    dl = list(a.get("dilations", [1, 1]))
    op_ = list(a.get("output_padding", [0, 0]))
    ks = [kh, kw]
    auto = as_str(a.get("auto_pad", "NOTSET"))
    if "output_shape" in a or auto in ("SAME_UPPER", "SAME_LOWER"):
        outs = list(a["output_shape"])[-2:] if "output_shape" in a else [H * st[0], W * st[1]]
        pads = [0, 0, 0, 0]
        for i in range(2):
            tot = st[i] * ([H, W][i] - 1) + op_[i] + (ks[i] - 1) * dl[i] + 1 - outs[i]
            if auto == "SAME_UPPER":
                pads[i], pads[i + 2] = tot // 2, tot - tot // 2
            else:
                pads[i], pads[i + 2] = tot - tot // 2, tot // 2
    elif auto == "VALID":
        pads = [0, 0, 0, 0]
    else:
        pads = list(a.get("pads", [0, 0, 0, 0]))
    if ys[2:] != [st[i] * ([H, W][i] - 1) + op_[i] + (ks[i] - 1) * dl[i] + 1 - pads[i] - pads[i + 2]
                  for i in range(2)]:
        raise frontend_error(f"{where}: output shape {ys} does not follow from the attributes")
    dt = c.np_type(x)
    wc = c.consts.get(w)
    bc = c.consts.get(b) if b else None
    if st == ks and dl == [1, 1] and not any(pads) and not any(op_) and g == 1:
        # every input pixel writes its own kh x kw block: one MatMul + a pixel shuffle
        xt = c.node("Transpose", [x], perm=[0, 2, 3, 1])
        x2 = c.node("Reshape", [xt, c.i64([N * H * W, C], "shape")])
        w2 = c.const(wc.reshape(C, F * kh * kw), "w2") if wc is not None else \
            c.node("Reshape", [w, c.i64([C, F * kh * kw], "shape")])
        y2 = c.node("MatMul", [x2, w2])
        if bc is not None:  # per output column (f, i, j): the TCU epilogue's bias
            y2 = c.node("Add", [y2, c.const(np.repeat(bc, kh * kw).astype(dt), "bias")])
        y6 = c.node("Reshape", [y2, c.i64([N, H, W, F, kh, kw], "shape")])
        yt = c.node("Transpose", [y6], perm=[0, 3, 1, 4, 2, 5])
        yy = c.node("Reshape", [yt, c.i64([N, F, H * kh, W * kw], "shape")])
        if b and bc is None:
            bb = c.node("Reshape", [b, c.i64([1, F, 1, 1], "shape")])
            c.node("Add", [yy, bb], node.output[0])
        else:
            c.nodes[-1].output[0] = node.output[0]
        return True
    # zero insertion + stride-1 conv with the flipped, transposed filter
    cur = x
    if st != [1, 1]:
        # each strided axis n -> [n, 1] -> zero-padded to [n, s] -> n*s, trimmed to (n-1)*s + 1
        split, padded, lo_hi, axes, ends = [N, C], [N, C], [], [], []
        for i, n_ in enumerate((H, W)):
            split += [n_, 1] if st[i] > 1 else [n_]
            padded += [n_ * st[i]]
            lo_hi += [0, st[i] - 1] if st[i] > 1 else [0]
            if st[i] > 1:
                axes.append(2 + i)
                ends.append((n_ - 1) * st[i] + 1)
        r = len(split)
        t = c.node("Reshape", [x, c.i64(split, "shape")])
        t = c.node("Pad", [t, c.i64([0] * r + [0, 0] + lo_hi, "pads")])
        t = c.node("Reshape", [t, c.i64(padded, "shape")])
        cur = c.node("Slice", [t, c.i64([0] * len(axes), "starts"), c.i64(ends, "ends"),
                               c.i64(axes, "axes")])
    if wc is not None:
        # Wf[g*Fg + f, c, i, j] = W[g*Cg + c, f, kh-1-i, kw-1-j]
        Cg = C // g
        wg = wc.reshape(g, Cg, Fg, kh, kw)[:, :, :, ::-1, ::-1]
        wf = c.const(np.ascontiguousarray(wg.transpose(0, 2, 1, 3, 4).reshape(F, Cg, kh, kw)), "wflip")
    else:
        wf = _flip_runtime(c, w, ws, g)
    cp = [dl[i % 2] * (ks[i % 2] - 1) - pads[i] + (op_[i - 2] if i >= 2 else 0) for i in range(4)]
    crop = [max(0, -p) for p in cp]
    cp = [max(0, p) for p in cp]
    y = c.node("Conv", [cur, wf] + ([b] if b else []), pads=cp, dilations=dl, group=g,
               kernel_shape=ks)
    if any(crop):
        oh, ow = ys[2] + crop[0] + crop[2], ys[3] + crop[1] + crop[3]
        c.node("Slice", [y, c.i64([crop[0], crop[1]], "starts"),
                         c.i64([oh - crop[2], ow - crop[3]], "ends"), c.i64([2, 3], "axes")],
               node.output[0])
    else:
        c.nodes[-1].output[0] = node.output[0]
    return True


# ----------------------------------------------------------------------------------------------
_STAGES = [
    # (op types, rewrite): one pass each over the graph, shapes re-inferred in between
    ({"LRN": lrn, "ConvTranspose": None, "LpPool": None, "MaxPool": None, "AveragePool": None,
      "Conv": None}, "lift"),
    ({"LRN": lrn, "ConvTranspose": _conv_transpose, "LpPool": lppool, "Resize": _resize,
      "Pad": _pad, "MaxPool": maxpool_dilated}, "main"),
    ({"AveragePool": avgpool_dilated}, "avg"),
]


def rewrite_vision(model, names) -> int:
    """Apply the rewrites above to ``model`` (shape-inferred) in place; return how many nodes were
    rewritten. ``names``: the fresh-name generator of :mod:`.onnx_rewrite`."""
    import onnx

    count = 0
    for table, stage in _STAGES:
        graph = model.graph
        if not any(n.op_type in table and n.domain in ("", "ai.onnx") for n in graph.node):
            continue
        c = RewriteCtx(graph, names)
        changed = 0
        for node in graph.node:
            done = False
            if node.domain in ("", "ai.onnx") and node.op_type in table:
                if stage == "lift":
                    done = node.op_type != "LRN" and _lift_1d(node, c)
                else:
                    done = table[node.op_type](node, c)
            if not done:
                c.nodes.append(node)
            changed += bool(done)
        if changed:
            graph.ClearField("node")
            graph.node.extend(c.nodes)
            graph.initializer.extend(c.inits)
            if model.ir_version < 4:
                graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                                   for t in c.inits)
            count += changed
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
            model.graph.ClearField("value_info")
            model.graph.value_info.extend(inferred.graph.value_info)
    return count

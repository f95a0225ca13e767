"""torch-mlir's lowering pipeline (ONNX's ``torch`` import -> linalg on tensors), without its
shape refinement where that refinement has nothing to refine.

``torch-onnx-to-torch-backend-pipeline`` runs torch-mlir's shape refinement twice (reify the
shape functions of every op, inline them, canonicalize, simplify, drop them; ``torch-scalarize-
shapes`` between the two rounds). On a model whose ONNX shapes are all known that is ~3/4 of the
lowering's CPU (ResNet-50: ~0.6 of ~0.75 CPU-s) and changes nothing: every tensor already has its
static type. :func:`run` runs the same pipeline in three parts -- before the refinement, the
refinement, after it -- and skips the middle part when :func:`nothing_to_refine` holds after the
first: every tensor value that is used has a static shape and an element type, and every
non-tensor value (int, float, bool, none, list) is a ``torch.constant.*`` or a
``torch.prim.ListConstruct`` of such values or of tensors. Then no op's result type can become more precise, no
size, item or shape tensor feeds a shape computation for ``torch-scalarize-shapes`` to fold, and
the later canonicalizations see the same ops; and the module is one function without calls (the
refinement's ``inline`` inlines the functions torch-mlir makes of ONNX functions). ``test_light_pipeline_is_the_full_one`` lowers the
ONNX node tests and the bundled models both ways and requires the same text wherever the part is
skipped. :data:`SKIP_REFINEMENT` ``= False`` always runs it (the three parts are then exactly
torch-mlir's pipeline, split where it prints the refinement's first and last pass).
"""

from __future__ import annotations

#: the pipeline as torch-mlir defines it (what the three parts of :func:`parts` add up to)
PIPELINE = (
    "builtin.module(torch-onnx-to-torch-backend-pipeline,"
    "torch-backend-to-linalg-on-tensors-backend-pipeline)"
)
#: skip the shape refinement when :func:`nothing_to_refine` (False: always run it)
SKIP_REFINEMENT = True

_FIRST = "torch-reify-shape-calculations"  # the refinement's first pass ...
_AFTER = "torch-refine-public-return"      # ... and the first pass after it
_PARTS: list = []


def _split_top(body: str) -> list[str]:
    """The top-level comma-separated passes of a printed pipeline's body."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(body[start:i])
            start = i + 1
    out.append(body[start:])
    return out


def parts(ctx) -> tuple[str, str, str] | None:
    """(before, refinement, after): :data:`PIPELINE` as torch-mlir prints it (every pass with its
    options), cut before the first ``torch-reify-shape-calculations`` and before
    ``torch-refine-public-return``; None when the printed pipeline does not have that shape."""
    if _PARTS:
        return _PARTS[0]
    from torch_mlir.passmanager import PassManager

    with ctx:
        printed = str(PassManager.parse(PIPELINE))
    head = "builtin.module("
    res = None
    if printed.startswith(head) and printed.endswith(")"):
        passes = _split_top(printed[len(head):-1])
        names = [p.split("{", 1)[0].split("(", 1)[0] for p in passes]
        if names.count(_AFTER) == 1 and _FIRST in names:
            i, j = names.index(_FIRST), names.index(_AFTER)
            if 0 < i < j < len(passes):
                res = tuple(head + ",".join(passes[a:b]) + ")"
                            for a, b in ((0, i), (i, j), (j, len(passes))))
    _PARTS.append(res)
    return res


def _is_constant_scalar(op_name: str) -> bool:
    return op_name.startswith("torch.constant.")


def nothing_to_refine(module) -> bool:
    """True when torch-mlir's shape refinement cannot change ``module`` (the module doc): one
    function and no call; every used ``!torch.vtensor`` has a static shape and an element type,
    and every value of another type comes from a ``torch.constant.*`` op or is a
    ``torch.prim.ListConstruct`` of those or of tensors."""
    from torch_mlir.ir import WalkOrder, WalkResult

    ok = [True]

    funcs = [0]

    def visit(o):
        name = o.name
        if name == "func.func":
            funcs[0] += 1
        elif name.startswith("func.call"):  # the refinement's inliner inlines it
            ok[0] = False
            return WalkResult.INTERRUPT
        results = o.results
        if name == "torch.prim.ListConstruct":
            for v in o.operands:
                if str(v.type).startswith("!torch.vtensor<"):
                    continue  # a list of tensors (aten.cat): each is checked where it is made
                owner = v.owner
                if not (hasattr(owner, "name") and _is_constant_scalar(owner.name)):
                    ok[0] = False
                    return WalkResult.INTERRUPT
        for r in results:
            t = str(r.type)
            if t.startswith("!torch.vtensor<"):
                if "?" in t or not t.startswith("!torch.vtensor<[") or t.endswith("],unk>"):
                    if len(list(r.uses)) == 0:  # a dead value: nothing reads its shape
                        continue
                    ok[0] = False
                    return WalkResult.INTERRUPT
            elif t.startswith("!torch."):
                if not (_is_constant_scalar(name) or name == "torch.prim.ListConstruct"):
                    ok[0] = False
                    return WalkResult.INTERRUPT
            elif t.startswith("tensor<") or t in ("i1", "i64", "f32", "f64", "index"):
                continue  # builtin values: not refined by torch-mlir's shape functions
            else:
                ok[0] = False
                return WalkResult.INTERRUPT
        return WalkResult.ADVANCE

    module.operation.walk(visit, WalkOrder.PRE_ORDER)
    return ok[0] and funcs[0] == 1


def run(module, ctx) -> bool:
    """Run :data:`PIPELINE` on ``module`` (a ``torch`` module imported from ONNX) in ``ctx``;
    True when the shape refinement was skipped."""
    from torch_mlir.passmanager import PassManager

    cut = parts(ctx)
    with ctx:
        if cut is None:
            PassManager.parse(PIPELINE).run(module.operation)
            return False
        before, refine, after = cut
        PassManager.parse(before).run(module.operation)
        skip = SKIP_REFINEMENT and nothing_to_refine(module)
        if not skip:
            PassManager.parse(refine).run(module.operation)
        PassManager.parse(after).run(module.operation)
    return skip


__all__ = ["PIPELINE", "SKIP_REFINEMENT", "nothing_to_refine", "parts", "run"]

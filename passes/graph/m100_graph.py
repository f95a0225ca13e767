"""m100-graph: the named graph-level pipeline (ONNX/linalg in, classified linalg out)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.transforms.canonicalize import CanonicalizePass
from xdsl.transforms.dead_code_elimination import DeadCodeElimination

from m100.passes.graph.check_supported import CheckSupported
from m100.passes.graph.classify_ops import ClassifyOps
from m100.passes.graph.common import erase_dead
from m100.passes.graph.cse_weights import CseWeights
from m100.passes.graph.fold_batchnorm import FoldBatchnorm
from m100.passes.graph.fold_quantized_contractions import FoldQuantizedContractions
from m100.passes.graph.raise_quant_casts import RaiseQuantCasts
from m100.passes.graph.fold_constants import FoldConstants
from m100.passes.graph.fold_slice_reads import FoldSliceReads
from m100.passes.graph.fuse_dequant import FuseDequant
from m100.passes.graph.fuse_elementwise import FuseElementwise
from m100.passes.graph.fuse_epilogue import FuseEpilogue
from m100.passes.graph.fuse_predicates import FusePredicates
from m100.passes.graph.layout_nhwc import LayoutNhwc
from m100.passes.graph.lower_quantized_add import LowerQuantizedAdd
from m100.passes.graph.lower_quantized_avgpool import LowerQuantizedAvgpool
from m100.passes.graph.materialize_index import MaterializeIndex
from m100.passes.graph.recognize_idioms import RecognizeIdioms
from m100.passes.graph.simplify_algebra import SimplifyAlgebra
from m100.passes.graph.split_value_index import SplitValueIndex


@dataclass(frozen=True)
class M100Graph(ModulePass):
    """The graph pipeline: canonicalize, CSE/DCE, checks, folding, layout, idioms, fusion, units.

    What: runs, in order: canonicalize, cse-weights (xDSL's cse, a constant hashed by its ends),
    fold-constants, [raise-quant-casts, fold-quantized-contractions, lower-quantized-add, lower-quantized-avgpool],
    materialize-index, check-supported, simplify-algebra, [layout-nhwc, simplify-algebra (cancels the transposes between
    convolutions), fold-constants (packs transposed weights)], [fold-batchnorm], cse-weights, dce (+ removal of dead
    linalg/tensor ops, which xDSL's dce keeps), split-value-index, [recognize-idioms], [fuse-epilogue,
    fuse-dequant, fuse-elementwise, fold-slice-reads], fuse-predicates, classify-ops. Brackets: stages controlled by the options.
    Why: one name for "frontend output -> what the space-time scheduler consumes".
    Pre: func + linalg-on-tensors (what m100-opt reads from .onnx or .mlir).
    Post: the same values (every stage preserves semantics; the graph is still runnable by the
    reference executor); every computing op carries ``m100.unit`` (see docs/graph.md), fused
    epilogues and idiom groups are annotated; or one UnsupportedOpError diagnostic.
    Options: layout (default true), fold-bn (default true), idioms (default true), fuse (default true),
    quant (QDQ chains -> quant types and int8 contractions, default true),
    timing (print each stage's wall time to stderr, default false).
    """

    name = "m100-graph"
    layout: bool = True
    fold_bn: bool = True
    idioms: bool = True
    fuse: bool = True
    quant: bool = True
    timing: bool = False

    def stages(self) -> list[tuple[str, Callable[[Context, ModuleOp], object]]]:
        """The stages in order, as (name, apply)."""
        # cse-weights: xDSL's cse, a constant hashed by its type, length and ends (the same
        # decisions)
        s: list[ModulePass] = [CanonicalizePass(), CseWeights(), FoldConstants()]
        if self.quant:
            s += [RaiseQuantCasts(), FoldQuantizedContractions(), LowerQuantizedAdd(),
                  LowerQuantizedAvgpool()]
        s += [MaterializeIndex(), CheckSupported(), SimplifyAlgebra()]
        if self.layout:
            s += [LayoutNhwc(), SimplifyAlgebra(), FoldConstants()]
        if self.fold_bn:
            s.append(FoldBatchnorm())
        s += [CseWeights(), DeadCodeElimination()]
        out = [(p.name, p.apply) for p in s]
        out.append(("erase-dead", lambda ctx, m: erase_dead(m)))
        tail: list[ModulePass] = [SplitValueIndex()]
        if self.idioms:
            tail.append(RecognizeIdioms())
        if self.fuse:
            tail += [FuseEpilogue(), FuseDequant(), FuseElementwise(), FoldSliceReads()]
        tail += [FusePredicates(), ClassifyOps()]
        return out + [(p.name, p.apply) for p in tail]

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for name, run in self.stages():
            t0 = time.perf_counter()
            run(ctx, op)
            if self.timing:
                print(f"m100-graph: {name:<20} {time.perf_counter() - t0:8.3f} s",
                      file=sys.stderr)


__all__ = ["M100Graph"]

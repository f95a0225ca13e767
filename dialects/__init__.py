"""The m100 xDSL dialects: ``hbsm`` (buffers), ``twu`` (walks), ``sync`` (tokens, SU actions),
``tpb`` (instructions and program containers), ``quant`` (MLIR's uniform quantized types), ``tm_tensor`` (torch-mlir's sort, from ONNX TopK). ``M100_DIALECTS`` is what every tool loads
(``m100.context``); ``docs/dialects.md`` describes the syntax and the two IR levels."""

from .hbsm import HBSM
from .quant import Quant
from .tm_tensor import TMTensor
from .sync import SYNC
from .tpb import TPB
from .twu import TWU

M100_DIALECTS = [HBSM, TWU, SYNC, TPB, Quant, TMTensor]

__all__ = ["M100_DIALECTS", "HBSM", "TWU", "SYNC", "TPB", "Quant", "TMTensor"]

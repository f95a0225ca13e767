"""An ``onnx.backend.base.Backend`` that runs ONNX models through m100.

By default the whole stack: ``prepare(model)`` compiles the model to an M100 program with
:func:`m100.tools.driver.compile` (the function behind ``m100 compile``: torch-mlir import ->
``m100-pipeline`` -> program), and ``run(inputs)`` executes that program on the reference
interpreter (:func:`m100.tools.driver.run`, race and deadlock checks on). The numpy reference
executor of the frontend's linalg (no compilation) stays available as an explicit option::

    rep = M100Backend.prepare(model)                          # compiles once (machine m100)
    outputs = rep.run([x])                                    # numpy arrays, graph-output order
    rep = M100Backend.prepare(model, executor="reference")    # import only + numpy executor
    rep = M100Backend.prepare(model, machine="tiny", tpbs=2)  # any option of driver.compile

Graph inputs that ONNX defines as shape parameters (:data:`SHAPE_PARAMS`: Reduce ``axes``, Reshape
``shape``, Slice ``starts``...) and that are used only as such are bound to the values given to
``run`` and compiled then, one program per distinct value (``prepare(model, bind=False)`` compiles
them as runtime inputs, which the scheduler refuses for integer tensors).

:class:`M100ReferenceBackend` is the backend with ``executor="reference"``;
:class:`M100GraphBackend` the reference executor after the ``m100-graph`` pipeline. Errors: a model
the stack does not support raises an :class:`~m100.errors.M100Error` with a one-line message (from
``prepare``); an interpreter report (race, deadlock, fault) on a compiled program raises
:class:`InterpreterReport`, which is *not* an ``M100Error``: it is a compiler bug, never an
expected outcome. The node-test harness (``bench/node_tests.py``) classifies on exactly this.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

EXECUTORS = ("interpreter", "reference")

#: ONNX op type -> the input positions that ONNX defines as shape / axes parameters (a list of
#: integers or scales that decides the result's shape or which axes an op works on). Real models
#: carry them as constants (initializers, or Shape arithmetic that folds to constants); the ONNX node
#: tests pass them as graph inputs. :class:`M100Backend` binds such graph inputs to the values of
#: the ``run`` call (one compiled program per distinct set of values) when every use of the input
#: is at one of these positions; all other inputs go through the program.
SHAPE_PARAMS: dict[str, tuple[int, ...]] = {
    **{op: (1,) for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                           "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                           "ReduceSumSquare", "Squeeze", "Unsqueeze", "Reshape", "Expand", "Tile",
                           "Split", "TopK", "CenterCropPad", "Upsample", "CumSum", "CumProd", "Trilu",
                           "OneHot")},
    "Slice": (1, 2, 3, 4),
    "Pad": (1, 3),
    "Resize": (1, 2, 3),
    "ConstantOfShape": (0,),
    "Range": (0, 1, 2),
}


def shape_param_inputs(model) -> list[str]:
    """The graph inputs (not initializers) used only as :data:`SHAPE_PARAMS` of top-level nodes."""
    inits = {i.name for i in model.graph.initializer}
    graph_ins = [i.name for i in model.graph.input if i.name not in inits]
    uses: dict[str, list[bool]] = {}
    for node in model.graph.node:
        pos = SHAPE_PARAMS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ()
        for i, name in enumerate(node.input):
            if name:
                uses.setdefault(name, []).append(i in pos)
        for attr in node.attribute:  # a subgraph may read any outer value: never bind those
            for sub in list(attr.g.node if attr.HasField("g") else []) + \
                    [n for g in attr.graphs for n in g.node]:
                for name in sub.input:
                    uses.setdefault(name, []).append(False)
    outs = {o.name for o in model.graph.output}
    return [n for n in graph_ins if uses.get(n) and all(uses[n]) and n not in outs]


def empty_inputs(model) -> list[str]:
    """The graph inputs declared with a zero-size dimension: they carry no values (only a type,
    e.g. CastLike's ``target_type``), so binding them at compile time changes nothing."""
    inits = {i.name for i in model.graph.initializer}
    out = []
    for i in model.graph.input:
        tt = i.type.tensor_type
        if i.name not in inits and i.type.HasField("tensor_type") and tt.HasField("shape") and \
                any(d.HasField("dim_value") and d.dim_value == 0 for d in tt.shape.dim):
            out.append(i.name)
    return out


def bind_inputs(model, values: dict[str, np.ndarray]):
    """A copy of ``model`` with the graph inputs ``values`` turned into initializers."""
    import onnx
    from onnx import numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [i for i in m.graph.input if i.name not in values]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    for name, v in values.items():
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(v), name))
    return m


class InterpreterReport(RuntimeError):
    """The interpreter reported a race/deadlock/fault while running a compiled program."""


def graph_pipeline_pass():
    """The ``m100-graph`` ModulePass instance, or None while the graph passes do not exist."""
    try:
        from m100.passes.graph.m100_graph import M100Graph
    except ImportError:
        return None
    return M100Graph()


def compile_onnx(model, ctx=None, *, graph: bool = False):
    """Import ``model`` (path or ModelProto); with ``graph=True`` also run the m100-graph pipeline."""
    from m100.frontend.mlir_load import shared_context
    from m100.frontend.onnx_import import FrontendError, load_onnx

    ctx = ctx or shared_context()
    module = load_onnx(model, ctx)
    if graph:
        p = graph_pipeline_pass()
        if p is None:
            raise FrontendError("the m100-graph pipeline is not available (m100.passes.graph)")
        p.apply(ctx, module)
        module.verify()
    return module


def _backend_base():
    import onnx.backend.base as base

    return base


def _as_onnx_dtype(x: np.ndarray, dt: np.dtype | None) -> np.ndarray:
    """MLIR integers are signless and bf16 is computed as f32: give the ONNX output type back
    (uint8 <- i8 is a reinterpretation of the same bits; bfloat16 is a rounding of f32; int64 <-
    the narrowed i32; bool <- i8 0/1)."""
    if dt is None or x.dtype == dt:
        return x
    if dt.name.startswith(("float8", "float4")) and x.dtype.kind in "iu" and x.dtype.itemsize == 1:
        return x.view(dt)  # float8 / float4 held as its bits
    from m100.tools.program_io import NARROW_INTS

    if dt.name in NARROW_INTS and x.dtype.kind in "iu":  # int4/uint4/int2/uint2 held in a byte
        import ml_dtypes

        info = ml_dtypes.iinfo(dt)
        if x.dtype.kind == "i" and dt.name.startswith("u"):
            x = x.view(np.uint8) if x.dtype.itemsize == 1 else x
        if x.size and (int(x.min()) < int(info.min) or int(x.max()) > int(info.max)):
            raise ValueError(f"a {dt.name} output holds values outside its range")  # a bug
        return x.astype(dt)
    if x.dtype.kind in "iu" and dt.kind in "iu" and x.dtype.itemsize == dt.itemsize:
        return x.view(dt)
    if x.dtype.kind == "i" and dt.kind in "iu" and x.dtype.itemsize < dt.itemsize:
        if dt.kind == "u" and x.size and int(x.min()) < 0:  # inputs were range-checked
            raise ValueError("an unsigned output holds negative values")  # a compiler bug
        return x.astype(dt)  # i64 (u64, u32) computed as (checked) i32
    if x.dtype.kind == "i" and dt.kind == "b":
        if x.size and not np.isin(x, (0, 1)).all():
            raise ValueError("a boolean output holds values other than 0/1")  # a compiler bug
        return x.astype(bool)  # i1 held as i8 0/1
    if dt.name == "bfloat16" or dt.kind == "f":
        return x.astype(dt)
    return x




def _onnx_output_dtypes(model) -> list:
    from onnx import helper

    out = []
    for o in model.graph.output:
        try:
            out.append(np.dtype(helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type)))
        except Exception:  # noqa: BLE001 - unknown/unsupported element type: leave as computed
            out.append(None)
    return out


def _onnx_input_names(model) -> list[str]:
    inits = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


class M100BackendRep(_backend_base().BackendRep):
    """A prepared model. ``run(inputs)`` (list in graph-input order, dict by input name, or one
    array) returns the outputs in graph-output order, converted back to the ONNX output types."""

    def __init__(self, executor: str, input_names: Sequence[str], output_names: Sequence[str],
                 output_dtypes: Sequence[np.dtype | None] = (), *, module=None, compiled=None,
                 bound=None):
        self.executor = executor
        # (backend class, model, names of the shape-parameter inputs, prepare kwargs): compiled per
        # distinct value of those inputs in run() (:func:`shape_param_inputs`)
        self.bound = bound
        self._programs: dict = {}
        self.module = module  # the frontend's module (reference executor)
        self.compiled = compiled  # driver.CompileResult (interpreter)
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.output_dtypes = list(output_dtypes)

    def _ordered(self, inputs) -> list[np.ndarray]:
        if isinstance(inputs, dict):
            return [np.asarray(inputs[n]) for n in self.input_names]
        if isinstance(inputs, np.ndarray):
            return [inputs]
        return [np.asarray(x) for x in inputs]

    def _specialize(self, xs: list[np.ndarray]) -> tuple[M100BackendRep, list[np.ndarray]]:
        """The rep compiled with the shape-parameter inputs bound to their values in ``xs``, and
        the remaining inputs."""
        cls, model, params, kwargs = self.bound
        if len(xs) != len(self.input_names):
            from m100.tools import driver
            raise driver.DriverError(f"the model takes {len(self.input_names)} inputs, "
                                     f"{len(xs)} were given")
        vals = {n: x for n, x in zip(self.input_names, xs) if n in params}
        key = tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in sorted(vals.items()))
        if key not in self._programs:
            self._programs[key] = cls.prepare(bind_inputs(model, vals), bind=False, **kwargs)
        return self._programs[key], [x for n, x in zip(self.input_names, xs) if n not in params]

    def run(self, inputs, **kwargs):  # noqa: ANN001 - onnx's signature
        xs = self._ordered(inputs)
        if self.bound is not None:
            rep, rest = self._specialize(xs)
            return rep.run(rest, **kwargs)
        if self.executor == "reference":
            from m100.frontend.reference import run as ref_run
            from m100.tools.program_io import as_program_input
            outs = ref_run(self.module, [as_program_input(x) for x in xs])
        else:
            from m100.tools import driver
            if len(xs) != len(self.input_names):
                raise driver.DriverError(f"the model takes {len(self.input_names)} inputs, "
                                         f"{len(xs)} were given")
            res = driver.run(self.compiled.program, dict(zip(self.input_names, xs, strict=True)))
            if res.reports:
                raise InterpreterReport("; ".join(f"{r.kind}: {r.message}" for r in res.reports[:3]))
            outs = [res.outputs[n] for n in self.output_names]
        dts = self.output_dtypes + [None] * (len(outs) - len(self.output_dtypes))
        return tuple(_as_onnx_dtype(np.asarray(o), dt) for o, dt in zip(outs, dts))


class M100Backend(_backend_base().Backend):
    """ONNX backend: compile with ``driver.compile`` and run on the interpreter (default), or
    import only and run the numpy reference executor (``executor="reference"``).

    Class attributes are the defaults of ``prepare``'s keyword options: ``executor``,
    ``graph_pipeline`` (reference executor only: run m100-graph first), ``machine``, ``tpbs``,
    ``sync_mode``; any other keyword goes to ``driver.compile``."""

    executor = "interpreter"
    graph_pipeline = False
    machine = "m100"
    tpbs = 0
    sync_mode = "dataflow"

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs):  # noqa: ANN001
        super().prepare(model, device)
        bind = kwargs.pop("bind", True)
        executor = kwargs.get("executor", cls.executor)
        if executor not in EXECUTORS:
            raise ValueError(f"unknown executor '{executor}' (executors: {', '.join(EXECUTORS)})")
        names = _onnx_input_names(model)
        outs = [o.name for o in model.graph.output]
        dts = _onnx_output_dtypes(model)
        params = shape_param_inputs(model) + empty_inputs(model) if bind else []
        if params:  # compiled in run(), once the shape parameters' values are known
            return M100BackendRep(executor, names, outs, dts, bound=(cls, model, set(params), kwargs))
        kwargs.pop("executor", None)
        if executor == "reference":
            graph = kwargs.pop("graph_pipeline", cls.graph_pipeline)
            return M100BackendRep(executor, names, outs, dts, module=compile_onnx(model, graph=graph))
        from m100.tools import driver
        opts = {"machine": cls.machine, "tpbs": cls.tpbs, "sync_mode": cls.sync_mode} | kwargs
        cr = driver.compile(model, **opts)
        if cr.input_names != names or cr.output_names != outs:
            raise driver.DriverError(
                f"the compiled program's inputs/outputs ({', '.join(cr.input_names)} -> "
                f"{', '.join(cr.output_names)}) do not match the model's ({', '.join(names)} -> "
                f"{', '.join(outs)})")
        return M100BackendRep(executor, names, outs, dts, compiled=cr)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):  # noqa: ANN001
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


class M100ReferenceBackend(M100Backend):
    """:class:`M100Backend` on the numpy reference executor (import only, nothing compiled)."""

    executor = "reference"


class M100GraphBackend(M100ReferenceBackend):
    """The reference executor after the m100-graph pipeline (checks the graph rewrites)."""

    graph_pipeline = True


def _has_int4_dequantize(model) -> bool:
    from onnx import TensorProto
    g = getattr(model, "graph", None)
    if g is None:
        return False
    int4 = {t.name for t in g.initializer if t.data_type in (TensorProto.INT4, TensorProto.UINT4)}
    int4 |= {v.name for v in g.input
             if v.type.tensor_type.elem_type in (TensorProto.INT4, TensorProto.UINT4)}
    return any(n.op_type == "DequantizeLinear" and n.input and n.input[0] in int4
               for n in g.node)


def onnxruntime_run(model, inputs: Sequence[np.ndarray],
                    config: dict[str, str] | None = None) -> list[np.ndarray]:
    """The oracle: onnxruntime (CPU, single thread) on the same model and inputs; ``config``:
    extra session config entries (e.g. ``{"session.qdqisint8allowed": "1"}``)."""
    from m100.frontend.ort_session import ort_session

    config = dict(config or {})
    if _has_int4_dequantize(model):
        # onnxruntime fuses DequantizeLinear(int4) -> MatMul into MatMulNBits, which quantizes the
        # activations to int8 (~1 % off the ONNX definition): the oracle keeps the definition
        config["session.disable_quant_qdq"] = "1"
    sess = ort_session(model, config)
    feeds = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
    return sess.run(None, feeds)

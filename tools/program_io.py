"""A compiled program's inputs and outputs: the model's names for its symbols, input arrays as the
values the symbols hold, seeded random inputs, validation of given inputs, and running it on the
interpreter with outputs by the model's names.

Part of the end-to-end flow (:mod:`m100.tools.driver` re-exports these names). Names: the compiled
program's symbols are the model's names, or ``arg<i>`` / ``result<i>`` for MLIR input without them;
``compile`` records the model's names in the program metadata (:data:`META_INPUTS` /
:data:`META_OUTPUTS`, comma separated), and :func:`run` accepts and returns either.
"""

from __future__ import annotations

import numpy as np

from m100.errors import M100Error

#: program metadata keys: the model's input / output names (comma separated, in symbol order)
META_INPUTS = "m100.inputs"
#: the model's string inputs (received as int32 ids: frontend/onnx_rewrite_string.py)
META_STRINGS = "m100.string_inputs"
META_OUTPUTS = "m100.outputs"


class DriverError(M100Error):
    """A user error of the end-to-end flow (bad input file, bad inputs, unknown mode)."""


def _names(program, key: str, role: str) -> list[tuple[str, str]]:
    """[(model name, symbol name)] for the program's symbols of ``role``."""
    syms = [s.name for s in program.symbols if s.role == role]
    meta = program.metadata.get(key, "")
    model = meta.split(",") if meta else syms
    if len(model) != len(syms):
        model = syms
    return list(zip(model, syms, strict=True))


def syms_all(program) -> set[str]:
    return {s.name for s in program.symbols}


#: ml_dtypes' narrow integer types, held as int8 values (frontend/onnx_rewrite_narrow_int.py)
NARROW_INTS = ("int4", "uint4", "int2", "uint2")


def as_program_input(x: np.ndarray, dtype=None) -> np.ndarray:
    """An ONNX input array as the values the program's symbol of ``dtype`` (an ISA ``DType``;
    None: the symbol is an 8/16-bit integer) holds: an unsigned 8/16-bit array as the signless
    i8/i16 of the same bits (torch-mlir keeps ONNX's unsignedness in the ops -- extui, uitofp,
    fptoui -- not in the tensor type), int4/uint4/int2/uint2 as int8 values, float8/float4 as its bits.
    Anything else (and an unsigned array for a wider symbol: reinterpreting it would change its
    values) is returned unchanged, for the interpreter's range check."""
    bits = None if dtype is None else (dtype.bits if dtype.is_int else 0)
    if x.dtype.kind == "u" and x.dtype.itemsize in (1, 2) and bits in (None, 8 * x.dtype.itemsize):
        return x.view(np.dtype(f"i{x.dtype.itemsize}"))
    if bits in (None, 8):
        if x.dtype.name in NARROW_INTS:  # all values below 16
            return x.astype(np.int8)
        if x.dtype.name.startswith(("float8", "float4")) and x.dtype.itemsize == 1:  # its bits
            return x.view(np.int8)
    return x


def intern_strings(inputs: dict[str, np.ndarray], names) -> dict[str, np.ndarray]:
    """``inputs`` with the string arrays (numpy ``U``/``S``, or ``object`` of str/bytes) of the
    inputs ``names`` (the model's string inputs, :data:`META_STRINGS`) as int32 ids: one id per
    distinct string over all the arrays of this call, so that Equal of the ids is Equal of the
    strings (the frontend receives those inputs as int32: ``frontend/onnx_rewrite_string.py``).
    Other arrays are returned unchanged (a string array for a numeric input stays an error)."""
    ids: dict = {}
    out = {}
    for k, v in inputs.items():
        a = np.asarray(v)
        if k in names and (a.dtype.kind in "US" or (
                a.dtype == object and all(isinstance(x, (str, bytes)) for x in a.flat))):
            flat = [ids.setdefault(x, len(ids)) for x in a.reshape(-1).tolist()]
            a = np.asarray(flat, dtype=np.int32).reshape(a.shape)
        out[k] = a
    return out


def symbol_inputs(program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``inputs`` keyed by model names or symbol names -> keyed by symbol names, each as the
    values its symbol holds (:func:`as_program_input`)."""
    from m100.targets.m100.isa import DType

    dts = {s.name: DType(s.dtype) for s in program.symbols}
    out = {}
    pairs = _names(program, META_INPUTS, "input")
    known = {m: s for m, s in pairs} | {s: s for _, s in pairs}
    # weights compiled by shape are supplied by their (model) name like inputs
    known |= {s.name: s.name for s in program.symbols if s.role == "weight"}
    repeated = getattr(program, "repeat", None) is not None
    strings = set(filter(None, program.metadata.get(META_STRINGS, "").split(",")))
    if strings:
        inputs = intern_strings(inputs, strings | {known[s] for s in strings if s in known})
    for k, v in inputs.items():
        if repeated and k not in known and k.rpartition("@")[0] in syms_all(program):
            out[k] = np.asarray(v)  # a per-instance symbol of a repeated program (NAME@i)
            continue
        if k not in known:
            raise DriverError(f"unknown input '{k}'; the program's inputs are: "
                              + ", ".join(m for m, _ in pairs))
        out[known[k]] = as_program_input(np.asarray(v), dts.get(known[k]))
    return out


def run(program, inputs: dict[str, np.ndarray], *, random_latency: int | None = None,
        trace: bool = False, mode: str = "full", check_races: bool = True, machine=None,
        exact_input_dtypes: bool = False):
    """Run ``program`` on the interpreter; the Result's ``outputs`` are keyed by model names.

    ``machine``: the Machine the program was compiled for (default: the program's own, which a
    program file of a non-preset machine carries in its metadata). ``exact_input_dtypes``: an
    input that does not convert to its symbol's dtype without loss is an error (m100 run)."""
    from m100.sim.simulator import Simulator

    res = Simulator(program, machine, mode=mode, random_latency=random_latency,
                    check_races=check_races, trace=trace,
                    exact_input_dtypes=exact_input_dtypes).run(symbol_inputs(program, inputs))
    rename = {s: m for m, s in _names(program, META_OUTPUTS, "output")}
    res.outputs = {rename.get(k, k): v for k, v in res.outputs.items()}
    return res


def input_specs(program, model=None) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """[(model name, shape, numpy dtype)] of the program's inputs: the element types the ONNX
    ``model`` declares for them when given, else the numpy value type of each symbol's dtype
    (``m100.targets.m100.numerics.value_dtype``: bf16 values are held as float32)."""
    from m100.targets.m100.numerics import value_dtype

    syms = {s.name: s for s in program.symbols}
    declared: dict[str, np.dtype] = {}
    if model is not None:
        from onnx import helper
        for vi in model.graph.input:
            et = vi.type.tensor_type.elem_type
            try:
                declared[vi.name] = np.dtype(helper.tensor_dtype_to_np_dtype(et))
            except Exception:  # noqa: BLE001 - not a tensor type numpy knows
                raise DriverError(f"input '{vi.name}': element type {et} has no numpy "
                                  "equivalent") from None
    out = []
    for mname, sname in _names(program, META_INPUTS, "input"):
        s = syms[sname]
        out.append((mname, tuple(s.shape), declared.get(mname, value_dtype(s.dtype))))
    return out


def _random_array(rng, shape: tuple[int, ...], dt: np.dtype, name: str) -> np.ndarray:
    if dt.kind == "f" or dt.name == "bfloat16":
        return rng.standard_normal(shape).astype(np.float32).astype(dt)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind == "u":
        return rng.integers(0, 16, size=shape).astype(dt)
    if dt.kind == "i":
        return rng.integers(-8, 8, size=shape).astype(dt)
    raise DriverError(f"input '{name}': no random inputs for element type {dt}; "
                      "give the inputs with --inputs FILE.npz")


def index_bounds(model) -> dict[str, int]:
    """Integer graph inputs of ``model`` used as the indices of a Gather / GatherElements (also
    through a Cast): input name -> the size of the gathered axis of the data (the smallest if
    several). Node attribute ``axis`` and data shapes from ONNX shape inference."""
    import onnx
    from onnx import helper, shape_inference

    try:
        m = shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - an un-inferable model: no bounds (the defaults apply)
        m = model
    shapes: dict[str, list[int]] = {}
    for vi in list(m.graph.input) + list(m.graph.value_info) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = [d.dim_value for d in dims]
    for init in m.graph.initializer:
        shapes[init.name] = list(init.dims)
    alias = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "Cast"}
    inputs = {vi.name for vi in m.graph.input}
    out: dict[str, int] = {}
    for n in m.graph.node:
        if n.op_type not in ("Gather", "GatherElements") or len(n.input) < 2:
            continue
        src = n.input[1]
        while src in alias and src not in inputs:
            src = alias[src]
        data = shapes.get(n.input[0])
        if src not in inputs or not data:
            continue
        axis = next((helper.get_attribute_value(a) for a in n.attribute if a.name == "axis"), 0)
        size = data[axis % len(data)]
        out[src] = min(out.get(src, size), size)
    del onnx
    return out


def random_inputs(program, seed: int = 0, model=None) -> dict[str, np.ndarray]:
    """Seeded inputs keyed by model names, of the element type each input declares (the ONNX
    ``model``'s when given, see :func:`input_specs`): floats N(0, 1), signed integers uniform in
    [-8, 8), unsigned in [0, 16), booleans fair coins; integer indices of a Gather /
    GatherElements (:func:`index_bounds`) uniform over the gathered axis, ``[-n, n)`` (ONNX
    allows negative indices)."""
    rng = np.random.default_rng(seed)
    bounds = index_bounds(model) if model is not None else {}
    out = {}
    for n, shape, dt in input_specs(program, model):
        if n in bounds and dt.kind in "iu":
            lo = 0 if dt.kind == "u" else -bounds[n]
            out[n] = rng.integers(lo, bounds[n], size=shape).astype(dt)
        else:
            out[n] = _random_array(rng, shape, dt, n)
    return out


def validate_inputs(program, inputs: dict[str, np.ndarray], model=None,
                    source: str = "inputs") -> dict[str, np.ndarray]:
    """``inputs`` checked against the model's inputs (:func:`input_specs`): exactly its input
    names as keys, each of the declared shape and element type (nothing is converted). Raises
    :class:`DriverError` with one line naming ``source`` and what is wrong."""
    specs = input_specs(program, model)
    names = [n for n, _, _ in specs]
    missing = [n for n in names if n not in inputs]
    extra = sorted(k for k in inputs if k not in names)
    if missing:
        n, shape, dt = next(s for s in specs if s[0] == missing[0])
        raise DriverError(f"{source}: missing input '{n}' ({dt}{list(shape)}); it has: "
                          f"{', '.join(sorted(inputs)) or 'nothing'}")
    if extra:
        raise DriverError(f"{source}: unknown input(s) {', '.join(repr(k) for k in extra)}; the "
                          f"model's inputs are: {', '.join(names)}")
    out = {}
    for n, shape, dt in specs:
        v = np.asarray(inputs[n])
        if v.dtype != dt:
            raise DriverError(f"{source}: input '{n}' is {v.dtype}, the model declares {dt}")
        if tuple(v.shape) != shape:
            raise DriverError(f"{source}: input '{n}' has shape {list(v.shape)}, the model's is "
                              f"{list(shape)}")
        out[n] = v
    return out

"""``m100.deferred_imports``: ``m100 compile`` (the process's own command line) imports onnx's
element-type table and ml_dtypes without running them; a compile that reads them runs them then.

Oracles: a process that imports them as usual (onnx's table, element by element; the program,
sync certificate and dataflow certificate bytes of ``m100 compile`` with the switch off), and
``sys.modules`` of the compiling process (whether ml_dtypes' code ran)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# the table onnx builds from ml_dtypes, and what the deferral changes: np.dtype by name
_TABLE = textwrap.dedent("""
    import json, sys
    import numpy as np
    from m100 import deferred_imports
    deferred = sys.argv[1] == "on"
    if deferred:
        deferred_imports.defer()
    import onnx
    import ml_dtypes
    out = {"ran_after_import": deferred_imports.executed("ml_dtypes"),
           "mapping_ran_after_import": deferred_imports.executed("onnx._mapping")}
    try:
        np.dtype("bfloat16")
        out["by_name_before_a_read"] = True
    except TypeError:
        out["by_name_before_a_read"] = False
    out["bound_on_package"] = onnx._mapping is sys.modules["onnx._mapping"]
    out["table"] = {str(k): [str(v.np_dtype), v.storage_dtype, v.name]
                    for k, v in onnx._mapping.TENSOR_TYPE_MAP.items()}
    out["bf16"] = str(onnx.helper.tensor_dtype_to_np_dtype(onnx.TensorProto.BFLOAT16))
    out["same_object"] = onnx.helper.tensor_dtype_to_np_dtype(16) == np.dtype(ml_dtypes.bfloat16)
    out["by_name_after"] = str(np.dtype("bfloat16"))
    out["ran_at_end"] = deferred_imports.executed("ml_dtypes")
    print(json.dumps(out))
""")


def _table(mode: str) -> dict:
    p = subprocess.run([sys.executable, "-c", _TABLE, mode], capture_output=True, text=True,
                       check=True)
    return json.loads(p.stdout)


def test_deferred_modules_run_on_first_read_with_the_same_table():
    on, off = _table("on"), _table("off")
    assert on["ran_after_import"] is False and on["mapping_ran_after_import"] is False
    assert off["ran_after_import"] is True and off["mapping_ran_after_import"] is True
    # the one difference, documented in the module: numpy knows the name only once it ran
    assert on["by_name_before_a_read"] is False and off["by_name_before_a_read"] is True
    assert on["ran_at_end"] is True
    for k in ("bound_on_package", "table", "bf16", "same_object", "by_name_after"):
        assert on[k] == off[k], k
    assert on["bound_on_package"] is True and on["same_object"] is True
    assert len(on["table"]) >= 20


_CLI = textwrap.dedent("""
    import atexit, sys
    from m100 import deferred_imports
    from m100.tools import m100_cli
    from m100.frontend import onnx_import
    m100_cli.DEFER_IMPORTS = sys.argv.pop(1) == "on"
    onnx_import.PREPARE_IN_CHILD = sys.argv.pop(1) == "child"
    report = sys.argv.pop(1)
    atexit.register(lambda: open(report, "w").write(
        str(deferred_imports.executed("ml_dtypes"))))
    sys.argv[0] = "m100"
    sys.exit(m100_cli.main())  # no argv: the process's own command line (process_ends)
""")


def _float_model(path):
    import numpy as np
    from onnx import TensorProto as T, helper, numpy_helper, save

    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]),
                           helper.make_node("Relu", ["m"], ["y"])], "f",
                          [helper.make_tensor_value_info("x", T.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [4, 8])], [w])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def _narrow_model(path):
    """A bf16 weight and input, and a float8 input cast to f32: the frontend reads ml_dtypes
    (onnx's table for the bf16 initializer, the float8 decoding table)."""
    import ml_dtypes
    import numpy as np
    from onnx import TensorProto as T, helper, save

    rng = np.random.default_rng(0)
    w = rng.uniform(-4, 4, (4, 16)).astype(ml_dtypes.bfloat16)
    wi = helper.make_tensor("w", T.BFLOAT16, [4, 16], w.view(np.uint16).tobytes(), raw=True)
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"]),
         helper.make_node("Cast", ["q"], ["z"], to=T.FLOAT)], "n",
        [helper.make_tensor_value_info("x", T.BFLOAT16, [4, 16]),
         helper.make_tensor_value_info("q", T.FLOAT8E4M3FN, [16, 16])],
        [helper.make_tensor_value_info("y", T.BFLOAT16, [4, 16]),
         helper.make_tensor_value_info("z", T.FLOAT, [16, 16])], [wi])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), path)


@pytest.mark.parametrize("build, reads", [(_float_model, False), (_narrow_model, True)],
                         ids=["float", "bf16-float8"])
def test_compile_command_same_bytes_with_and_without(tmp_path, build, reads):
    """Both ways, with the ONNX preparation in this process and in the forked torch-mlir child
    (``onnx_import.PREPARE_IN_CHILD``, session 34: the bf16 / float8 reads of the preparation
    then run ml_dtypes in the child, which inherits the deferral; this process's report says
    nothing about them)."""
    model = tmp_path / "m.onnx"
    build(model)
    files = {}
    for where in ("parent", "child"):
        for mode in ("off", "on"):
            key = f"{where}-{mode}"
            out, report = tmp_path / f"{key}.m100", tmp_path / f"{key}.ran"
            subprocess.run([sys.executable, "-c", _CLI, mode, where, str(report), "compile",
                            str(model), "-o", str(out), "--machine", "tiny", "--tpbs", "2"],
                           check=True, capture_output=True, text=True)
            files[key] = [p.read_bytes() for p in
                          (out, tmp_path / f"{key}.m100.cert.json",
                           tmp_path / f"{key}.m100.dataflow.json")]
            # off: imported as usual; on: ran only if this process read it
            if where == "parent" or not reads:
                assert report.read_text() == str(mode == "off" or reads)
    assert len({tuple(f) for f in files.values()}) == 1


def test_defer_leaves_an_imported_module_alone():
    code = textwrap.dedent("""
        import sys, ml_dtypes
        from m100 import deferred_imports
        print(deferred_imports.defer(("ml_dtypes", "onnx._mapping")))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "['onnx._mapping']"

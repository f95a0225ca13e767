# lit configuration for the m100 FileCheck suite. Run with `make test-lit` (puts .venv/bin on PATH).
import os
import shutil

import lit.formats

config.name = "m100"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".asm", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py", "Inputs"]
config.environment["PATH"] = os.environ.get("PATH", "")
# Pass the Python environment through so the console scripts find their venv.
for var in ("VIRTUAL_ENV", "HOME", "PYTHONPATH"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
config.substitutions.append(("%python", shutil.which("python") or "python3"))
config.substitutions.append(("%inputs", os.path.join(os.path.dirname(__file__), "Inputs")))
for tool in ("m100-opt", "m100-translate", "m100-sim", "m100", "filecheck"):
    if shutil.which(tool) is None:
        lit_config.warning(f"{tool} not on PATH; tests that use it will fail")

"""Maps each top-level folder of the repository into the ``m100`` import package.

``m100.dialects`` <- ``dialects/``, ``m100.passes`` <- ``passes/`` ... Sub-packages (folders with an
``__init__.py``) are found automatically. Everything else lives in pyproject.toml.
"""
from setuptools import find_packages, setup

ROOTS = ("dialects", "passes", "targets", "sim", "tools", "frontend")

packages = ["m100"]
package_dir = {"m100": "m100"}
for root in ROOTS:
    package_dir[f"m100.{root}"] = root
    packages.append(f"m100.{root}")
    packages += [f"m100.{root}.{sub}" for sub in find_packages(where=root)]

setup(packages=packages, package_dir=package_dir)

"""m100 passes (``m100.passes``).

Every ``ModulePass`` subclass defined in a module below this package is discovered by
:func:`m100.passes.registry.all_passes` and offered by ``m100-opt``; see ``registry.py`` for the
conventions (one pass per file, ``name`` = file name in kebab-case, a docstring on every pass).
Named pipelines (``m100-graph``, ``m100-pipeline``) are ordinary passes that run others.
"""

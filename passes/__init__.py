"""m100 passes (``m100.passes``).

Every pass is listed in :data:`m100.passes.registry.PASSES` and offered by ``m100-opt``; see
``registry.py`` for the conventions (one pass per file, ``name`` = file name in kebab-case, a docstring on every pass).
Named pipelines (``m100-graph``, ``m100-pipeline``) are ordinary passes that run others.
"""

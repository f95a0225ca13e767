"""Graph-level passes (func + linalg-on-tensors in, annotated linalg out); see docs/graph.md.

One pass per module: fold-constants, simplify-algebra, layout-nhwc, split-value-index, recognize-idioms,
fuse-epilogue, check-supported, classify-ops, and the named pipeline m100-graph.
``common.py`` holds the shared helpers and the annotation attribute names.
"""

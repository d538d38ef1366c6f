"""The studies of mmposenc: one folder each, with its driver, its results and its README.

Not part of the package (no wheel ships this folder): run a driver from the repository root as
a module, ``python -m projects.<study>.<driver>`` (see projects/README.md).
"""

"""Depth analyses from the cache: which layer knows what, and how deep each example or token needs to go.

Works from a cache alone, like :mod:`layercache.heads` and :mod:`layercache.probes`: expected
layer of scalar-mix weights, cumulative scoring, prediction depth, per-token ACT depth by token
category, layer similarity (CKA) and the logit lens. See ARCHITECTURE.md.
"""

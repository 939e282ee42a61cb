"""The frozen model: loading it from the hub or a folder, its fingerprint, and how its tokenizer treats words.

Only :mod:`layercache.extraction` and :mod:`layercache.live` import this package; heads, probes,
depth analyses and reports work from the cache and never load a model.
"""

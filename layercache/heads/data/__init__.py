"""What a head reads from a cache: the source (token states or pooled vectors) and the check that the states are
finite. (The seeded validation slice of a training split, which the probes share, is
:func:`layercache.core.holdout.validation_slice`.)"""

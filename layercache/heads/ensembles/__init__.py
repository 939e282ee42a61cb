"""Heads that predict with the average of several fitted heads: the ensemble model, validation passes combined,
and seed and member ensembles of fitted heads."""

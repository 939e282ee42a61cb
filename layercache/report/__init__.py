"""Human summaries of caches and runs: ``info``, metrics tables, layer-weight bars and plots."""

"""The torch modules a head is made of: the head model (the mixers of :mod:`..mixers` under one task head per task),
the task heads, their self-attention and dropout, and the normalisation of the states before mixing."""

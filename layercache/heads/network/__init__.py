"""The torch modules a head is made of: the head model (the mixers of :mod:`..mixers` under one task head per task),
the task heads and their self-attention; built from :mod:`..blocks` (dropout, the states' normalisation)."""

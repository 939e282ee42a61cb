"""The pieces every torch module of a head is built from, below the mixers and the head model that both use them:
dropout with a cheap CPU mask (:mod:`.dropout`) and the normalisation of cached states before mixing
(:mod:`.normalize`)."""

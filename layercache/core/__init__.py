"""The neutral bottom layer: types and helpers every other package may import, importing none of them.

Label tasks and the ignore index (:mod:`.tasks`), the package version (:mod:`.version`) and
human-readable units (:mod:`.units`), and the gate every write inside a folder layercache owns goes
through (:mod:`.confine`). Nothing here imports torch, transformers or h5py.
"""

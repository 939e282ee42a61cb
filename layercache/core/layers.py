"""Layer specs: which hidden states a user means, resolved the same way everywhere.

A spec names a state (``"layer_3"``, ``"embeddings"``) or indexes it (``0`` = embeddings,
``-1`` = last); an index may be written as a string (``"3"``, ``"-1"``), as on the command
line. The extractor keeps a sorted set of states (``sort=True``); the cache reader and the live
feed keep the order the user gave (``sort=False``), repeats included.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Sequence
from typing import Union

from ..errors import ConfigError

LayerSpec = Union[int, str]
"""A state's name, or its index among the states (negative from the end)."""

NOT_IN = "Layer {layer!r} is not in {owner}, which has {names} (or give an index from {low} to {high})."
"""The refusal of a spec that names no state of ``owner`` (a cache, a backbone)."""
DOES_NOT_EXIST = "Layer {layer!r} does not exist; the model has {names} (or indices {low} to {high})."
"""The extractor's refusal of a spec that names no state of the model."""

_INDEX_TEXT = re.compile(r"-?\d+")


def parse_layer_spec(text: str) -> LayerSpec:
    """A command-line value as a spec: ``"-1"`` -> ``-1``, ``"layer_3"`` stays a name."""
    return int(text) if _INDEX_TEXT.fullmatch(text) else text


def resolve_layers(layers: LayerSpec | Sequence[LayerSpec] | None, names: Sequence[str], owner: str = "the states",
                   *, sort: bool = False, refusal: str = NOT_IN) -> list[int]:
    """Positions in ``names`` of the states ``layers`` means; ``None`` means all of them.

    Each spec is a name in ``names`` (names win over indices), or an index from ``-len(names)``
    to ``len(names) - 1``, as an integer or a string of one. ``sort=False`` keeps the order given
    (repeats too); ``sort=True`` gives the sorted set. A spec that matches nothing raises
    :class:`~layercache.errors.ConfigError` worded by ``refusal`` (:data:`NOT_IN` names
    ``owner``; :data:`DOES_NOT_EXIST` speaks of the model); an empty list is refused too.
    """
    if layers is None:
        return list(range(len(names)))
    if isinstance(layers, (str, numbers.Integral)):
        layers = [layers]
    out = []
    for layer in layers:
        index = names.index(layer) if isinstance(layer, str) and layer in names else _as_index(layer)
        if index is None or not -len(names) <= index < len(names):
            raise ConfigError(refusal.format(layer=layer, owner=owner, names=", ".join(names), low=-len(names),
                                             high=len(names) - 1))
        out.append(index % len(names))
    if not out:
        raise ConfigError("layers is empty; name at least one state.")
    return sorted(set(out)) if sort else out


def _as_index(layer: object) -> int | None:
    """The index a spec spells (``3``, ``numpy.int64(3)``, ``"3"``, ``" -1"``), or ``None``; never a bool."""
    if isinstance(layer, bool):
        return None
    if isinstance(layer, numbers.Integral):
        return int(layer)
    if isinstance(layer, str):
        try:
            return int(layer)
        except ValueError:
            return None
    return None

"""The one reading of a ``--device`` value, for the backbone and the heads alike."""

from __future__ import annotations

from ..errors import ConfigError
from .option_names import option
from .option_specs import Flag

FORWARD_DTYPE_NAMES = ("float32", "float16", "bfloat16")
"""Dtypes the backbone's forward pass may run in (``--dtype``; ``auto`` picks one per device)."""
DEFAULT_DEVICE = "auto"
"""Every ``device=`` keyword's default (and ``--device``'s): a GPU when torch sees one, else the CPU."""
DEVICE_SPELLINGS = "auto, cpu or cuda[:N]"
"""The values :func:`resolve_device` reads, as its messages and ``--device``'s help write them."""
DEVICE_FLAG = Flag("--device", f"{DEVICE_SPELLINGS}.")
"""``--device``, of every command that computes with torch (the backbone's in
:class:`~layercache.extraction.specs.BatchSpec`, the head's in :class:`~layercache.heads.head_options.HeadOptions`)."""
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
"""The placements ``--device-map`` takes (accelerate's strategies): see :mod:`layercache.backbone.placement`."""


def resolve_device(device: str):
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; ``cpu`` and ``cuda[:N]`` as given.

    Returns a ``torch.device``. A CUDA device that torch cannot see, or anything else, is a
    :class:`~layercache.errors.ConfigError` naming the values that work.
    """
    import torch  # here, so that importing layercache.core never loads torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device != "cpu" and not device.startswith("cuda"):
        raise ConfigError(f"Device {device!r} is not understood; use {DEVICE_SPELLINGS}.")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"{option('device', 'cuda')} was asked for, but torch sees no CUDA GPU; use "
                          f"{option('device', 'cpu')} or auto.")
    try:
        return torch.device(device)
    except RuntimeError:
        raise ConfigError(f"Device {device!r} is not understood; use {DEVICE_SPELLINGS}.") from None


def check_max_memory(device_map: str | None, max_memory) -> None:
    """Refuse ``max_memory`` without ``device_map``: only a split model has per-device limits (else ignored)."""
    if max_memory and device_map is None:
        raise ConfigError(f"{option('max_memory')} limits what {option('device_map')} puts on each device, and no "
                          f"{option('device_map')} was given, so the limits would be ignored; add "
                          f"{option('device_map', 'auto')} (or leave {option('max_memory')} out).")

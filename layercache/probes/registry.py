"""Probe families by name, for the command line and configuration files.

A probe family is a class in its own module of this package, decorated with
:func:`register_probe`; this registry imports every module of the package when first asked, so
adding a probe is adding one file (and its test). Each class is a scikit-learn style estimator
whose ``fit`` takes a cache and the split to learn from (a probe that selects hyper-parameters
takes a validation split too).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TypeVar

from ..errors import ConfigError

PROBES: dict[str, type] = {}
"""Name -> probe class, in the order the modules registered them (complete once :func:`probe_names` ran)."""

_Probe = TypeVar("_Probe", bound=type)


def register_probe(name: str):
    """Class decorator: list the probe family under ``name`` (``@register_probe("linear")``)."""

    def register(cls: _Probe) -> _Probe:
        if PROBES.get(name, cls) is not cls:
            raise TypeError(f"two probes are registered as {name!r}: {PROBES[name].__name__} and {cls.__name__}")
        PROBES[name] = cls
        return cls

    return register


def _load_probes() -> None:
    """Import every module of this package, so each probe family has registered itself."""
    package = importlib.import_module(__package__)
    for module in sorted(m.name for m in pkgutil.iter_modules(package.__path__)):
        importlib.import_module(f"{__package__}.{module}")


def probe_names() -> list[str]:
    """Every registered probe family's name (for CLI choices)."""
    _load_probes()
    return list(PROBES)


def probe_class(name: str) -> type:
    """The probe class registered as ``name``."""
    _load_probes()
    try:
        return PROBES[name]
    except (KeyError, TypeError):
        raise ConfigError(f"Unknown probe {name!r}; choose one of {', '.join(sorted(PROBES))}.") from None

"""Probe families by name, for the command line and configuration files.

A probe family is a :class:`~.base.Probe` subclass in its own module of this package, decorated with
:func:`register_probe`; this registry imports every module of the package when first asked, so
adding a probe is adding one file (and its test). Each class is a scikit-learn style estimator
whose ``fit`` takes a cache and the split to learn from (a probe that selects hyper-parameters
takes a validation split too).
"""

from __future__ import annotations

from ..core.registry import Registry
from .base import Probe

PROBES: Registry[type] = Registry("probe", __package__, first=("linear", "mdl", "cumulative"))
"""Name -> probe class (a :class:`~.base.Probe`): linear, mdl, cumulative, then any other module's alphabetically
(complete once :func:`probe_names` ran). The probe report fits every one on every task it applies to."""


def register_probe(name: str):
    """Class decorator: list the probe family under ``name`` (``@register_probe("linear")``).

    Only a :class:`~.base.Probe` subclass is listed: the probe report builds and fits every
    registered family through that base, so anything else is refused when its module is imported.
    """
    def register(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, Probe)):
            raise TypeError(f"@register_probe({name!r}) takes a Probe subclass (layercache.probes.base.Probe), "
                            f"not {getattr(cls, '__name__', cls)!r}")
        return PROBES.add(name, cls)
    return register


def probe_names() -> list[str]:
    """Every registered probe family's name (for CLI choices)."""
    return PROBES.names()


def probe_class(name: str) -> type:
    """The probe class registered as ``name``."""
    return PROBES.lookup(name)

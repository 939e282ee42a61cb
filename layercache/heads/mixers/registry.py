"""The registry of layer mixers: every mixer by name, and building one from a spec.

Each mixer lives in its own module of this package and registers its class with
:func:`~layercache.heads.mixers.base.register_mixer`. The mixers of this package are declared in :data:`DECLARED`
(name -> its module and its spec's argument), so that their names and spec forms are read without importing a
mixer module, nor torch: ``--help`` lists them. A declared mixer's module is imported when its class is first asked
for (:func:`make_mixer` builds it); registering a class that contradicts its declaration is a ``TypeError``. A module
of this package that declares nothing here is imported whenever the names are listed, so adding a mixer is still
adding one file (declaring it keeps ``--help`` from importing it). :data:`MIXERS` lists the declared mixers in their
order, then any other module's in alphabetical order; the CLI takes its choices from :func:`mixer_names` and
:func:`mixer_spec_forms`.

This module imports no torch.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from layercache.core.registry import Registry, import_modules
from layercache.errors import ConfigError

if TYPE_CHECKING:
    from layercache.heads.mixers.base import LayerMixer


@dataclass(frozen=True)
class Declared:
    """A mixer of this package as it is listed before its module is imported."""

    module: str
    """The module of this package that defines and registers it (``select``)."""
    spec_argument: str | None = None
    """Its :attr:`~layercache.heads.mixers.base.LayerMixer.spec_argument`: the placeholder of what its spec gives
    after a colon (``<i>`` for ``layer:<i>``), None for a spec that is the name alone."""


DECLARED: dict[str, Declared] = {
    "last": Declared("select"),  # the baseline leads the list
    "layer": Declared("select", "<i>"),
    "scalar": Declared("scalar"),
    "adaptive": Declared("adaptive"),
    "attention": Declared("attention"),
    "gumbel": Declared("gumbel"),
    "act": Declared("act"),
}
"""The mixers of this package in the order they are listed (choices, help, messages, a sweep's candidates)."""
NOT_MIXERS = ("base", "registry")
"""Modules of this package that hold no mixer."""


def spec_form(name: str, spec_argument: str | None) -> str:
    """How a mixer's spec is written in lists of choices and messages: ``scalar``, ``layer:<i>``."""
    return name if spec_argument is None else f"{name}:{spec_argument}"


class MixerRegistry(Registry["type[LayerMixer]"]):
    """Every mixer class by name (a mapping, in :data:`DECLARED`'s order, then any other module's alphabetically).

    Listing the names (:meth:`names`, iterating, ``in``) and their spec forms (:meth:`spec_form`) imports no
    declared mixer's module; reading a class (``MIXERS[name]``, ``values()``, ``items()``) imports its module.
    """

    def __init__(self, declared: Mapping[str, Declared]) -> None:
        super().__init__("mixer", __name__.rpartition(".")[0],
                         first=list(dict.fromkeys(d.module for d in declared.values())), skip=NOT_MIXERS)
        self.declared = dict(declared)

    def add(self, name: str, entry: Any) -> Any:
        """List the class ``entry`` under ``name``; a ``TypeError`` if it contradicts the declaration of ``name``."""
        known = self.declared.get(name)
        if known is not None:
            declared = (f"{self.package}.{known.module}", spec_form(name, known.spec_argument))
            found = (entry.__module__, entry.spec_form())
            if found != declared:
                raise TypeError(f"the mixer {name!r} is declared as {declared[1]} in {declared[0]} "
                                f"(registry.DECLARED), but {entry.__name__} is {found[1]} in {found[0]}")
        elif entry.__module__ in {f"{self.package}.{module}" for module in self.first}:
            raise TypeError(f"the mixer {name!r} ({entry.__name__}) is in {entry.__module__}, a module of "
                            "registry.DECLARED: declare it there too, or the list of mixers would miss it")
        return super().add(name, entry)

    def names(self) -> list[str]:
        """Every mixer's name, in order: the declared ones without importing their modules, then those any other
        module of the package registers (imported now)."""
        modules = [m.__name__ for m in import_modules(self.package, skip=(*self.first, *self.skip))]
        rank = {name: i for i, name in enumerate(modules)}
        others = [name for name in self._entries if name not in self.declared]
        others.sort(key=lambda name: rank.get(getattr(self._entries[name], "__module__", ""), len(rank)))
        return [*self.declared, *others]

    def spec_form(self, name: str) -> str:
        """How the spec of the mixer ``name`` is written (its declaration's, or its class's when undeclared)."""
        known = self.declared.get(name)
        if known is not None:
            return spec_form(name, known.spec_argument)
        return self[name].spec_form()

    def __getitem__(self, name: str) -> type[LayerMixer]:
        if name not in self._entries:
            known = self.declared.get(name)
            if known is not None:
                importlib.import_module(f"{self.package}.{known.module}")  # registers it
            else:
                self.names()  # imports the modules that declare nothing here
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"


MIXERS: MixerRegistry = MixerRegistry(DECLARED)
"""Every mixer by name, in :data:`DECLARED`'s order, then any other module's alphabetically."""


def mixer_names() -> list[str]:
    """The registry's names, for CLI choices (``layer`` takes an index: ``layer:<i>``)."""
    return MIXERS.names()


def mixer_spec_forms() -> list[str]:
    """How each mixer's spec is written, in registry order: ``last``, ``layer:<i>``, ``scalar`` ..."""
    return [MIXERS.spec_form(name) for name in MIXERS.names()]


def pooled_mixer_forms() -> list[str]:
    """The mixers that read one pooled vector as they read every token, as messages name them."""
    return [cls.pooled_form for cls in MIXERS.values() if cls.pooled_form is not None]


def usage_labels() -> dict[str, str]:
    """Every registered mixer's usage summaries: key in a run's JSON -> the label a report prints."""
    return {key: label for cls in MIXERS.values() for key, label in cls.usage_labels.items()}


def per_token_depth_mixers() -> list[str]:
    """The mixers whose heads have a per-token depth (:attr:`LayerMixer.per_token_depth`), in registry order."""
    return [name for name, cls in MIXERS.items() if cls.per_token_depth]


def _spec_help() -> str:
    """The known specs, comma-separated, for error messages."""
    return ", ".join(mixer_spec_forms())


def make_mixer(spec: str, n_states: int, dim: int, **options: Any) -> LayerMixer:
    """Build the mixer named by ``spec`` for ``n_states`` cached states of width ``dim``.

    ``spec`` is a registry name (``last``, ``scalar``, ``adaptive``, ``attention``, ``gumbel``,
    ``act``) or ``layer:<i>`` (0 = embeddings, negative from the end). ``options`` are the mixer's
    keyword arguments (e.g. ``k=64, alpha=70`` for ``adaptive``). Raises ``ConfigError`` (a
    ``ValueError``) for an unknown spec, a bad index or an option the mixer does not take.
    """
    if not isinstance(spec, str):
        raise ConfigError(f"mixer spec must be a string, got {spec!r}; known: {_spec_help()}")
    name, sep, arg = spec.strip().partition(":")
    name = name.strip().lower()
    if name not in MIXERS:
        raise ConfigError(f"unknown mixer {spec!r}; known: {_spec_help()}")
    cls = MIXERS[name]
    if sep and cls.spec_argument is None:
        with_argument = ", ".join(c.spec_form() for c in MIXERS.values() if c.spec_argument is not None)
        raise ConfigError(f"mixer {name!r} takes no ':<argument>' (got {spec!r}); only {with_argument} does")
    options = cls.spec_options(spec, arg if sep else None, options)
    params = inspect.signature(cls.__init__).parameters.values()
    valid = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(
            f"mixer {name!r} does not take option(s) {', '.join(unknown)}; "
            f"valid: {', '.join(valid) if valid else 'none'}"
        )
    return cls(n_states, dim, **options)


def mixer_from_config(config: dict[str, Any]) -> LayerMixer:
    """Rebuild a mixer (untrained) from :meth:`LayerMixer.get_config`; load its state dict next."""
    missing = {"spec", "n_states", "dim"} - set(config)
    if missing:
        raise ConfigError(
            f"mixer config lacks {', '.join(sorted(missing))}; it needs spec, n_states, dim, options"
        )
    return make_mixer(config["spec"], config["n_states"], config["dim"], **config.get("options", {}))

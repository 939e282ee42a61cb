"""The registry of layer mixers: every mixer by name, and building one from a spec.

Each mixer lives in its own module of this package and registers its class with
:func:`~layercache.heads.mixers.base.register_mixer`; this module imports every module of the
package, so adding a mixer is adding one file. :data:`MIXERS` lists them in the order of
``MODULE_ORDER``, then any other module's in alphabetical order; the CLI takes its choices from
:func:`mixer_names` and :func:`mixer_spec_forms`.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from layercache.errors import ConfigError
from layercache.heads.mixers.base import REGISTERED, LayerMixer

#: Mixer modules in the order their mixers are listed (choices, help, messages); a module not
#: named here is listed after them.
MODULE_ORDER = ("select", "scalar", "adaptive", "attention", "gumbel", "act")
#: Modules of this package that hold no mixer.
NOT_MIXERS = ("base", "registry")


def _load_mixers() -> dict[str, type[LayerMixer]]:
    """Import every mixer module of this package and return the registered mixers by name, in order."""
    package = importlib.import_module(__package__)
    found = {m.name for m in pkgutil.iter_modules(package.__path__)} - set(NOT_MIXERS)
    order = [*(name for name in MODULE_ORDER if name in found), *sorted(found - set(MODULE_ORDER))]
    modules = [f"{__package__}.{name}" for name in order]
    for module in modules:
        importlib.import_module(module)
    rank = {module: i for i, module in enumerate(modules)}
    # Stable: mixers of one module keep the order that module registered them in.
    mixers = sorted(REGISTERED, key=lambda cls: rank.get(cls.__module__, len(rank)))
    out: dict[str, type[LayerMixer]] = {}
    for cls in mixers:
        if cls.name in out:
            raise TypeError(f"two mixers are registered as {cls.name!r}: {out[cls.name].__name__} and {cls.__name__}")
        out[cls.name] = cls
    return out


MIXERS: dict[str, type[LayerMixer]] = _load_mixers()


def mixer_names() -> list[str]:
    """The registry's names, for CLI choices (``layer`` takes an index: ``layer:<i>``)."""
    return list(MIXERS)


def mixer_spec_forms() -> list[str]:
    """How each mixer's spec is written, in registry order: ``last``, ``layer:<i>``, ``scalar`` ..."""
    return [cls.spec_form() for cls in MIXERS.values()]


def pooled_mixer_forms() -> list[str]:
    """The mixers that read one pooled vector as they read every token, as messages name them."""
    return [cls.pooled_form for cls in MIXERS.values() if cls.pooled_form is not None]


def usage_labels() -> dict[str, str]:
    """Every registered mixer's usage summaries: key in a run's JSON -> the label a report prints."""
    return {key: label for cls in MIXERS.values() for key, label in cls.usage_labels.items()}


def _spec_help() -> str:
    """The known specs, comma-separated, for error messages."""
    return ", ".join(mixer_spec_forms())


def make_mixer(spec: str, n_states: int, dim: int, **options) -> LayerMixer:
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


def mixer_from_config(config: dict) -> LayerMixer:
    """Rebuild a mixer (untrained) from :meth:`LayerMixer.get_config`; load its state dict next."""
    missing = {"spec", "n_states", "dim"} - set(config)
    if missing:
        raise ConfigError(
            f"mixer config lacks {', '.join(sorted(missing))}; it needs spec, n_states, dim, options"
        )
    return make_mixer(config["spec"], config["n_states"], config["dim"], **config.get("options", {}))

"""The registry of layer mixers: every mixer by name, and building one from a spec.

Each mixer lives in its own module of this package and registers its class with
:func:`~layercache.heads.mixers.base.register_mixer`; this module imports every module of the
package, so adding a mixer is adding one file. :data:`MIXERS` lists them in the order of
``base.MODULE_ORDER``, then any other module's in alphabetical order; the CLI takes its choices from
:func:`mixer_names` and :func:`mixer_spec_forms`.
"""

from __future__ import annotations

import inspect

from layercache.core.registry import Registry
from layercache.errors import ConfigError
from layercache.heads.mixers.base import MIXERS as _REGISTERED
from layercache.heads.mixers.base import LayerMixer

MIXERS: Registry[type[LayerMixer]] = _REGISTERED.load()
"""Every mixer by name, in the order of ``base.MODULE_ORDER``, then any other module's alphabetically."""


def mixer_names() -> list[str]:
    """The registry's names, for CLI choices (``layer`` takes an index: ``layer:<i>``)."""
    return MIXERS.names()


def mixer_spec_forms() -> list[str]:
    """How each mixer's spec is written, in registry order: ``last``, ``layer:<i>``, ``scalar`` ..."""
    return [cls.spec_form() for cls in MIXERS.values()]


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

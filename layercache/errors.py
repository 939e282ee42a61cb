"""The few exception types layercache raises for bad input or a bad cache.

Every error a user can cause derives from :class:`LayercacheError`; its message is one sentence
that names the problem and the fix. The CLI prints that sentence and exits with code 2, so a
user never sees a traceback for their own mistake. Bugs in layercache itself stay ordinary
exceptions, with their traceback.
"""

from __future__ import annotations


class LayercacheError(Exception):
    """Base class: a problem with the user's input, environment or cache, explained in one sentence."""


class ConfigError(LayercacheError, ValueError):
    """An option has a value layercache cannot use (the message lists the valid ones)."""


class ModelLoadError(LayercacheError):
    """The backbone or its tokenizer could not be found or loaded."""


class DatasetError(LayercacheError):
    """The dataset could not be found, read, or understood (missing columns, empty, unlabelled)."""


class CacheError(LayercacheError):
    """A cache folder is missing, incomplete, corrupted, or does not match what was asked for."""


class TaskError(ConfigError, CacheError):
    """A label task asked for is not among those a cache or dataset has, or it has no labels at all.

    Both a :class:`ConfigError` (the name asked for) and a :class:`CacheError` (what the cache holds),
    as the lookups it unifies raised one or the other.
    """


class SourceError(ConfigError, CacheError):
    """The features a task needs (token states for a token task) are not in the cache.

    Both a :class:`ConfigError` and a :class:`CacheError`: the two choices of ``source="auto"`` it
    unifies raised one or the other.
    """


class CacheMismatchError(CacheError):
    """An existing cache was written with another configuration (model, tokenizer, data, storage)."""


class CacheLockedError(CacheError):
    """Another process is writing the same cache folder (the message names it)."""


class CacheWriteError(CacheError, OSError):
    """The cache folder cannot be written: read-only, full, or not a folder."""


class InsufficientDiskError(LayercacheError, OSError):
    """The cache would not fit in the free space of its target disk."""


class NonFiniteStatesError(CacheError):
    """NaN or inf among hidden states: the model produced them while a cache was extracted (the message names
    split, row and layer), or a cache holds them where a head reads (states or regression labels; the message names
    the split and state, and how to re-extract)."""


class UnsafePathError(LayercacheError):
    """A path layercache would write, rename or delete leads through a link, or is a FIFO, device or folder."""


class OutputWriteError(LayercacheError, OSError):
    """A file layercache writes outside a cache (predictions, a live bundle) cannot be written where it was asked."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run that writes a folder, after it cleaned up: the message says what was kept and what next.

    A ``KeyboardInterrupt`` (not a :class:`LayercacheError`): it still ends the program as Ctrl-C does,
    and the CLI prints its message in place of the extraction's resume hint.
    """

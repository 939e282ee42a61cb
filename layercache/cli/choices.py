"""Where each option's list of accepted values comes from: the registry or constant of its concept.

Help texts never spell a list out: :func:`choice_help` writes ``One of: a, b, c.`` from
:data:`OPTION_CHOICES`, and ``tests/cli/test_choices.py`` checks that every such list equals its
registry and that the library accepts every value listed. Looking a list up imports only the
module that owns it (no model library), so ``layercache --help`` stays quick.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def _store_modes() -> Sequence[str]:
    from ..store.schema import STORE_MODES

    return STORE_MODES


def _pooling_modes() -> Sequence[str]:
    from ..store.schema import POOLING_MODES

    return POOLING_MODES


def _projection_bases() -> Sequence[str]:
    from ..store.schema import PROJECTION_BASES

    return PROJECTION_BASES


def _compressions() -> Sequence[str]:
    from ..store.compression import COMPRESSIONS

    return COMPRESSIONS


def _storage_dtypes() -> Sequence[str]:
    from ..store.storage import codec_names

    return ("auto", *codec_names())


def _forward_dtypes() -> Sequence[str]:
    from ..core.devices import FORWARD_DTYPE_NAMES

    return ("auto", *FORWARD_DTYPE_NAMES)


def _forward_dtype_names() -> Sequence[str]:
    from ..core.devices import FORWARD_DTYPE_NAMES

    return FORWARD_DTYPE_NAMES


def _task_kinds() -> Sequence[str]:
    from ..core.tasks import TASK_KINDS

    return TASK_KINDS


def _mixers() -> Sequence[str]:
    from ..heads.mixers.registry import mixer_spec_forms

    return mixer_spec_forms()


def _mixer_names() -> Sequence[str]:
    from ..heads.mixers.registry import mixer_names

    return mixer_names()


def _normalizations() -> Sequence[str]:
    from ..heads.head_options import NORMALIZATIONS

    return NORMALIZATIONS


def _schedules() -> Sequence[str]:
    from ..heads.head_options import SCHEDULES

    return SCHEDULES


def _selection_metrics() -> Sequence[str]:
    from ..heads.scoring.selection import metric_names

    return metric_names()


def _solvers() -> Sequence[str]:
    from ..heads.head_options import solver_names

    return solver_names()


def _sources() -> Sequence[str]:
    from ..store.feature_source import source_spellings

    return source_spellings()


def _sweep_picks() -> Sequence[str]:
    from ..heads.sweeps.sweep_options import PICKS

    return tuple(PICKS)


OPTION_CHOICES: dict[tuple[str, str], Callable[[], Sequence[str]]] = {
    ("extract", "--store"): _store_modes,
    ("extract", "--pooling"): _pooling_modes,
    ("extract", "--storage-dtype"): _storage_dtypes,
    ("extract", "--project-basis"): _projection_bases,
    ("extract", "--compression"): _compressions,
    ("extract", "--dtype"): _forward_dtypes,
    ("extract", "--task-kind"): _task_kinds,
    ("plan", "--store"): _store_modes,
    ("plan", "--pooling"): _pooling_modes,
    ("plan", "--storage-dtype"): _storage_dtypes,
    ("plan", "--dtype"): _forward_dtypes,
    ("plan", "--task-kind"): _task_kinds,
    ("train-head", "--mixer"): _mixers,
    ("train-head", "--normalize"): _normalizations,
    ("train-head", "--schedule"): _schedules,
    ("train-head", "--source"): _sources,
    ("train-head", "--metric"): _selection_metrics,
    ("train-head", "--solver"): _solvers,
    ("sweep", "--mixer"): _mixer_names,
    ("sweep", "--metric"): _selection_metrics,
    ("sweep", "--pick"): _sweep_picks,
    ("verify", "--dtype"): _forward_dtype_names,
}
"""(command, option) -> the values it accepts, read from the registry that owns them."""


def choices(command: str, option: str) -> tuple[str, ...]:
    """The values ``option`` of ``command`` accepts, in the registry's order."""
    return tuple(OPTION_CHOICES[command, option]())


def choice_help(command: str, option: str, lead: str, after: str = "") -> str:
    """``"<lead> One of: a, b, c.<after>"``: an option's help with its registry's values."""
    return f"{lead} One of: {', '.join(choices(command, option))}.{(' ' + after) if after else ''}"


def supported_files() -> str:
    """The local data files ``extract`` reads, as the data-source registry lists them."""
    from ..sources.registry import SUPPORTED_FILES

    return SUPPORTED_FILES

"""Command-line options made from the fields of an options spec (:mod:`layercache.core.option_specs`).

A command takes a whole spec with one parameter whose default is :func:`spec_options`::

    @app.command()
    @friendly
    @takes_specs("extract")
    def extract(model: str = ..., data: DataSpec = spec_options(DataSpec), ...):

:func:`takes_specs` puts, in that parameter's place, one typer option (or argument) per field of the spec that has a
:class:`~layercache.core.option_specs.Flag`, in the spec's order: the flag, its help (with the values its registry
accepts, :mod:`.choices`), its default as typed. When the command runs, the typed values are read into the field's
values (:data:`READERS`) and the command receives the spec itself. So an option is declared once, on the spec, for
every command that takes the spec and for the library's keywords alike.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import Field, dataclass, replace
from pathlib import Path
from typing import Any, Optional

import typer

from ..core.extraction_defaults import DEFAULT_DATASET
from ..core.option_specs import Flag, field_default, field_flag, spec_fields
from .choices import OPTION_CHOICES, choice_help, supported_files
from .parsing import (
    layer_specs,
    parse_assignments,
    parse_class_weight,
    parse_loss_weights,
    parse_max_memory,
    parse_max_train,
    parse_metric,
    parse_size,
    parse_splits,
    size_text,
    split_list,
)


def _listed(value: list[str] | None, typed: Mapping[str, Any], default: Any, flag: Flag) -> Any:
    """Repeats and commas (``--pooling mean,first``); none typed: the field's default (a tuple as a list)."""
    return split_list(value) or (list(default) if isinstance(default, tuple) else default)


def _dataset(value: str | None, typed: Mapping[str, Any], default: Any, flag: Flag) -> str:
    """DATASET, or none with ``--split NAME=PATH`` files (the files are the data), else the default."""
    return value or ("" if parse_splits(typed.get("splits"))[1] else default)


READERS: dict[str, Callable[[Any, Mapping[str, Any], Any, Flag], Any]] = {
    "list": _listed,
    "layers": lambda value, typed, default, flag: layer_specs(value) or default,
    "splits": lambda value, typed, default, flag: parse_splits(value)[0],
    "split_files": lambda value, typed, default, flag: parse_splits(typed.get("splits"))[1],
    "size": lambda value, typed, default, flag: parse_size(value),
    "max_memory": lambda value, typed, default, flag: parse_max_memory(value, typed.get("device_map")),
    "dataset": _dataset,
    "max_train": lambda value, typed, default, flag: parse_max_train(value),
    "assignments": lambda value, typed, default, flag: parse_assignments(value, flag.spelling),
    "loss_weights": lambda value, typed, default, flag: parse_loss_weights(value) or default,
    "metric": lambda value, typed, default, flag: parse_metric(value),
    "class_weight": lambda value, typed, default, flag: parse_class_weight(value),
}
"""A flag's reader -> ``(typed value, every typed value of the spec by field, the field's default, the flag)`` ->
the field's value. Every reader refuses what it cannot read in one sentence (:mod:`.parsing`)."""

TYPED_AS: dict[str, Any] = {"list": Optional[list[str]], "layers": Optional[list[str]], "splits": Optional[list[str]],
                            "max_memory": Optional[list[str]], "size": str, "dataset": Optional[str],
                            "max_train": str, "assignments": Optional[list[str]], "loss_weights": Optional[list[str]],
                            "metric": Optional[list[str]], "class_weight": Optional[list[str]]}
"""A reader -> the type the command line parses its text as."""
PLAIN_TYPES: dict[str, Any] = {"str": str, "str | None": Optional[str], "int": int, "int | None": Optional[int],
                               "bool": bool, "float": float, "float | None": Optional[float],
                               "str | os.PathLike | None": Optional[Path]}
"""A field's annotation -> its type on the command line, for a flag without a reader."""


@dataclass(frozen=True)
class SpecOptions:
    """The placeholder of a spec parameter (:func:`spec_options`)."""

    spec: type
    skip: tuple[str, ...] = ()
    changes: Mapping[str, Mapping[str, Any]] | None = None
    only: tuple[str, ...] | None = None


def spec_options(spec: type, *, skip: Sequence[str] = (), only: Sequence[str] | None = None,
                 **changes: Mapping[str, Any]) -> Any:
    """The default of a command's parameter that takes ``spec`` whole: its options are made from the spec's flags
    (see :func:`takes_specs`). ``skip``: fields this command does not take (they keep their defaults), or ``only``:
    the fields it takes; ``changes``: a field -> flag attributes worded for this command (``store={"help": "Your
    choice of what to keep.", "after": ""}``)."""
    return SpecOptions(spec, tuple(skip), changes or {}, None if only is None else tuple(only))


def takes_specs(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Expand every :func:`spec_options` parameter of a typer command into its spec's options (see the module
    docstring); ``command`` names the command in help texts and in :data:`~.choices.OPTION_CHOICES`."""

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(function)
        parameters: list[inspect.Parameter] = []
        groups: dict[str, tuple[SpecOptions, list[tuple[Field[Any], Flag]]]] = {}
        for parameter in signature.parameters.values():
            holder = parameter.default
            if not isinstance(holder, SpecOptions):
                parameters.append(parameter)
                continue
            declared = _declared(holder)
            groups[parameter.name] = (holder, declared)
            seen: set[str] = set()
            for spec_field, spec_flag in declared:
                if spec_flag.name in seen:  # a second field read from the same typed value (--split)
                    continue
                seen.add(spec_flag.name)
                parameters.append(inspect.Parameter(spec_field.name, inspect.Parameter.KEYWORD_ONLY,
                                                    default=_typer_parameter(command, spec_field, spec_flag),
                                                    annotation=_typed_as(spec_field, spec_flag)))
        # every parameter by keyword, in order (typer passes them so): the spec's options stay where it stood
        in_order = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in parameters]

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for name, (holder, declared) in groups.items():
                typed = {f.name: kwargs.get(f.name) for f, _ in declared}
                values = {f.name: _read(f, flag_, typed) for f, flag_ in declared}
                for spec_field, _ in declared:
                    kwargs.pop(spec_field.name, None)
                kwargs[name] = holder.spec(**values)
            return function(*args, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=in_order)  # type: ignore[attr-defined]
        # what typer resolves: the spec parameters are gone (a copy: wraps shares the function's own dict)
        wrapper.__annotations__ = {k: v for k, v in function.__annotations__.items() if k not in groups}
        return wrapper

    return decorate


def field_option(spec: type, name: str, command: str = "") -> Any:
    """The typer option of one field of ``spec``, for a command that takes that option alone (``--device`` of
    ``train-head``, declared on :class:`~layercache.extraction.specs.BatchSpec`)."""
    spec_field = next(f for f in spec_fields(spec) if f.name == name)
    spec_flag = field_flag(spec_field)
    if spec_flag is None:
        raise ValueError(f"{spec.__name__}.{name} has no command-line flag")
    return _typer_parameter(command, spec_field, spec_flag)


def _declared(holder: SpecOptions) -> list[tuple[Field[Any], Flag]]:
    """The spec's fields this command types, each with its flag as worded for the command."""
    out = []
    for spec_field in spec_fields(holder.spec):
        spec_flag = field_flag(spec_field)
        if spec_flag is None or spec_field.name in holder.skip or (
                holder.only is not None and spec_field.name not in holder.only):
            continue
        change = (holder.changes or {}).get(spec_field.name)
        out.append((spec_field, replace(spec_flag, **change) if change else spec_flag))
    return out


def _typer_parameter(command: str, spec_field: Field[Any], spec_flag: Flag) -> Any:
    """The typer option (or argument) of one field, as ``command`` words it."""
    lead = spec_flag.help.format(command=command, default=DEFAULT_DATASET, files=supported_files()
                                 if "{files}" in spec_flag.help else "")
    if (command, spec_flag.name) in OPTION_CHOICES:
        text = choice_help(command, spec_flag.name, lead, spec_flag.after)
    else:
        text = " ".join(part for part in (lead, spec_flag.after) if part)
    default = field_default(spec_field)
    if spec_flag.typed_default is not None:
        typed_default = spec_flag.typed_default
    elif spec_flag.reader == "size":
        typed_default = size_text(default)
    elif spec_flag.reader is not None:
        typed_default = None  # a list (or DATASET) typed empty is read to the field's default
    elif spec_flag.negated:
        typed_default = not default  # --separate-mixers is off: share_mixer True
    else:
        typed_default = default
    if spec_flag.argument:
        return typer.Argument(typed_default, help=text)
    if spec_flag.show_default is None:
        return typer.Option(typed_default, spec_flag.name, help=text)
    return typer.Option(typed_default, spec_flag.name, help=text, show_default=spec_flag.show_default)


def _typed_as(spec_field: Field[Any], spec_flag: Flag) -> Any:
    """The type the command line parses the field's text as."""
    if spec_flag.reader is not None:
        return TYPED_AS[spec_flag.reader]
    return PLAIN_TYPES[str(spec_field.type)]


def _read(spec_field: Field[Any], spec_flag: Flag, typed: Mapping[str, Any]) -> Any:
    """The field's value from what was typed."""
    value = typed.get(spec_field.name)
    if spec_flag.reader is None:
        return not value if spec_flag.negated else value
    return READERS[spec_flag.reader](value, typed, field_default(spec_field), spec_flag)

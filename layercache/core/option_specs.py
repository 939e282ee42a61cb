"""One declaration per option: a field of a typed options spec says how the command line spells it.

An options spec is a frozen dataclass (:class:`~layercache.extraction.specs.StorageSpec` and its siblings). Each of
its options is one field made by :func:`option_field`: the field's name, type and default are the library's keyword,
and its :class:`Flag` is the command line's: the flag, its help, how the typed text becomes the field's value. The
command line makes its options from the flags (:mod:`layercache.cli.spec_options`), the library its keywords from
the fields (:func:`spec_from_keywords`), so a new option is one field and the two cannot drift
(``tests/cli/test_spec_options.py`` holds them, and the README's option table, together).

This module holds no command-line code: a flag names its text reader (``"size"``, ``"list"``) and the command line
owns the readers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, TypeVar

from ..errors import ConfigError
from .option_names import DeclaredFlag, command_line, declare_flag

T = TypeVar("T")

FLAG = "layercache.flag"
"""The metadata key of a field's :class:`Flag`."""


@dataclass(frozen=True)
class Flag:
    """How one option of a spec is typed on the command line."""

    name: str
    """The flag: ``--storage-dtype``."""
    help: str
    """Its help: a sentence, then (where the command line lists the values a registry accepts) the list, then
    :attr:`after`. ``{command}`` is replaced by the command's name (``Split to {command} (hub)``)."""
    after: str = ""
    """Help after the list of accepted values (what each means)."""
    reader: str | None = None
    """How the typed text becomes the field's value: a reader of :data:`layercache.cli.spec_options.READERS`
    (``size``: ``256MiB``; ``list``: repeats and commas; ``layers``, ``splits``, ``max_memory``, ``dataset``); None:
    typed as the field's own type."""
    typed_default: Any = None
    """The default as typed (``"256MiB"``) where it differs from the field's; None: the field's (a list option is
    typed empty and read to the field's default)."""
    show_default: str | bool | None = None
    """What ``--help`` shows as the default, where not the default itself (``the model's``)."""
    argument: bool = False
    """A positional argument (DATASET), not a flag."""
    negated: bool = False
    """The flag turns the field off: ``--separate-mixers`` sets ``share_mixer`` False."""

    @property
    def spelling(self) -> str:
        """The flag as a message names it: ``--train-act`` of ``--train-act/--no-train-act``."""
        return self.name.split("/")[0]


@dataclass(frozen=True)
class Constraint:
    """A rule an option's value must follow (scikit-learn's parameter constraints): ``test`` passes, or the
    value is refused with ``"<option> <requirement>, got <value>."``."""

    test: Callable[[Any], bool]
    requirement: str
    """What the value must be, after the option's name: ``must be at least 1``."""


def at_least(low: float, *, whole: bool = False, optional: bool = False) -> Constraint:
    """A number of at least ``low`` (``whole``: a whole number; ``optional``: or None, the option left out)."""
    return Constraint(lambda v: (optional and v is None) or (_number(v) and v >= low
                                                             and (not whole or isinstance(v, int))),
                      f"must be at least {low:g}" + (" (a whole number)" if whole else ""))


def positive(*, optional: bool = False) -> Constraint:
    """A number above 0 (``optional``: or None, the option left out)."""
    return Constraint(lambda v: (optional and v is None) or (_number(v) and v > 0), "must be positive")


def fraction(*, open_low: bool = False, closed_high: bool = False) -> Constraint:
    """A fraction in ``[0, 1)`` (``open_low``: ``(0, 1)``; ``closed_high``: up to 1 itself)."""
    low, high = "(" if open_low else "[", "]" if closed_high else ")"
    return Constraint(lambda v: _number(v) and (v > 0 if open_low else v >= 0) and (v <= 1 if closed_high else v < 1),
                      f"is a fraction in {low}0, 1{high}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def option_field(default: Any, flag: Flag | None = None, *, keyword: str | None = None,
                 check: Constraint | None = None) -> Any:
    """A spec field with ``default``, typed on the command line as ``flag`` (None: a library keyword only).

    ``keyword``: the library's flat keyword when it is not the field's name (``DataSpec.config`` is
    ``extract(dataset_config=...)``, beside the model's own configuration). ``check``: the rule its value follows
    (:func:`check_options`).
    """
    return field(default=default, metadata={FLAG: flag, "keyword": keyword, "check": check})


def option_spec(spec: type[T] | None = None, *, shared: bool = True) -> Any:
    """Register the flags of the options dataclass ``spec`` by keyword (a class decorator, above
    ``@dataclass(frozen=True)``), so that a message names the flag of any declared option (``--shard-size`` for
    ``shard_bytes``). Two specs that spell one keyword's flag differently are refused: a message could name only
    one. ``@option_spec(shared=False)``: a spec whose keywords other specs own too (a lens's ``epochs`` beside a
    head's); its flags are named only by its own refusals (:func:`check_options`), and not registered."""
    if spec is None:
        return lambda made: option_spec(made, shared=shared)
    if not shared:
        return spec
    for spec_field in spec_fields(spec):
        spec_flag = field_flag(spec_field)
        if spec_flag is None or spec_flag.argument:
            continue
        declare_flag(field_keyword(spec_field), DeclaredFlag(spec_flag.spelling, spec_flag.negated),
                     f"{spec.__name__}.{spec_field.name}")
    return spec


def check_options(spec: type, values: Mapping[str, Any]) -> None:
    """Refuse, in one sentence naming the option, the first of ``values`` (by field name; fields left out are not
    checked) that breaks its field's :class:`Constraint`."""
    for spec_field in spec_fields(spec):
        constraint: Constraint | None = spec_field.metadata.get("check")
        if constraint is None or spec_field.name not in values:
            continue
        value = values[spec_field.name]
        if not constraint.test(value):
            spec_flag = field_flag(spec_field)
            name = spec_flag.spelling if command_line() and spec_flag is not None else field_keyword(spec_field)
            raise ConfigError(f"{name} {constraint.requirement}, got {value!r}.")


def spec_fields(spec: type) -> list[Field[Any]]:
    """The fields of ``spec``, in order."""
    return list(fields(spec))


def field_flag(spec_field: Field[Any]) -> Flag | None:
    """The :class:`Flag` of a spec field, or None for a keyword the command line does not type."""
    return spec_field.metadata.get(FLAG)


def field_keyword(spec_field: Field[Any]) -> str:
    """The library's flat keyword of a spec field: its name unless the field says otherwise."""
    return spec_field.metadata.get("keyword") or spec_field.name


def field_default(spec_field: Field[Any]) -> Any:
    """The default of a spec field."""
    if spec_field.default is not MISSING:
        return spec_field.default
    if spec_field.default_factory is not MISSING:
        return spec_field.default_factory()
    raise ConfigError(f"The option {spec_field.name} has no default.")


def spec_from_keywords(spec: type, given: Any, keywords: Mapping[str, Any], argument: str) -> Any:
    """``given`` itself (a ``spec``), or a ``spec`` built from the flat ``keywords`` (by :func:`field_keyword`)
    when ``given`` is None.

    A flat value that differs from its default next to a spec is refused: the two would disagree.
    """
    values = {f.name: keywords[field_keyword(f)] for f in spec_fields(spec)}
    if given is None:
        return spec(**values)
    if not isinstance(given, spec):
        raise ConfigError(f"{argument}= takes a {spec.__name__}, not {type(given).__name__}.")
    changed = [field_keyword(f) for f in spec_fields(spec)
               if _comparable(values[f.name]) != _comparable(field_default(f))]
    if changed:
        raise ConfigError(f"Pass {', '.join(changed)} inside {argument}={spec.__name__}(...), not beside it.")
    return given


def _comparable(value: Any) -> Any:
    """Lists and tuples compare by their items: ``["mean"]`` is the default ``("mean",)``."""
    return tuple(value) if isinstance(value, (list, tuple)) else value

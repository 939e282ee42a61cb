"""Every fixed list of values the CLI shows comes from the registry that owns it, and the library takes each one."""

from __future__ import annotations

import re

import click
import pytest
import typer.main

from layercache.cli import app
from layercache.cli.choices import OPTION_CHOICES, choices
from layercache.core.devices import FORWARD_DTYPE_NAMES
from layercache.core.tasks import TASK_KINDS, LabelTask
from layercache.heads.fitting import SOLVERS
from layercache.heads.mixers import MIXERS, make_mixer
from layercache.heads.normalize import NORMALIZATIONS, resolve_normalize
from layercache.heads.selection import SELECTION_METRICS, requested_metrics
from layercache.heads.sweep import PICKS
from layercache.heads.trainer import SCHEDULES
from layercache.sources.registry import FILE_SOURCES, SUPPORTED_FILES
from layercache.store.schema import POOLING_MODES, STORAGE_DTYPE_NAMES, STORE_MODES

LISTED = re.compile(r"One of: ([^.]*)\.")


def command_options() -> dict[tuple[str, str], click.Parameter]:
    """(command, longest option name) -> the click parameter, for every option of every command."""
    group = typer.main.get_command(app)
    return {(name, max(param.opts, key=len)): param
            for name, command in group.commands.items() for param in command.params}


def listed_in_help(param: click.Parameter) -> list[str] | None:
    match = LISTED.search(param.help or "")
    return None if match is None else match.group(1).split(", ")


def test_every_listed_choice_is_in_the_table_and_every_entry_is_listed():
    params = command_options()
    with_lists = {key for key, param in params.items() if listed_in_help(param) is not None}
    assert with_lists == set(OPTION_CHOICES)  # no option spells a list of its own
    for key in OPTION_CHOICES:
        assert listed_in_help(params[key]) == list(choices(*key)), key


@pytest.mark.parametrize(("key", "registry"), [
    (("extract", "--store"), STORE_MODES),
    (("extract", "--pooling"), POOLING_MODES),
    (("extract", "--storage-dtype"), ("auto", *STORAGE_DTYPE_NAMES)),
    (("extract", "--dtype"), ("auto", *FORWARD_DTYPE_NAMES)),
    (("extract", "--task-kind"), TASK_KINDS),
    (("train-head", "--normalize"), NORMALIZATIONS),
    (("train-head", "--schedule"), SCHEDULES),
    (("train-head", "--source"), ("auto", "tokens", *(f"pooled:{m}" for m in POOLING_MODES))),
    (("train-head", "--metric"), tuple(SELECTION_METRICS)),
    (("train-head", "--solver"), tuple(SOLVERS)),
    (("sweep", "--mixer"), tuple(MIXERS)),
    (("sweep", "--metric"), tuple(SELECTION_METRICS)),
    (("sweep", "--pick"), tuple(PICKS)),
])
def test_lists_equal_their_registry(key, registry):
    assert choices(*key) == tuple(registry)


def test_every_registered_mixer_is_offered_and_builds():
    forms = choices("train-head", "--mixer")
    assert {form.split(":")[0] for form in forms} == set(MIXERS)
    for form in forms:
        make_mixer(form.replace("<i>", "1"), n_states=3, dim=8)


def test_every_normalization_offered_is_accepted():
    for mode in choices("train-head", "--normalize"):
        resolve_normalize(mode, "none")


def test_every_selection_metric_offered_is_accepted_for_some_task():
    tasks = [LabelTask("seq", "sequence", ("a", "b")), LabelTask("ner", "token", ("O", "B-X", "I-X")),
             LabelTask("value", "regression")]
    for name in choices("train-head", "--metric"):
        fits = [t for t in tasks if SELECTION_METRICS[name].applies_to(t)]
        assert fits, name
        assert requested_metrics(name, fits) == {t.name: name for t in fits}


def test_the_dataset_argument_names_every_supported_file():
    group = typer.main.get_command(app)
    dataset = next(p for p in group.commands["extract"].params if p.name == "dataset")
    assert SUPPORTED_FILES in dataset.help
    for source in FILE_SOURCES:
        if source.supported:
            assert all(ext.lstrip(".") in dataset.help for ext in source.extensions), source.name

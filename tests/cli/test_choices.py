"""Every fixed list of values the CLI shows comes from the registry that owns it, and the library takes each one."""

from __future__ import annotations

import re

import click
import typer.main

from layercache.cli import app
from layercache.cli.choices import OPTION_CHOICES, choices
from layercache.core.devices import FORWARD_DTYPE_NAMES
from layercache.core.tasks import TASK_KINDS, LabelTask
from layercache.heads.blocks.normalize import NORMALIZATIONS, resolve_normalize
from layercache.heads.mixers import MIXERS, make_mixer
from layercache.heads.scoring.selection import SELECTION_METRICS, requested_metrics
from layercache.heads.sweeps.sweep import PICKS
from layercache.heads.training.fitting import SOLVERS
from layercache.heads.training.trainer import SCHEDULES
from layercache.sources.registry import FILE_SOURCES, SUPPORTED_FILES
from layercache.store.codecs import codec_names
from layercache.store.schema import POOLING_MODES, STORE_MODES

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


NEW = "zz-new"
"""A value added to every registry in :func:`test_each_list_follows_its_registry`: a list the CLI spells itself
lacks it."""

EXTEND_REGISTRIES = f"""
import importlib, json, sys
import typer.main
from layercache.core import devices, tasks
from layercache.heads import head_options
from layercache.heads.scoring import selection
from layercache.heads.sweeps import sweep as sweeps
from layercache.heads.training import fitting
from layercache.heads.mixers import registry as mixers
from layercache.store import codecs, compression, feature_source, schema

codecs.CODECS.load()[{NEW!r}] = type("NewCodec", (codecs.StorageCodec,), {{"name": {NEW!r}}})
for module, name in [(schema, "STORE_MODES"), (schema, "POOLING_MODES"), (feature_source, "POOLING_MODES"),
                     (schema, "PROJECTION_BASES"), (compression, "COMPRESSIONS"),
                     (devices, "FORWARD_DTYPE_NAMES"), (tasks, "TASK_KINDS"),
                     (head_options, "NORMALIZATIONS"), (head_options, "SCHEDULES")]:
    setattr(module, name, (*getattr(module, name), {NEW!r}))
mixers.MIXERS[{NEW!r}] = type("NewMixer", (), {{"spec_form": classmethod(lambda cls: {NEW!r})}})
for table in (selection.SELECTION_METRICS, fitting.SOLVERS, sweeps.PICKS):
    table[{NEW!r}] = None

from layercache.cli import app  # the help texts are written now, from the extended registries

group = typer.main.get_command(app)
json.dump({{name: {{max(p.opts, key=len): p.help for p in command.params if hasattr(p, "opts")}}
           for name, command in group.commands.items()}}, sys.stdout)
"""


def test_each_list_follows_its_registry():
    """Every listed option offers a value added to its registry (a list written in the CLI does not)."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", EXTEND_REGISTRIES], capture_output=True, text=True, check=True)
    helps = json.loads(out.stdout)
    expected = {
        ("extract", "--store"): ("tokens", "pooled", NEW),
        ("extract", "--pooling"): ("mean", "first", "last", NEW),
        ("extract", "--storage-dtype"): ("auto", "float16", "bfloat16", "float32", "int8", "int4", NEW),
        ("extract", "--dtype"): ("auto", "float32", "float16", "bfloat16", NEW),
        ("extract", "--task-kind"): ("sequence", "token", "regression", NEW),
        ("extract", "--project-basis"): ("pca", "standardized", NEW),
        ("extract", "--compression"): ("none", "zstd", NEW),
        ("plan", "--store"): ("tokens", "pooled", NEW),
        ("plan", "--pooling"): ("mean", "first", "last", NEW),
        ("plan", "--storage-dtype"): ("auto", "float16", "bfloat16", "float32", "int8", "int4", NEW),
        ("plan", "--dtype"): ("auto", "float32", "float16", "bfloat16", NEW),
        ("plan", "--task-kind"): ("sequence", "token", "regression", NEW),
        ("train-head", "--mixer"): (*(m.spec_form() for m in MIXERS.values()), NEW),
        ("train-head", "--normalize"): (*NORMALIZATIONS, NEW),
        ("train-head", "--schedule"): (*SCHEDULES, NEW),
        ("train-head", "--source"): ("auto", "tokens", *(f"pooled:{m}" for m in (*POOLING_MODES, NEW))),
        ("train-head", "--metric"): (*SELECTION_METRICS, NEW),
        ("train-head", "--solver"): (*SOLVERS, NEW),
        ("sweep", "--mixer"): (*MIXERS, NEW),
        ("sweep", "--metric"): (*SELECTION_METRICS, NEW),
        ("sweep", "--pick"): (*PICKS, NEW),
        ("verify", "--dtype"): (*FORWARD_DTYPE_NAMES, NEW),
    }
    assert set(expected) == set(OPTION_CHOICES)  # a new entry in the table gets its registry here
    for (command, option), values in expected.items():
        match = LISTED.search(helps[command][option] or "")
        assert match is not None and tuple(match.group(1).split(", ")) == values, (command, option)


REGISTRIES = {"store modes": STORE_MODES, "pooling modes": POOLING_MODES, "storage dtypes": tuple(codec_names()),
              "forward dtypes": FORWARD_DTYPE_NAMES, "task kinds": TASK_KINDS, "mixers": tuple(MIXERS),
              "normalizations": NORMALIZATIONS, "schedules": SCHEDULES, "metrics": tuple(SELECTION_METRICS),
              "solvers": tuple(SOLVERS), "picks": tuple(PICKS)}
WORD_LIST = re.compile(r"[\w:<>\[\]-]+(?:, [\w:<>\[\]-]+)+,? (?:or|and) [\w:<>\[\]-]+")


def test_no_help_spells_a_registry_list_in_prose():
    """No help writes three or more values of one registry as ``a, b or c``: such a list is the registry's, in
    ``One of:`` from :mod:`layercache.cli.choices` (the way ``verify --dtype`` once wrote its own)."""
    spelled = []
    for (command, option), param in command_options().items():
        prose = LISTED.sub("", param.help or "")
        for words in WORD_LIST.findall(prose):
            values = set(re.split(r",? (?:or|and) |, ", words))
            spelled += [(command, option, words, name) for name, registry in REGISTRIES.items()
                        if len(values) >= 2 and values <= set(registry)]
    assert not spelled


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

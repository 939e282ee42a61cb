"""An option left out does what the library does without its keyword: one place per default.

The command line reads each default from the library (:mod:`layercache.cli.options`,
:mod:`layercache.core.extraction_defaults`); these tests catch a default written into the CLI that
has drifted from the call it makes, and extraction's specs that drift from ``extract()``'s keywords.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from layercache.cli.parsing import parse_size
from layercache.heads import LayerHead, sweep
from layercache.heads.workflow import train_head

from .test_choices import command_options


def keywords(function) -> dict:
    return {name: p.default for name, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty}


def cli_defaults(command: str) -> dict:
    return {param.name: param.default for (name, _), param in command_options().items() if name == command}


def test_extract_options_default_to_extracts_keywords():
    from layercache.extraction.run import extract

    library, cli = keywords(extract), cli_defaults("extract")
    assert parse_size(cli.pop("shard_bytes")) == library["shard_bytes"]
    assert cli.pop("pooling") is None  # None: the library's pooling, which --help names
    pooling = next(p for (c, _), p in command_options().items() if c == "extract" and p.name == "pooling")
    assert pooling.show_default == ", ".join(library["pooling"])
    cli.pop("model")  # the alias minilm, which names the library's DEFAULT_MODEL
    assert cli.pop("dataset") is None  # None: builtin, unless --split maps local files
    dataset = next(p for (c, _), p in command_options().items() if c == "extract" and p.name == "dataset")
    assert dataset.help.startswith(f"{library['dataset']} (default)")
    assert cli.pop("threads") == "auto" and cli.pop("quiet") is False  # not library keywords
    shared = {name: value for name, value in cli.items() if name in library}
    assert shared == {name: library[name] for name in shared}
    assert {"store", "storage_dtype", "dtype", "device", "batch_tokens", "batch_size"} <= set(shared)


@pytest.mark.parametrize("spec", ["DataSpec", "StorageSpec", "BatchSpec"])
def test_extraction_specs_default_to_extracts_keywords(spec):
    from layercache.extraction import specs
    from layercache.extraction.run import extract

    library = keywords(extract)
    for field in dataclasses.fields(getattr(specs, spec)):
        name = {"config": "dataset_config"}.get(field.name, field.name)
        assert field.default == library[name], (spec, field.name)


def test_train_head_options_default_to_the_heads_keywords():
    library = {**keywords(LayerHead), **keywords(train_head)}
    cli = cli_defaults("train-head")
    assert cli.pop("share_mixer") is (not library["share_mixer"])  # --separate-mixers: typed False, read as True
    assert cli.pop("train_split") == library["split"]
    shared = {name: value for name, value in cli.items() if name in library}
    assert shared == {name: library[name] for name in shared}
    assert {"mixer", "epochs", "batch_size", "weight_decay", "schedule", "patience", "solver", "seed", "seeds",
            "device", "source", "normalize"} <= set(shared)


def test_sweep_options_default_to_sweeps_keywords():
    library = {**keywords(LayerHead), **keywords(sweep)}
    cli = cli_defaults("sweep")
    assert cli.pop("mixer") is library["mixers"] is None  # --mixer is the sweep's mixers, not one head's
    assert cli.pop("train_split") == library["split"]
    shared = {name: value for name, value in cli.items() if name in library}
    assert shared == {name: library[name] for name in shared}
    assert {"budget", "seeds", "seed", "pick", "ensemble", "confidence", "grid", "epochs", "patience",
            "batch_size", "device"} <= set(shared)


@pytest.mark.parametrize(("command", "call", "renamed"), [
    ("predict", "layercache.live.predict:predict_texts", {}),
    ("verify", "layercache.live.verify:verify_cache", {}),
    ("probe-report", "layercache.report.probing:probe_report", {}),
])
def test_commands_whose_library_the_help_may_not_import_restate_its_defaults_exactly(command, call, renamed):
    """predict, verify and probe-report write a few defaults themselves (``layercache --help`` may not load
    ``live``, and the report's orchestration is slow to import): each must equal the keyword it sets."""
    import importlib

    module, name = call.split(":")
    library = keywords(getattr(importlib.import_module(module), name))
    cli = {renamed.get(k, k): v for k, v in cli_defaults(command).items()}
    shared = {name: value for name, value in cli.items() if name in library}
    assert shared == {name: library[name] for name in shared}
    assert shared

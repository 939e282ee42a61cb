"""One declaration per option: the extraction specs' fields make the command line's options and the library's
keywords, and the README's option table names every one (issue 39)."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
import typer.main
from cli_support import invoke
from typer.testing import CliRunner

from layercache.cli import app
from layercache.cli.spec_options import spec_options, takes_specs
from layercache.core.option_specs import Flag, field_default, field_flag, field_keyword, option_field, spec_fields
from layercache.extraction.run import extract as library_extract
from layercache.extraction.specs import BatchSpec, DataSpec, StorageSpec

SPECS = (DataSpec, StorageSpec, BatchSpec)
PLAN_SKIPS = {"project", "project_basis", "compression"}  # the plan's own --project; the others are extract's


def _command_flags(name: str) -> dict[str, object]:
    """Flag (or the argument's name in capitals) -> click parameter of the command ``name``."""
    command = typer.main.get_command(app).commands[name]
    out = {}
    for param in command.params:
        if param.param_type_name == "argument":
            out[param.name.upper()] = param
        else:
            out[max(param.opts, key=len)] = param
    return out


@pytest.mark.parametrize("command, skipped", [("extract", set()), ("plan", PLAN_SKIPS)])
def test_every_spec_field_with_a_flag_is_an_option_of_the_command(command, skipped):
    flags = _command_flags(command)
    for spec in SPECS:
        for spec_field in spec_fields(spec):
            spec_flag = field_flag(spec_field)
            if spec_flag is None or spec_field.name in skipped:
                continue
            assert spec_flag.name in flags, (command, spec.__name__, spec_field.name)


def test_every_spec_field_is_a_keyword_of_the_library_with_the_same_default():
    parameters = inspect.signature(library_extract).parameters
    for spec in SPECS:
        for spec_field in spec_fields(spec):
            keyword = field_keyword(spec_field)
            assert keyword in parameters, (spec.__name__, keyword)
            default = parameters[keyword].default
            assert default == field_default(spec_field) or tuple(default) == tuple(field_default(spec_field))


def test_an_untyped_command_line_builds_the_library_s_default_specs(monkeypatch):
    seen = {}

    def record(model, **kwargs):
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr("layercache.planning.checked.extract", record)
    invoke("extract", "minilm")
    assert seen["data"] == DataSpec() and seen["storage"] == StorageSpec(pooling=["mean"])
    assert seen["batching"] == BatchSpec()


def test_typed_options_are_read_into_their_fields(monkeypatch):
    seen = {}
    monkeypatch.setattr("layercache.planning.checked.extract",
                        lambda model, **kwargs: seen.update(kwargs) or (_ for _ in ()).throw(SystemExit(0)))
    invoke("extract", "minilm", "--split", "train=a.tsv", "--split", "dev=b.tsv", "--layers", "0,-1",
           "--pooling", "mean,first", "--shard-size", "1MiB", "--text-column", "a,b", "--config", "cola",
           "--storage-dtype", "int8", "--project", "8", "--device-map", "auto", "--max-memory", "cpu=1GiB")
    data, storage, batching = seen["data"], seen["storage"], seen["batching"]
    assert data.dataset == "" and data.split_files == {"train": "a.tsv", "dev": "b.tsv"} and data.splits is None
    assert data.text_columns == ["a", "b"] and data.config == "cola"
    assert storage.layers == [0, -1] and list(storage.pooling) == ["mean", "first"]
    assert storage.shard_bytes == 2**20 and storage.storage_dtype == "int8" and storage.project == 8
    assert batching.device_map == "auto" and batching.max_memory == {"cpu": 2**30}


def test_a_new_field_is_a_new_option_and_nothing_else():
    @dataclass(frozen=True)
    class Toy:
        size: int = option_field(3, Flag("--size", "How many."))
        names: tuple[str, ...] = option_field(("a",), Flag("--names", "Which; comma-separated.", reader="list"))
        hidden: int = option_field(7)  # a library keyword only

    toy_app = typer.Typer()
    got = {}

    @toy_app.command()
    @takes_specs("toy")
    def toy(toy_spec: Toy = spec_options(Toy), loud: bool = typer.Option(False, "--loud")):  # noqa: B008
        got.update(spec=toy_spec, loud=loud)

    result = CliRunner().invoke(toy_app, ["--size", "5", "--names", "x,y", "--loud"])
    assert result.exit_code == 0, result.output
    assert got == {"spec": Toy(size=5, names=["x", "y"]), "loud": True}
    help_text = CliRunner().invoke(toy_app, ["--help"]).output
    assert "--size" in help_text and "How many." in help_text and "--hidden" not in help_text
    CliRunner().invoke(toy_app, [])
    assert got["spec"] == Toy(names=["a"])


def test_the_readme_names_every_option_of_extract():
    text = (Path(__file__).parents[2] / "README.md").read_text()
    section = text[text.index("\n## Extract"):text.index("\n## How big will my cache be?")]
    named = set(re.findall(r"`(--[a-z][a-z-]*)", section))
    missing = [flag for flag in _command_flags("extract") if flag.startswith("--") and flag not in named
               and flag != "--help"]
    assert not missing, f"README's Extract section does not name {missing}"


def test_the_report_s_options_are_probe_report_s_options_and_build_probe_report_s_defaults():
    from layercache.report.probing import build_probe_report
    from layercache.report.report_options import ReportOptions

    flags = _command_flags("probe-report")
    built = inspect.signature(build_probe_report).parameters
    for spec_field in spec_fields(ReportOptions):
        spec_flag = field_flag(spec_field)
        assert spec_flag is not None and spec_flag.name.split("/")[0] in flags, spec_field.name  # --mdl/--no-mdl
        if spec_field.name in built:
            default = built[spec_field.name].default
            assert default == field_default(spec_field) or tuple(default) == tuple(field_default(spec_field))


def test_probe_report_refuses_a_keyword_it_does_not_take_and_one_beside_its_options():
    from layercache.report.probing import probe_report
    from layercache.report.report_options import ReportOptions

    with pytest.raises(TypeError, match="unexpected keyword argument 'mdll'"):
        probe_report("nowhere", mdll=False)
    with pytest.raises(Exception, match=r"Pass mdl inside options=ReportOptions\(\.\.\.\)"):
        probe_report("nowhere", options=ReportOptions(), mdl=False)

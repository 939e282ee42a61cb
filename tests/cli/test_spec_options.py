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


# --- the head's settings: HeadOptions makes train-head's and sweep's options and LayerHead's defaults -------------

def test_layer_head_s_keywords_are_head_options_fields_in_order_with_their_defaults():
    from dataclasses import asdict

    from layercache.heads import LayerHead
    from layercache.heads.head_options import HeadOptions

    keywords = list(inspect.signature(LayerHead).parameters.values())[1:]  # after the mixer
    assert [p.name for p in keywords] == [f.name for f in spec_fields(HeadOptions)]
    for keyword, spec_field in zip(keywords, spec_fields(HeadOptions)):
        assert keyword.default == field_default(spec_field), keyword.name
    assert LayerHead().get_params() == {"mixer": "adaptive", **asdict(HeadOptions())}


def test_every_head_option_is_an_option_of_train_head_and_the_shared_ones_of_sweep():
    from layercache.cli.sweep import SHARED
    from layercache.heads.head_options import HeadOptions

    train_flags, sweep_flags = _command_flags("train-head"), _command_flags("sweep")
    for spec_field in spec_fields(HeadOptions):
        spec_flag = field_flag(spec_field)
        if spec_flag is None:
            continue
        assert spec_flag.name in train_flags, spec_field.name
        if spec_field.name in SHARED:  # (sweep's --seed and --seeds are its own: seeds of every candidate)
            assert spec_flag.name in sweep_flags, spec_field.name


def _recorded(monkeypatch, target: str) -> dict:
    """What the command hands ``target`` (the library call, stopped there); the command is given a real cache, since
    it refuses a missing one before it imports the library."""
    seen: dict = {}

    def record(*args, **kwargs):
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(target, record)
    return seen


def test_typed_head_options_are_read_into_layer_head_s_keywords(monkeypatch, cache):
    seen = _recorded(monkeypatch, "layercache.heads.workflow.train_head")
    invoke("train-head", cache, "--task", "a,b", "--layers", "0,-1", "--mixer-option", "k=64",
           "--head-option", "pooling=attention", "--separate-mixers", "--loss-weight", "a=0.5", "--metric", "mcc",
           "--class-weight", "balanced", "--epochs", "2", "--lr", "0.01", "--seeds", "2", "-q")
    assert seen["tasks"] == ["a", "b"] and seen["layers"] == [0, -1] and seen["mixer_options"] == {"k": 64}
    assert seen["head_options"] == {"pooling": "attention"} and seen["share_mixer"] is False
    assert seen["loss_weights"] == {"a": 0.5} and seen["metric"] == "mcc" and seen["class_weight"] == "balanced"
    assert seen["epochs"] == 2 and seen["lr"] == 0.01 and seen["seeds"] == 2 and seen["progress"] is False


def test_an_untyped_train_head_passes_layer_head_s_defaults(monkeypatch, cache):
    from layercache.heads import LayerHead

    seen = _recorded(monkeypatch, "layercache.heads.workflow.train_head")
    invoke("train-head", cache)
    defaults = LayerHead().get_params()
    # the command line reads an untyped KEY=VALUE list as no settings, {} (as it always wrote them to config.json)
    expected = {k: v for k, v in defaults.items() if k != "mixer"} | {"mixer_options": {}, "head_options": {}}
    assert {k: seen[k] for k in expected} == expected


def test_sweep_gives_every_candidate_the_shared_head_options(monkeypatch, cache):
    seen = _recorded(monkeypatch, "layercache.heads.sweeps.sweep.sweep")
    invoke("sweep", cache, "--task", "a", "--metric", "a=mcc", "--epochs", "3", "--patience", "1",
           "--batch-size", "8", "--device", "cpu", "--class-weight", "balanced")
    assert seen["tasks"] == ["a"] and seen["metric"] == {"a": "mcc"} and seen["epochs"] == 3
    assert seen["patience"] == 1 and seen["batch_size"] == 8 and seen["device"] == "cpu"
    assert seen["class_weight"] == "balanced" and "lr" not in seen and "seeds" in seen  # the sweep's own --seeds


@pytest.mark.parametrize("args, message", [
    (("--epochs", "0"), "--epochs must be at least 1 (a whole number), got 0."),
    (("--batch-size", "0"), "--batch-size must be at least 1 (a whole number), got 0."),
    (("--lr", "-1"), "--lr must be positive, got -1.0."),
    (("--patience", "-2"), "--patience must be at least 0 (a whole number), got -2."),
])
def test_a_head_setting_out_of_range_is_refused_naming_its_flag_before_the_cache_is_opened(args, message):
    from cli_support import assert_refused

    assert_refused(invoke("train-head", "no/such/cache", *args), message)


def test_the_library_refuses_a_setting_out_of_range_naming_its_keyword_before_reading():
    from layercache.errors import ConfigError
    from layercache.heads import LayerHead
    from layercache.heads.training.trainer import TrainConfig

    with pytest.raises(ConfigError, match=r"^epochs must be at least 1 \(a whole number\), got 0\.$"):
        LayerHead(epochs=0).fit(object())  # refused before the "cache" is touched
    with pytest.raises(ConfigError, match=r"^warmup is a fraction in \[0, 1\), got 1\.5\.$"):
        LayerHead(warmup=1.5).fit(object())
    with pytest.raises(ConfigError, match=r"^batch_size must be at least 1 \(a whole number\), got 0\.$"):
        TrainConfig(batch_size=0).check()


def test_messages_name_a_declared_option_s_flag():
    import layercache.extraction.specs  # noqa: F401  (declares the extraction's flags)
    from layercache.core.option_names import flag, option_name, speaking_to_command_line

    assert flag("shard_bytes") == "--shard-size" and flag("split_files") == "--split"
    assert flag("share_mixer", False) == "--separate-mixers" and flag("train_act", False) == "--no-train-act"
    assert option_name("batch_size") == "batch_size"
    with speaking_to_command_line():
        assert option_name("batch_size") == "--batch-size"


def test_two_specs_cannot_spell_one_keyword_s_flag_differently():
    from layercache.core.option_specs import option_spec

    with pytest.raises(TypeError, match="spells batch_size's flag --minibatch"):
        @option_spec
        @dataclass(frozen=True)
        class Clashing:
            batch_size: int = option_field(8, Flag("--minibatch", "Examples."))


def test_the_readme_s_train_head_table_names_every_option_with_its_keyword_and_default():
    from layercache.heads.head_options import HeadOptions

    text = (Path(__file__).parents[2] / "README.md").read_text()
    section = text[text.index("\n## Train a head"):text.index("\n## Predict with the live backbone")]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`--"):
            for flag_ in re.findall(r"`(--[a-z-]+)`", cells[0]):
                rows[flag_] = cells
    missing = [f for f in _command_flags("train-head") if f.startswith("--") and f not in rows and f != "--help"]
    assert not missing, f"README's train-head table does not name {missing}"
    for spec_field in spec_fields(HeadOptions):
        spec_flag = field_flag(spec_field)
        if spec_flag is not None:
            _, keyword, default, _ = rows[spec_flag.name]
            assert keyword == f"`{spec_field.name}`" and default == f"`{field_default(spec_field)!r}`", spec_field.name


# --- the sweep's own settings: SweepOptions makes sweep's options and sweep()'s defaults ----------------------------

def test_sweep_s_keywords_default_to_sweep_options_fields():
    from layercache.heads.sweeps.sweep import sweep as library_sweep
    from layercache.heads.sweeps.sweep_options import SweepOptions

    parameters = inspect.signature(library_sweep).parameters
    for spec_field in spec_fields(SweepOptions):
        assert parameters[spec_field.name].default == field_default(spec_field), spec_field.name


def test_every_sweep_option_is_an_option_of_sweep_with_its_default():
    from layercache.heads.sweeps.sweep_options import SweepOptions

    flags = _command_flags("sweep")
    for spec_field in spec_fields(SweepOptions):
        spec_flag = field_flag(spec_field)
        assert spec_flag is not None and flags[spec_flag.spelling].default == field_default(spec_field), spec_field


def test_untyped_and_typed_sweep_options_reach_sweep_s_keywords(monkeypatch, cache):
    from dataclasses import asdict

    from layercache.heads.sweeps.sweep_options import SweepOptions

    seen = _recorded(monkeypatch, "layercache.heads.sweeps.sweep.sweep")
    invoke("sweep", cache)
    expected = asdict(SweepOptions()) | {"budget": 300.0}  # the budget typed 5m, read as seconds
    assert {k: seen[k] for k in expected} == expected
    seen.clear()
    invoke("sweep", cache, "-b", "90s", "-m", "last,scalar", "--no-grid", "--seeds", "2", "--seed", "4",
           "--pick", "best-seed", "--confidence", "0.5", "--ensemble", "2")
    assert {k: seen[k] for k in expected} == {"budget": 90.0, "mixers": ["last", "scalar"], "grid": False, "seeds": 2,
                                              "seed": 4, "pick": "best-seed", "confidence": 0.5, "ensemble": 2}


@pytest.mark.parametrize("args, message", [
    (("--confidence", "1.5"), "--confidence is a share of resamples from 0 (keep the leader) to under 1, got 1.5."),
    (("--ensemble", "-1"), "--ensemble is the number of top candidates to combine (0 for none), got -1."),
])
def test_a_sweep_setting_out_of_range_is_refused_naming_its_flag_before_the_cache_is_opened(args, message):
    from cli_support import assert_refused

    assert_refused(invoke("sweep", "no/such/cache", *args), message)


def test_the_library_sweep_refuses_a_setting_out_of_range_naming_its_keyword():
    from layercache.errors import ConfigError
    from layercache.heads.sweeps.sweep import sweep as library_sweep

    with pytest.raises(ConfigError, match=r"^ensemble is the number of top candidates to combine \(0 for none\), "
                                          r"got True\.$"):
        library_sweep("no/such/cache", ensemble=True)
    with pytest.raises(ConfigError, match=r"^confidence is a share of resamples from 0 \(keep the leader\) to "
                                          r"under 1, got 1\.$"):
        library_sweep("no/such/cache", confidence=1)


def test_the_head_s_mixer_and_training_split_are_declared_once():
    from layercache.heads import LayerHead
    from layercache.heads.head_options import DEFAULT_MIXER, TRAIN_SPLIT
    from layercache.heads.sweeps.sweep import sweep as library_sweep
    from layercache.heads.workflow import train_head
    from layercache.live.training import train_head_live

    for function in (LayerHead, train_head, train_head_live):
        assert inspect.signature(function).parameters["mixer"].default == DEFAULT_MIXER, function
    for function in (train_head, library_sweep):
        assert inspect.signature(function).parameters["split"].default == TRAIN_SPLIT, function
    flags = _command_flags("train-head")
    assert flags["--mixer"].default == DEFAULT_MIXER and flags["--train-split"].default == TRAIN_SPLIT

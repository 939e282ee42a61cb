"""The import graph is the architecture: what importing the public API must not load.

The layer contract itself (which package may import which) is checked by ``lint-imports`` in
``.ci/run`` from ``pyproject.toml``; these tests check what it cannot see: the lazy public API,
and that a process that only trains from a cache never loads a model library or the extractor.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("transformers", "layercache.extraction", "layercache.backbone", "layercache.sources", "layercache.live")


def loaded_after(statement: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """Modules among ``heavy`` (prefixes) that ``statement`` loads in a fresh interpreter."""
    code = (f"import sys, json\n{statement}\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({heavy!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("statement", [
    "import layercache",
    "import layercache.heads",
    "import layercache.probes",
    "import layercache.store.reader",
    "from layercache import LayerHead, LayerCache, LinearProbes, LabelTask",
    "from layercache.heads.mixers import make_mixer",
])
def test_learning_from_a_cache_loads_no_model_library_and_no_extractor(statement):
    assert loaded_after(statement) == []


def test_the_public_api_is_complete_and_lazy():
    import layercache as lc

    for name in lc.__all__:
        assert getattr(lc, name) is not None, name
    assert set(lc.__all__) <= set(dir(lc))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        lc.nope  # noqa: B018


def test_the_command_line_loads_no_model_library_until_a_command_needs_one():
    # `layercache --help` and `train-head` stay quick: the extractor loads inside `extract` only. The
    # help may read the data-source registry (the list of supported files), which loads no model library, and the
    # extraction options' declarations (extraction/specs.py, the one module of the lazy package it needs).
    loaded = loaded_after("import layercache.cli")
    declarations = {"layercache.extraction", "layercache.extraction.specs"}
    assert not [m for m in loaded if m.startswith(("transformers", "layercache.extraction", "layercache.backbone",
                                                   "layercache.live")) and m not in declarations], loaded


def test_extract_is_importable_from_the_top():
    assert "layercache.extraction" in " ".join(loaded_after("from layercache import extract"))


# What `layercache --help` and `layercache CMD --help` may not load: each costs seconds, before any refusal too.
MODEL_STACKS = ("torch", "transformers", "h5py", "sklearn", "scipy")
EVERY_HELP = """
from typer.main import get_command
from typer.testing import CliRunner
from layercache.cli import app
names = list(get_command(app).commands)
for args in [["--help"], *([name, "--help"] for name in names)]:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and "Usage" in result.output, (args, result.output)
assert len(names) >= 10, names
"""


@pytest.mark.parametrize("statement", [
    "from layercache.store.storage import codec, codec_names; [codec(n).vector_bytes(384) for n in codec_names()]",
    "from layercache.extraction.specs import BatchSpec, DataSpec, StorageSpec",
    "from layercache.heads.head_options import HeadOptions",
    "from layercache.heads.scoring.selection import metric_names",
    "from layercache.store.feature_source import source_spellings; source_spellings()",
    "from layercache.store.schema import STORE_MODES, POOLING_MODES, PROJECTION_BASES",
    "from layercache.report.report_options import ReportOptions",
    "import layercache.heads, layercache.report, layercache.store.codecs",
    "from layercache.heads.mixers import mixer_names, mixer_spec_forms; mixer_names(); mixer_spec_forms()",
    "from layercache.heads.head_options import NORMALIZATIONS, SCHEDULES, SOLVERS, DEFAULT_MIXER, TRAIN_SPLIT",
    "from layercache.heads.sweeps.sweep_options import PICKS, SweepOptions",
])
def test_what_the_help_reads_of_the_library_loads_no_model_stack(statement):
    # The storage dtypes with their widths, the options' declarations, the metric and source spellings, the mixers'
    # names and spec forms: read by --help, so declared without torch (a codec names its torch dtype; torch loads
    # when values are converted; a mixer is declared by name in its registry, its module imported when it is built).
    assert loaded_after(statement, MODEL_STACKS) == []


def test_the_command_lines_help_loads_no_model_stack():
    # `import layercache.cli` and every command's --help, in a fresh interpreter: no torch, transformers, h5py
    # or scikit-learn, so that --help and a refusal of bad input answer at once.
    assert loaded_after(EVERY_HELP, MODEL_STACKS) == []


MISSING_CACHES = """
from typer.testing import CliRunner
from layercache.cli import app
for args in (["train-head", "{missing}"], ["train-head", "{missing}", "--live"], ["sweep", "{missing}"],
             ["probe-report", "{missing}"], ["verify", "{missing}"], ["eval", "{missing}", "{missing}"],
             ["compare", "{missing}", "{missing}"], ["train-head", "{folder}"]):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (args, result.exit_code, result.output)
    assert ("No cache at" in result.output or "manifest" in result.output), (args, result.output)
"""


def test_a_command_refuses_a_missing_cache_before_loading_the_model_stack(tmp_path):
    # one sentence at once, not after the seconds torch and scikit-learn take to import (13 s here before)
    code = MISSING_CACHES.replace("{missing}", str(tmp_path / "nowhere")).replace("{folder}", str(tmp_path))
    assert loaded_after(code, MODEL_STACKS) == []


def test_a_mixer_class_cannot_contradict_what_the_registry_declares_of_it():
    # --help lists the mixers from registry.DECLARED without importing them: a class that registers another spec
    # form, or a mixer of a declared module left out of DECLARED, would make that list wrong, so it is refused.
    from layercache.heads.mixers import MIXERS, LayerMixer, register_mixer

    assert [MIXERS.spec_form(name) for name in MIXERS] == [cls.spec_form() for cls in MIXERS.values()]
    moved = type("Scalar", (LayerMixer,), {"name": "scalar", "spec_argument": "<k>", "__module__": MIXERS[
        "scalar"].__module__})
    with pytest.raises(TypeError, match=r"'scalar' is declared as scalar in layercache.heads.mixers.scalar"):
        register_mixer(moved)
    stray = type("Stray", (LayerMixer,), {"name": "stray", "__module__": "layercache.heads.mixers.select"})
    with pytest.raises(TypeError, match="declare it there too"):
        register_mixer(stray)
    assert "stray" not in MIXERS

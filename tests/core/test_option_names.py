"""A message names an option as its reader can use it: a keyword to a Python caller, a flag on the command line."""

from __future__ import annotations

import threading
from pathlib import Path

from layercache.core.option_names import call, command_line, flag, option, options, speaking_to_command_line

# The specs declare their flags' spellings into core/option_names's registry when imported: extraction's specs
# (--shard-size, --split, --text-column, --label-column) are what the entries below read. Run alone, without
# this import, the tests read the default spellings (--shard-bytes).
from layercache.extraction import specs as _extraction_specs  # noqa: F401


def test_python_callers_read_keywords():
    assert not command_line()
    assert option("overwrite", True) == "overwrite=True"
    assert option("storage_dtype", "int8") == "storage_dtype='int8'"
    assert option("labels", False) == "labels=False"
    assert option("out") == "out=..."


def test_the_command_line_reads_flags():
    with speaking_to_command_line():
        assert command_line()
        assert option("overwrite", True) == "--overwrite"
        assert option("storage_dtype", "int8") == "--storage-dtype int8"
        assert option("labels", False) == "--no-labels"
        assert option("out") == "--out"
    assert not command_line()  # and back to keywords after the command


def test_flag_names_the_flag_whoever_listens():
    assert flag("max_memory") == "--max-memory"
    assert flag("project", 96) == "--project 96"
    assert flag("no_labels", True) == "--no-labels"


def test_a_keyword_whose_flag_is_not_its_name_has_an_entry():
    assert flag("shard_bytes") == "--shard-size"
    assert flag("text_columns", "NAME") == "--text-column NAME"
    assert option("split_files") == "split_files=..."


def test_a_value_the_command_line_writes_otherwise_is_given_both_ways():
    example = {"value": {"train": "a.tsv"}, "typed": "train=a.tsv"}
    assert option("split_files", **example) == "split_files={'train': 'a.tsv'}"
    assert option("max_train", None, typed="all") == "max_train=None"
    assert option("label_columns", typed="NAME") == "label_columns=..."  # a placeholder, no Python value
    with speaking_to_command_line():
        assert option("split_files", **example) == "--split train=a.tsv"
        assert option("max_train", None, typed="all") == "--max-train all"
        assert option("label_columns", typed="NAME") == "--label-column NAME"


def test_a_path_reads_as_the_string_a_caller_passes():
    assert option("out", Path("runs/a")) == "out='runs/a'"
    with speaking_to_command_line():
        assert option("out", Path("runs/a")) == "--out runs/a"


def test_several_options_and_a_whole_call():
    assert options(dtype="float32", overwrite=True) == "dtype='float32', overwrite=True"
    assert call("extract", repair=True) == "`extract(..., repair=True)`"
    assert call("train_head", mixer="act") == "`train_head(..., mixer='act')`"
    with speaking_to_command_line():
        assert options(dtype="float32", overwrite=True) == "--dtype float32 --overwrite"
        assert call("extract", repair=True) == "`layercache extract ... --repair`"
        assert call("train_head", mixer="act") == "`layercache train-head ... --mixer act`"


def test_a_background_thread_of_a_command_names_flags_too():
    seen = []
    with speaking_to_command_line():
        with speaking_to_command_line():  # nested: still the command line when the inner block ends
            pass
        worker = threading.Thread(target=lambda: seen.append(option("overwrite", True)))
        worker.start()
        worker.join()
    assert seen == ["--overwrite"]
    assert option("overwrite", True) == "overwrite=True"

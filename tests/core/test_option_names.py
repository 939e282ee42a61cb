"""A message names an option as its reader can use it: a keyword to a Python caller, a flag on the command line."""

from __future__ import annotations

import threading

from layercache.core.option_names import command_line, flag, option, speaking_to_command_line


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

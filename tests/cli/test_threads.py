"""``--threads`` (cli/options.py, applied by cli/threads.py): a word or zero, or more than the usable cores, is
refused in one sentence by every command that takes it. How the count is chosen is tested in
tests/core/test_threads.py."""

from __future__ import annotations

from cli_support import assert_refused, invoke

from layercache.core.threads import usable_cores


def test_cli_threads_option(tmp_path):
    assert_refused(invoke("probe-report", tmp_path, "--threads", "zero"), "--threads must be a whole number")
    assert_refused(invoke("train-head", tmp_path, "--threads", "0"), "--threads must be a whole number")
    many = str(usable_cores() + 1)
    for command in ("extract", "train-head", "probe-report"):
        assert_refused(invoke(command, "--threads", many), f"--threads {many} is more than")

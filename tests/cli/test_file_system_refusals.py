"""The file system's refusals that reach the CLI untranslated are one sentence and exit code 2 (issue 26).

``probe-report`` on a full disk printed a traceback: the report is written after minutes of work,
by code that has no sentence of its own for ENOSPC. ``friendly`` turns such an ``OSError`` (a full
disk, a read-only mount, permissions, a file where a folder should be) into one sentence; any other
``OSError`` is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno

import pytest
import typer
from cli_support import assert_refused
from typer.testing import CliRunner

from layercache.cli.base import friendly


def _app_raising(err: BaseException) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @friendly
    def write() -> None:
        raise err

    return app


@pytest.mark.parametrize(("code", "why", "fix"), [
    (errno.ENOSPC, "the disk is full", "free space on that disk"),
    (errno.EROFS, "the file system is read-only", "fix the path or its permissions"),
    (errno.EACCES, "permission denied", "fix the path or its permissions"),
    (errno.ENOTDIR, "a file stands where a folder of its path should be", "choose another --out"),
])
def test_a_refusal_of_the_file_system_is_one_sentence(code, why, fix):
    err = OSError(code, "ignored", "/reports/demo/report.html")
    result = CliRunner().invoke(_app_raising(err), [])
    assert_refused(result, "The file system refused /reports/demo/report.html", f"({why})", fix)


def test_any_other_os_error_is_a_bug_and_keeps_its_traceback():
    result = CliRunner().invoke(_app_raising(OSError(errno.EBADF, "Bad file descriptor")), [])
    assert result.exit_code == 1 and isinstance(result.exception, OSError)

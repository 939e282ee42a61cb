"""A refusal reaches the terminal as the library wrote it: the red ``Error:`` is markup, the sentence is not."""

from __future__ import annotations

import errno

import typer
from cli_support import assert_refused
from typer.testing import CliRunner

from layercache.cli.base import friendly
from layercache.errors import ConfigError


def _app_raising(err: BaseException) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @friendly
    def run() -> None:
        raise err

    return app


def test_brackets_in_a_refusal_are_printed_not_read_as_markup():
    """rich would read ``[compress]`` as a style and print ``pip install 'layercache'``, a command that installs
    nothing the refusal asked for."""
    err = ConfigError("--compression zstd needs the hdf5plugin package; install it with pip install "
                      "'layercache[compress]' ([bold]not[/] markup).")
    assert_refused(CliRunner().invoke(_app_raising(err), []), "pip install 'layercache[compress]'",
                   "([bold]not[/] markup)")


def test_brackets_in_a_path_the_file_system_refused_are_printed():
    err = OSError(errno.ENOSPC, "ignored", "/runs/[a]/report.html")
    assert_refused(CliRunner().invoke(_app_raising(err), []), "/runs/[a]/report.html")

"""Running the real typer app in tests, and checking a refusal looks as promised."""

from __future__ import annotations

from typer.testing import CliRunner

from layercache.cli import app

runner = CliRunner()


def invoke(*args):
    """Run ``layercache ARGS...`` in-process; paths may be given as Path objects."""
    return runner.invoke(app, [str(a) for a in args])


def assert_refused(result, *fragments: str):
    """Exit code 2, no traceback, and every fragment in the (whitespace-normalised) message."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    text = " ".join(result.output.split())
    for fragment in fragments:
        assert fragment in text, text

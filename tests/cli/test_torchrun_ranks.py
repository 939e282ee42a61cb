"""Under torchrun every rank runs the same command: only rank 0 prints (cli/base.py), another rank only its own
failures. The real two-rank runs are in tests/extraction/test_torchrun.py."""

from __future__ import annotations

import logging

import pytest
import typer

from layercache.cli import base
from layercache.errors import ConfigError
from layercache.extraction.distributed import RankFailedError


@base.friendly
def command(fail: BaseException | None = None) -> None:
    """What a command prints: its result, a note, log records, and maybe an error."""
    base.out_console.print("the result")
    base.err_console.print("a note")
    logging.getLogger("layercache").info("an info record")
    logging.getLogger("layercache").error("an error record")
    if fail is not None:
        raise fail


def run(capsys, fail: BaseException | None = None) -> tuple[int, str, str]:
    code = 0
    try:
        command(fail)
    except typer.Exit as exit_:
        code = exit_.exit_code
    out, err = capsys.readouterr()
    return code, out, " ".join(err.split())


@pytest.fixture
def rank(monkeypatch):
    """``rank(r)``: this process is rank ``r`` of two under torchrun."""
    def be(r: int) -> None:
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("RANK", str(r))

    return be


def test_rank_zero_prints_everything(capsys, rank):
    rank(0)
    code, out, err = run(capsys, RankFailedError("Extraction stopped on rank 1 (planted)."))
    assert code == base.EXIT_USAGE and "the result" in out
    for shown in ("a note", "an info record", "an error record", "Error: Extraction stopped on rank 1 (planted)."):
        assert shown in err, err


def test_another_rank_prints_only_its_own_failures(capsys, rank):
    rank(1)
    code, out, err = run(capsys)
    assert (code, out) == (0, "") and err == "ERROR an error record"
    code, out, err = run(capsys, ConfigError("This rank's own refusal."))
    assert code == base.EXIT_USAGE and out == "" and "Error: This rank's own refusal." in err
    assert "a note" not in err and "an info record" not in err
    code, out, err = run(capsys, RankFailedError("Extraction stopped on rank 1 (planted)."))
    assert code == base.EXIT_USAGE and "Extraction stopped" not in err  # rank 0 says it, once
    code, out, err = run(capsys, KeyboardInterrupt())
    assert code == base.EXIT_INTERRUPTED and "Interrupted" not in err


def test_the_consoles_speak_again_after_a_silent_rank(capsys, rank):
    rank(1)
    run(capsys)
    assert not base.out_console.quiet and not base.err_console.quiet
    handlers = [h for h in logging.getLogger("layercache").handlers if h.__class__.__name__ == "RichHandler"]
    assert handlers and all(h.console is base.err_console and h.level == logging.NOTSET for h in handlers)


@pytest.mark.parametrize("environment", [{}, {"WORLD_SIZE": "1", "RANK": "0"}, {"WORLD_SIZE": "2", "RANK": "x"}])
def test_one_process_is_rank_zero(monkeypatch, environment):
    for name in ("WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert not base.follower_rank()

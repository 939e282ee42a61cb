"""Data sources warn through the ``layercache`` logger, as every layercache warning does: a way to catch them."""

from __future__ import annotations

import contextlib
import logging
import re

import pytest


class LoggedWarnings:
    """The ``layercache`` logger's warnings during a block: :meth:`expect` one matching, or :meth:`none`."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    @contextlib.contextmanager
    def _catch(self):
        messages = self.messages = []

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                messages.append(record.getMessage())

        logger, handler = logging.getLogger("layercache"), Keep(logging.WARNING)
        logger.addHandler(handler)
        try:
            yield messages
        finally:
            logger.removeHandler(handler)

    @contextlib.contextmanager
    def expect(self, pattern: str):
        """Like ``pytest.warns(match=pattern)``, for a warning logged by layercache."""
        with self._catch() as messages:
            yield messages
        assert any(re.search(pattern, m) for m in messages), (pattern, messages)

    @contextlib.contextmanager
    def none(self):
        """The block logs no warning."""
        with self._catch() as messages:
            yield messages
        assert messages == [], messages


@pytest.fixture
def logged() -> LoggedWarnings:
    """Catch the warnings layercache logs (``logged.expect(pattern)``, ``logged.none()``)."""
    return LoggedWarnings()

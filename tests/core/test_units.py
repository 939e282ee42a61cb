"""human_seconds picks its format by the value as printed, so float noise never shows (a sweep said '10.0 s')."""

from __future__ import annotations

import pytest

from layercache.core.units import human_seconds


@pytest.mark.parametrize(("seconds", "text"), [
    (0.42, "0.42 s"), (0.996, "1.0 s"), (3.25, "3.2 s"), (9.94, "9.9 s"),
    (10 - 1e-9, "10 s"),  # 1000.0 + 10 - 1000.0 on a float clock: printed '10.0 s' beside the budget's '10 s'
    (10.0, "10 s"), (59.4, "59 s"), (59.7, "1 min"), (75, "1 min 15 s"), (3600, "1 h"), (3725, "1 h 2 min"),
])
def test_human_seconds(seconds, text):
    assert human_seconds(seconds) == text

"""The one matplotlib set-up: pyplot on the Agg backend, whatever backend was chosen before."""

from __future__ import annotations

import matplotlib

from layercache.core.plotting import BACKEND, pyplot


def test_pyplot_draws_off_screen():
    matplotlib.use("svg")
    plt = pyplot()
    assert plt is matplotlib.pyplot and matplotlib.get_backend().lower() == BACKEND.lower()

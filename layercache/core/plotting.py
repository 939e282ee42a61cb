"""The one matplotlib set-up: pyplot on the ``Agg`` backend, for every figure the library writes.

Figures go to files (a run's ``layer_weights.png``, the probing report's plots), never to a
window, so each caller takes pyplot from :func:`pyplot` rather than choosing a backend itself.
matplotlib is imported on the first call, not with this module: importing the library stays quick.
"""

from __future__ import annotations

from types import ModuleType

#: The backend every figure is drawn with: no display, and never a GUI window.
BACKEND = "Agg"


def pyplot() -> ModuleType:
    """``matplotlib.pyplot``, with the :data:`BACKEND` selected (no display, never a GUI window)."""
    import matplotlib

    matplotlib.use(BACKEND)
    import matplotlib.pyplot as plt

    return plt

"""A lossy cache's measured quality as its manifest records it (``extraction.quality``), in words.

The measurement is :func:`layercache.planning.extract`'s; the shape is :data:`~.schema.QUALITY`: the stored
choice, the labelled sample, and per task each learner's cost against float32 states (``loss_points`` with its
95 % ``interval_points``).
"""

from __future__ import annotations

__all__ = ["describe_quality"]


def describe_quality(recorded: dict) -> str:
    """One line of a recorded cost: for the probes and the quick head, the task each loses most on, in points of
    its metric with the 95 % interval (``probes lose +0.4 points (sentiment accuracy, 95 % +0.1 to +0.7)``)."""
    parts = []
    for kind, label in (("probes", "probes"), ("head", "quick head")):
        costs = recorded.get(kind) or {}
        if costs:
            task, cost = max(costs.items(), key=lambda item: item[1]["interval_points"][1])
            low, high = cost["interval_points"]
            parts.append(f"{label} lose {cost['loss_points']:+.1f} points at most ({task} {cost['metric']}, 95 % "
                         f"{low:+.1f} to {high:+.1f})")
    return "; ".join(parts) or "nothing measured"

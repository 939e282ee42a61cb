"""Label tasks: what a label column means, shared by every layer from the sources up to the heads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..errors import TaskError
from .option_names import option

#: Target of a position no loss or metric reads (padding, continuation sub-tokens, special tokens);
#: the value ``torch.nn.functional.cross_entropy`` ignores by default.
IGNORE_INDEX = -100

TaskKind = Literal["sequence", "token", "regression"]
TASK_KINDS: tuple[str, ...] = ("sequence", "token", "regression")


@dataclass(frozen=True)
class LabelTask:
    """One label column and how to read it.

    ``sequence``: one class id per example; ``token``: one class id per word (labels sit on the
    first sub-token of each word); ``regression``: one float per example.
    """

    name: str
    kind: TaskKind
    label_names: tuple[str, ...] | None = None
    """Class names in id order (``None`` for regression)."""

    def __post_init__(self) -> None:
        if self.kind not in TASK_KINDS:
            raise ValueError(f"task kind {self.kind!r} is not one of {', '.join(TASK_KINDS)}")
        if self.kind == "regression" and self.label_names is not None:
            raise ValueError("a regression task has no label names")
        if self.kind != "regression" and not self.label_names:
            raise ValueError(f"classification task {self.name!r} needs label names")
        if self.label_names is not None and not all(isinstance(n, str) for n in self.label_names):
            raise ValueError(f"the label names of task {self.name!r} must be strings")

    @property
    def num_classes(self) -> int | None:
        """Number of label classes; ``None`` for regression."""
        return None if self.label_names is None else len(self.label_names)

    def to_json(self) -> dict:
        """The task as the manifest stores it (name, kind, label names)."""
        return {"name": self.name, "kind": self.kind,
                "label_names": None if self.label_names is None else list(self.label_names)}

    @classmethod
    def from_json(cls, data: dict) -> "LabelTask":
        """Rebuild a task from its :meth:`to_json` form."""
        names = data.get("label_names")
        return cls(name=data["name"], kind=data["kind"], label_names=None if names is None else tuple(names))


def labelled_tasks(tasks: Sequence[LabelTask], owner: str) -> list[LabelTask]:
    """``tasks`` as a list, refusing none at all: ``owner`` (``"The cache <path>"``) holds no labels to learn from."""
    if not tasks:
        raise TaskError(f"{owner} holds no labels to learn from; re-extract it with a label column "
                        f"({option('label_columns')}, without {option('no_labels', True)}).")
    return list(tasks)


def find_task(tasks: Sequence[LabelTask], name: str, owner: str = "The cache") -> LabelTask:
    """The task called ``name`` among ``tasks``; a :class:`~layercache.errors.TaskError` naming those there are.

    ``owner`` starts the refusal: "The cache has no task 'x'; its tasks are: a, b."
    """
    for task in tasks:
        if task.name == name:
            return task
    known = ", ".join(t.name for t in tasks) or "none"
    raise TaskError(f"{owner} has no task {name!r}; its tasks are: {known}.")

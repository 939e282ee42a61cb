"""In-memory records of a dataset, the common shape every data source is turned into.

A source (hub dataset, local file, CoNLL file, built-in generated task) becomes a
:class:`DatasetRecords`: per split, columnar lists of texts (or pre-split words) and one
label list per :class:`LabelTask`. Extraction and the cache only ever see this shape, so adding
a source never touches the extractor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

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

    @property
    def num_classes(self) -> int | None:
        return None if self.label_names is None else len(self.label_names)

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind,
                "label_names": None if self.label_names is None else list(self.label_names)}

    @classmethod
    def from_json(cls, data: dict) -> "LabelTask":
        names = data.get("label_names")
        return cls(name=data["name"], kind=data["kind"], label_names=None if names is None else tuple(names))


@dataclass
class SplitRecords:
    """One split, columnar. Exactly one of ``texts`` / ``words`` is the model input.

    - ``texts``: raw strings (``text_pairs`` holds the second sentence of a pair task, or ``None``).
    - ``words``: pre-split words, tokenized with ``is_split_into_words`` so word ids are known;
      required by token tasks.
    - ``labels``: task name -> one entry per example (an ``int``/``float``, or a ``list[int]`` with
      one class id per word for token tasks).
    - ``source_index``: the row of each example in the source split (kept in the cache).
    - ``n_skipped_empty``: source rows left out because their text (or word list) was empty.
    """

    texts: list[str] | None = None
    text_pairs: list[str] | None = None
    words: list[list[str]] | None = None
    labels: dict[str, list] = field(default_factory=dict)
    source_index: list[int] | None = None
    n_skipped_empty: int = 0

    def __post_init__(self) -> None:
        if (self.texts is None) == (self.words is None):
            raise ValueError("SplitRecords needs exactly one of texts or words")
        n = len(self)
        if self.source_index is None:
            self.source_index = list(range(n))
        for name, column in [("text_pairs", self.text_pairs), ("source_index", self.source_index),
                             *[(f"labels[{k}]", v) for k, v in self.labels.items()]]:
            if column is not None and len(column) != n:
                raise ValueError(f"{name} has {len(column)} entries for {n} examples")

    def __len__(self) -> int:
        return len(self.texts if self.texts is not None else self.words)


@dataclass
class DatasetRecords:
    """A whole dataset: provenance, label tasks and the splits to extract."""

    name: str
    """How the user named it: a hub id, a file path, or ``builtin``."""
    splits: dict[str, SplitRecords]
    tasks: list[LabelTask] = field(default_factory=list)
    config: str | None = None
    fingerprint: str = ""
    """A hash of the content (file bytes, hub fingerprint, generator seed) so a cache can tell data apart."""
    columns: list[str] = field(default_factory=list)
    """All columns the source had, for messages and the manifest."""
    text_columns: list[str] = field(default_factory=list)
    """The column(s) used as model input (two for sentence pairs)."""
    files: dict[str, str] = field(default_factory=dict)
    """Local sources: the file each split was read from (empty for the hub and the built-in set)."""

    def task(self, name: str) -> LabelTask:
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(name)

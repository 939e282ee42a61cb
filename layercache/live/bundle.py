"""A live bundle: one frozen backbone and any number of trained heads, raw text in, predictions out.

    bundle = LiveBundle.from_runs(["runs/sentiment", "runs/ner"])      # the runs' backbone, loaded once
    result = bundle.predict(["the film was not good", "a fine day"])   # one forward pass per batch
    bundle.save_pretrained("bundle/"); LiveBundle.from_pretrained("bundle/")
    bundle = attach(model, tokenizer, ["runs/sentiment"])               # a model the caller already holds

Every head must come from the backbone it runs on: each run's recorded backbone and tokenizer
fingerprints are compared with the loaded ones, and the runs must agree on how their caches cut
texts (maximum length, stride), because one forward pass serves them all. That pass keeps only the
states some head reads and stops after the deepest of them (:class:`~.forward.PartialForward`);
each head then shapes its states as its cache stored them (:class:`~.head.LiveHead`). Inputs are
batched by length, so a batch pads little.

On disk (:meth:`LiveBundle.save_pretrained`) a bundle is ``live_bundle.json`` (the backbone by name,
source, revision and fingerprints, how texts are cut, and the heads) plus one run folder per head
under ``heads/`` (``config.json`` and ``weights.safetensors``: no pickle). The backbone is never
copied: :meth:`LiveBundle.from_pretrained` loads it by reference and refuses one whose fingerprint
differs.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from ..backbone.loader import Backbone, load_backbone, weight_files, wrap_backbone
from ..backbone.placement import tokens_of
from ..core.confine import OwnedFolder, lstat_or_none
from ..core.files import write_text_atomic
from ..core.option_names import option
from ..core.threads import computes
from ..errors import CacheMismatchError, ConfigError
from ..extraction.forward import pad_windows, token_index
from ..heads.estimator import LayerHead
from ..heads.run_folders.persistence import CONFIG_FILE, WEIGHTS_FILE
from ..heads.run_folders.provenance import short_digest
from ..store.batches import consecutive_starts, padded_positions
from .forward import PartialForward
from .head import LiveHead, text_settings
from .inputs import Input, as_records, encode_inputs
from .outputs import bundle_folder, unwritable
from .results import BundlePredictions, HeadPredictions

BUNDLE_FILE = "live_bundle.json"
HEADS_FOLDER = "heads"
BUNDLE_FORMAT = 1

RunPath = str | os.PathLike


class LiveBundle:
    """A frozen backbone and trained heads that all read its states, joined for prediction.

    Build one with :meth:`from_runs`, :meth:`from_pretrained` or :func:`attach`; the constructor
    takes a backbone and heads already loaded and checks that they belong together.

    Args:
        backbone: the frozen model (loaded with ``words_input=True`` when a head labels words).
        heads: the runs, bound to the backbone's states.
        max_length, stride: how texts are cut (the runs' caches'; default: the backbone's limit, truncation).
    """

    def __init__(self, backbone: Backbone, heads: Sequence[LiveHead], *, max_length: int | None = None,
                 stride: int | None = None) -> None:
        if not heads:
            raise ConfigError("A live bundle needs at least one run; pass the run folders `layercache train-head` "
                              "wrote.")
        for live in heads:
            _check_fingerprints(backbone, live)
        self.backbone, self.heads = backbone, list(heads)
        self.max_length = max_length or backbone.max_length
        self.stride = stride
        self.words = any(h.needs_words for h in self.heads)
        self.keep = sorted({i for h in self.heads for i in h.states})  # every state some head reads
        self.forward = PartialForward(backbone)

    # --- building ------------------------------------------------------------------------------
    @classmethod
    def from_runs(cls, runs: Sequence[RunPath], backbone: str | None = None, *, device: str = "auto",
                  dtype: str = "auto", allow_pickle: bool = False, device_map: str | None = None,
                  max_memory: Mapping[str, int | str] | None = None) -> "LiveBundle":
        """Load the run folders ``runs`` and the backbone they were trained on (or ``backbone``: a name or folder).

        The backbone is loaded once, with the maximum length of the runs' caches, ready for words
        when a head labels words; ``device_map`` and ``max_memory`` split one larger than a device
        (:func:`~layercache.backbone.loader.load_backbone`).
        """
        heads, settings = _read_runs(runs)
        name = backbone or settings["model"]
        loaded = load_backbone(name, device=device, dtype=dtype, max_length=settings["max_length"],
                               words_input=settings["words"], allow_pickle=allow_pickle, device_map=device_map,
                               max_memory=max_memory)
        return cls._bind(loaded, heads, settings)

    @classmethod
    def _bind(cls, backbone: Backbone, runs: list[tuple[str, RunPath, LayerHead]], settings: dict) -> "LiveBundle":
        heads = [LiveHead.bind(head, backbone.layer_names, name, run) for name, run, head in runs]
        return cls(backbone, heads, max_length=settings["max_length"], stride=settings["stride"])

    # --- predicting ----------------------------------------------------------------------------
    @computes
    def predict(self, inputs: Input | Sequence[Input], *, batch_size: int = 32,
                progress: Callable[[int], None] | None = None) -> BundlePredictions:
        """Every head's predictions for ``inputs`` (texts, or lists of pre-split words), in input order.

        Inputs are sorted by length into batches of ``batch_size``; each batch costs one backbone
        forward pass, stopped after the deepest state any head reads. ``progress`` is called with
        the number of inputs of each finished batch.
        """
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}.")
        records = as_records(inputs, self.words)
        examples = encode_inputs(self.backbone.tokenizer, records, max_length=self.max_length, stride=self.stride,
                                 causal=self.backbone.is_causal)
        lengths = np.array([ex.n_tokens for ex in examples], dtype=np.int64)  # (n,) stored tokens
        order = np.argsort(lengths, kind="stable")  # by length: little padding per batch
        n_words = np.array([len(w) for w in records.words], dtype=np.int64) if self.words else None  # (n,)
        parts: dict[str, dict[str, list]] = {h.name: {t.name: [] for t in h.tasks} for h in self.heads}
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            batch = self._batch([examples[r] for r in rows], None if n_words is None else n_words[rows])
            for name, tasks in batch.items():
                for task, value in tasks.items():
                    parts[name][task].append(value)
            if progress is not None:
                progress(len(rows))
        inverse = np.argsort(order, kind="stable")  # sorted position of each input
        texts = records.texts if records.texts is not None else [" ".join(w) for w in records.words]
        return BundlePredictions(texts=list(texts), heads=[
            HeadPredictions.collect(h.name, h.tasks, parts[h.name], inverse) for h in self.heads])

    def _batch(self, examples, n_words: np.ndarray | None) -> dict[str, dict[str, tuple]]:
        """One forward pass over a batch of encoded inputs; head -> task -> (labels, probabilities)."""
        ids, attn = pad_windows(examples, self.backbone.tokenizer.pad_token_id)  # (R, W) each
        states = self.forward.states(ids, attn, self.keep)  # state -> (R, W, D)
        device = self.backbone.device  # a split model's states lie where their blocks ran: gathered here
        where = token_index(examples, attn)  # (t,) stored tokens in the flattened R * W
        lengths = np.array([ex.n_tokens for ex in examples], dtype=np.int64)  # (B,)
        at = padded_positions(consecutive_starts(lengths), lengths)  # (B, T) layout of every feed
        word_ids = np.concatenate([ex.word_ids for ex in examples]) if self.words else None  # (t,)
        flat_states = {k: tokens_of(s, where, device) for k, s in states.items()}  # state -> (t, D)
        lengths_t = torch.from_numpy(lengths).to(device)
        out = {}
        for live in self.heads:
            flat = torch.stack([flat_states[k] for k in live.states], dim=1)  # (t, S, D)
            out[live.name] = live.predict(flat, lengths_t, at, word_ids, n_words)
        return out

    # --- saving --------------------------------------------------------------------------------
    def describe(self) -> dict:
        """The bundle's ``live_bundle.json``: the backbone by reference, how texts are cut, the heads."""
        b = self.backbone
        return {"format": BUNDLE_FORMAT, "kind": "layercache-live-bundle",
                "backbone": {"name": b.name, "source": b.source, "revision": b.revision, "fingerprint": b.fingerprint,
                             "tokenizer_fingerprint": b.tokenizer_fingerprint, "words_input": self.words},
                "max_length": self.max_length, "stride": self.stride,
                "heads": [{"name": h.name, "folder": f"{HEADS_FOLDER}/{i:02d}",
                           "tasks": [t.name for t in h.tasks], "states": h.head.layer_names_}
                          for i, h in enumerate(self.heads)]}

    def save_pretrained(self, folder: RunPath) -> Path:
        """Write the bundle to ``folder``: ``live_bundle.json`` and one run folder (JSON + safetensors) per head.

        Everything is written below ``folder`` only (:func:`~.outputs.bundle_folder`): a symbolic
        link, a FIFO or another special file where a folder or file of the bundle goes is refused
        before anything is written, and ``live_bundle.json`` is replaced atomically, last.
        """
        owned = bundle_folder(folder)
        config = self.describe()
        places = [entry["folder"].split("/") for entry in config["heads"]]
        _check_places(owned, places)
        try:
            for live, parts in zip(self.heads, places):
                run = owned.folder(*parts, create=True)
                for name in (CONFIG_FILE, WEIGHTS_FILE):
                    owned.file(*parts, name)
                live.head.save(run)
            write_text_atomic(owned.file(BUNDLE_FILE), json.dumps(config, indent=2) + "\n")
        except OSError as err:
            raise unwritable(f"The bundle folder {folder}", err) from None
        return Path(folder)

    @classmethod
    def from_pretrained(cls, folder: RunPath, *, device: str = "auto", dtype: str = "auto",
                        allow_pickle: bool = False, device_map: str | None = None,
                        max_memory: Mapping[str, int | str] | None = None) -> "LiveBundle":
        """Load a saved bundle: its backbone by the name it records, refused when the fingerprint differs
        (``device_map``, ``max_memory``: as :meth:`from_runs`)."""
        config = read_bundle_config(folder)
        ref = config["backbone"]
        backbone = load_backbone(ref["source"], device=device, dtype=dtype, max_length=config["max_length"],
                                 words_input=bool(ref.get("words_input")), allow_pickle=allow_pickle,
                                 device_map=device_map, max_memory=max_memory)
        backbone.name = ref["name"]
        if backbone.fingerprint != ref["fingerprint"]:
            raise CacheMismatchError(
                f"The backbone {ref['name']!r} now has different weights ({short_digest(backbone.fingerprint)}) than "
                f"the bundle {folder} was saved with ({short_digest(ref['fingerprint'])}); restore that backbone "
                f"(revision {ref.get('revision') or 'unknown'}) or rebuild the bundle from its runs.")
        runs = [(h["name"], Path(folder) / h["folder"], LayerHead.load(Path(folder) / h["folder"]))
                for h in config["heads"]]
        return cls._bind(backbone, runs, {"max_length": config["max_length"], "stride": config["stride"]})


def _check_places(owned: OwnedFolder, places: list[list[str]]) -> None:
    """Refuse a link or special file anywhere the bundle will write, before the first byte is written."""
    for parts in places:
        for depth in range(1, len(parts) + 1):
            if lstat_or_none(owned.path(*parts[:depth])) is None:
                break  # made afresh, below real folders
            owned.folder(*parts[:depth])
        else:
            for name in (CONFIG_FILE, WEIGHTS_FILE):
                owned.file(*parts, name)
    owned.file(BUNDLE_FILE)


def attach(model: torch.nn.Module, tokenizer, runs: Sequence[RunPath], *, name: str | None = None) -> LiveBundle:
    """A bundle of ``runs`` on a Hugging Face ``model`` and fast ``tokenizer`` the caller already holds.

    A service that runs the backbone for its own task gets the heads from the same weights, with
    no second copy. The model is used where it is (device, dtype) and must be in eval mode; the
    tokenizer is copied, so preparing it (a pad token, right padding) leaves the caller's alone.
    Its fingerprint is that of the checkpoint it was loaded from (``model.config._name_or_path``),
    so it matches runs trained on caches of that checkpoint; any difference is refused.
    """
    if model.training:
        raise ConfigError("The model is in training mode, where dropout changes every state; call model.eval() "
                          "before attaching heads.")
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError("attach needs a fast tokenizer (word alignment); load it with AutoTokenizer.")
    heads, settings = _read_runs(runs)
    source = str(getattr(model.config, "_name_or_path", "") or settings["model"])
    revision = getattr(model.config, "_commit_hash", None)
    files = weight_files(source, revision) if source else None
    backbone = wrap_backbone(model, copy.deepcopy(tokenizer), name=name or settings["model"], source=source,
                             max_length=settings["max_length"], words_input=settings["words"], revision=revision,
                             files=files)
    return LiveBundle._bind(backbone, heads, settings)


def read_bundle_config(folder: RunPath) -> dict:
    """A saved bundle's ``live_bundle.json``, refused in one sentence when missing or damaged."""
    path = Path(folder) / BUNDLE_FILE
    if not path.is_file():
        raise ConfigError(f"{folder} is not a live bundle (it has no {BUNDLE_FILE}); pass the folder "
                          "save_pretrained wrote.")
    try:
        config = json.loads(path.read_text())
        ref, heads = config["backbone"], config["heads"]
        ok = (isinstance(ref, dict) and all(isinstance(ref.get(k), str) for k in ("name", "source", "fingerprint"))
              and isinstance(heads, list) and heads
              and all(isinstance(h, dict) and isinstance(h.get("folder"), str) and isinstance(h.get("name"), str)
                      and ".." not in Path(h["folder"]).parts and not Path(h["folder"]).is_absolute() for h in heads)
              and isinstance(config.get("max_length"), int) and isinstance(config.get("stride"), (int, type(None))))
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise ConfigError(f"The bundle file {path} is damaged or from another layercache version; save the bundle "
                          "again from its runs.")
    return config


def run_names(runs: Sequence[RunPath]) -> list[str]:
    """How a bundle's results name each of ``runs``: its folder's name, with ``-2``, ``-3`` ... for a repeat."""
    names, seen = [], {}
    for run in runs:
        base = Path(run).name or "head"
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return names


def _read_runs(runs: Sequence[RunPath]) -> tuple[list[tuple[str, RunPath, LayerHead]], dict]:
    """The runs with unique names, and what they must agree on: backbone name, max length, stride, words."""
    if isinstance(runs, (str, os.PathLike)):
        runs = [runs]
    if not runs:
        raise ConfigError("A live bundle needs at least one run; pass the run folders `layercache train-head` wrote.")
    named, infos = [], []
    for name, run in zip(run_names(runs), runs):
        head = LayerHead.load(run)  # refuses a folder that is not a run, in one sentence
        named.append((name, run, head))
        infos.append((run, head))
    first_run, first = infos[0]
    max_length, stride = text_settings(first)
    trained_on = first.cache_info_
    for run, head in infos[1:]:
        recorded = head.cache_info_
        if recorded.model_fingerprint != trained_on.model_fingerprint:
            raise CacheMismatchError(
                f"The run {run} was trained on another backbone ({recorded.model!r}) than {first_run} "
                f"({trained_on.model!r}); bundle only runs trained on caches of one backbone.")
        if text_settings(head) != (max_length, stride):
            raise ConfigError(
                f"The run {run} was trained on texts cut at max length {text_settings(head)[0]} with stride "
                f"{text_settings(head)[1]}, {first_run} at {max_length} with stride {stride}; one forward pass "
                f"cannot serve both, so bundle runs whose caches were extracted with the same {option('max_length')} "
                f"and {option('stride')}.")
    words = any(t.kind == "token" for _, head in infos for t in head.tasks_)
    return named, {"model": trained_on.model, "max_length": max_length, "stride": stride, "words": words}


def _check_fingerprints(backbone: Backbone, live: LiveHead) -> None:
    """Refuse a head trained on another backbone's (or tokenizer's) states, naming the run and the fix."""
    info = live.head.cache_info_
    for key, mine, what in (("model_fingerprint", backbone.fingerprint, "weights"),
                            ("tokenizer_fingerprint", backbone.tokenizer_fingerprint, "tokenizer")):
        recorded = getattr(info, key)
        if recorded != mine:
            raise CacheMismatchError(
                f"The run {live.name!r} was trained on {info.model!r} ({key} {short_digest(recorded)}), but the "
                f"backbone {backbone.name!r} has different {what} ({short_digest(mine)}); load the backbone the run "
                "was trained with, or train the head on a cache of this one.")

"""Load a frozen backbone (any Hugging Face encoder, decoder or encoder-decoder) and its tokenizer.

The backbone is put in eval mode with gradients off, so dropout never touches cached states.
For encoder-decoders (T5, BART) only the encoder runs: its states are what a head would read.
States are named ``embeddings, layer_1 … layer_L``; :attr:`Backbone.final_norm` says whether the
model has a final norm and whether ``layer_L`` is taken after it.

Weights load from safetensors files; pickle checkpoints (``pytorch_model.bin``) can run arbitrary
code when unpickled, so they load only with ``allow_pickle=True``. The model's fingerprint covers
every weight (the checkpoint files' bytes) and the config; the tokenizer's covers everything that
changes how a text becomes ids. A cache, a resumed run and a trained head all compare them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
import xxhash

from ..core.checksum import file_checksum, json_sha256
from ..core.devices import FORWARD_DTYPE_NAMES, resolve_device
from ..core.hub_access import cache_only
from ..core.option_names import option
from ..errors import ConfigError, ModelLoadError
from .location import hub_unavailable, looks_like_folder, offline_refusal, resolve_model_source
from .placement import (
    SplitLoad,
    check_device_map,
    describe_split,
    input_device,
    keep_states_in_place,
    placement,
)
from .words import word_prefix

log = logging.getLogger("layercache")

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

FORWARD_DTYPES = {name: getattr(torch, name) for name in FORWARD_DTYPE_NAMES}
# Attribute names of a model's last norm after its blocks: GPT-2 (ln_f), Llama (norm), T5 encoder
# (final_layer_norm), Phi (final_layernorm), mBART / Whisper encoders (layer_norm).
FINAL_NORM_NAMES = ("ln_f", "norm", "final_layer_norm", "final_layernorm", "layernorm_embedding_final", "layer_norm")
# Beyond this, a tokenizer's model_max_length is a placeholder ("no limit"), not the model's limit.
_NO_LIMIT = 1_000_000
# Checkpoint files in the order from_pretrained looks for them: single file first, then a sharded index.
SAFETENSORS_FILES = ("model.safetensors", "model.safetensors.index.json")
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
# Config keys that name where or how a model was loaded, not what it computes.
_CONFIG_PROVENANCE = {"transformers_version", "_name_or_path", "torch_dtype", "dtype", "_commit_hash"}
# Tokenizer attributes that change the ids of a text (most live in the backend json as well).
_TOKENIZER_SETTINGS = ("truncation_side", "padding_side", "split_special_tokens", "add_bos_token", "add_eos_token",
                       "add_prefix_space", "do_lower_case", "model_max_length")
_TENSOR_CHUNK = 1 << 24  # elements hashed at once when a model has no files: bounds the float32 copy to 64 MiB


@dataclass
class Backbone:
    """A frozen model ready to produce hidden states, with what the manifest must record."""

    name: str
    """The name the user gave (hub id or alias), or the absolute path of a local model folder."""
    source: str
    """What ``from_pretrained`` loaded (a hub id or a local folder)."""
    model: torch.nn.Module
    """The module that returns hidden states (the encoder of an encoder-decoder)."""
    tokenizer: object
    kind: str
    """``encoder``, ``decoder`` or ``encoder-decoder``."""
    device: torch.device
    dtype: torch.dtype
    n_layers: int
    hidden_size: int
    max_length: int
    final_norm: str
    """``none`` (post-LN encoders), ``applied`` (layer_L is after the final norm) or ``not-applied``."""
    revision: str | None
    fingerprint: str
    tokenizer_fingerprint: str
    pad_from: str | None = None
    """Which token stands in as padding when the tokenizer had none (decoders)."""
    placement: dict[str, int] | None = None
    """Modules per device of a model split by ``device_map`` (``{"cuda:0": 14, "disk": 3}``); None on one device.
    A split model's hidden states each stay on the device that computed them."""

    @property
    def layer_names(self) -> list[str]:
        """State names in ``hidden_states`` order: ``embeddings``, then ``layer_1`` ... ``layer_L``."""
        return ["embeddings"] + [f"layer_{i}" for i in range(1, self.n_layers + 1)]

    @property
    def is_causal(self) -> bool:
        """Whether each token sees only the tokens before it (decoder-only backbones)."""
        return self.kind == "decoder"

    @torch.inference_mode()
    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """All L+1 states for a padded batch: a tuple of (B, T, D) tensors.

        Each is on the device that computed it: :attr:`device` for a model on one device, the device
        of its block for a split one (:attr:`placement`; read them with
        :func:`~layercache.backbone.placement.tokens_of`).
        """
        out = self.model(input_ids=input_ids.to(self.device), attention_mask=attention_mask.to(self.device),
                         output_hidden_states=True, return_dict=True)
        states = out.hidden_states
        if len(states) != self.n_layers + 1:
            raise RuntimeError(f"expected {self.n_layers + 1} hidden states, the model returned {len(states)}")
        return states

    def describe(self) -> dict:
        """The manifest's ``model`` entry."""
        return {
            "name": self.name, "source": self.source, "revision": self.revision, "fingerprint": self.fingerprint,
            "architecture": type(self.model).__name__, "model_type": getattr(self.model.config, "model_type", None),
            "kind": self.kind, "n_layers": self.n_layers, "hidden_size": self.hidden_size,
            "final_norm": self.final_norm, "forward_dtype": str(self.dtype).replace("torch.", ""),
            "device": str(self.device), "placement": self.placement,
        }

    def describe_tokenizer(self) -> dict:
        """The manifest's ``tokenizer`` entry (class, fingerprint, maximum length, padding)."""
        return {"class": type(self.tokenizer).__name__, "fingerprint": self.tokenizer_fingerprint,
                "max_length": self.max_length, "pad_from": self.pad_from,
                "padding_side": "right"}


def resolve_forward_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The torch dtype of the forward pass; ``auto``: float32 off CUDA, else bfloat16 where supported, else float16."""
    if dtype == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if dtype not in FORWARD_DTYPES:
        raise ConfigError(f"Forward dtype {dtype!r} is not supported; choose auto, {', '.join(FORWARD_DTYPES)}.")
    return FORWARD_DTYPES[dtype]


def load_backbone(name: str = DEFAULT_MODEL, *, device: str = "auto", dtype: str = "auto",
                  max_length: int | None = None, words_input: bool = False, allow_pickle: bool = False,
                  device_map: str | None = None, max_memory: dict | None = None) -> Backbone:
    """Load ``name`` (hub id, bundled alias or local folder) frozen, on ``device`` in ``dtype``.

    ``device_map`` (``auto``, ``balanced``, ``balanced_low_0``, ``sequential``; needs accelerate)
    splits a model that fits no single device over the GPUs, CPU memory and disk, within
    ``max_memory`` per device (``{"cuda:0": "20GiB", "cpu": "60GiB"}``) when given: see
    :mod:`~layercache.backbone.placement`. ``device`` must then be ``auto``.

    ``words_input`` prepares the tokenizer for pre-split words: RoBERTa-like tokenizers load with
    ``add_prefix_space`` as before, and any tokenizer whose words would still lose their leading
    space gets it back at encoding (see :func:`~layercache.backbone.words.word_prefix`), which
    the tokenizer fingerprint then records. Weights load from safetensors files; a model that only
    has pickle weights (``pytorch_model.bin``) is refused unless ``allow_pickle``.
    """
    source = resolve_model_source(name)
    if looks_like_folder(source) and not Path(source).expanduser().is_dir():
        raise ModelLoadError(f"Model folder {source} does not exist; pass a hub id or a folder with config.json.")
    if source == name and Path(source).expanduser().is_dir():
        # A local folder is recorded as an absolute path (manifest, run configs), so that verify and
        # predict find it from any working directory instead of taking "./my-model" for a hub id.
        # The fingerprint, not the path, is what identifies the model: the configuration hash covers
        # only the fingerprint, so a cache that recorded a relative path resumes under either form.
        name = source = str(Path(source).expanduser().resolve())
    check_device_map(device_map, device, max_memory)
    torch_device = resolve_device(device)
    torch_dtype = resolve_forward_dtype(dtype, torch_device)
    unreachable = hub_unavailable(source)  # then only the local Hugging Face cache is read: no request, no retry
    with cache_only(unreachable is not None):
        config, tokenizer, full, split = _load_parts(name, source, unreachable, torch_dtype=torch_dtype,
                                                     words_input=words_input, allow_pickle=allow_pickle,
                                                     device_map=device_map, max_memory=max_memory)
    if not getattr(tokenizer, "is_fast", False):
        raise ModelLoadError(f"The tokenizer of {name!r} is not a fast tokenizer; layercache needs one "
                             "for word alignment (install `tokenizers` or convert the tokenizer).")
    revision = getattr(config, "_commit_hash", None)
    if split is not None:
        # Placed block by block already: frozen in place, inputs go where the embeddings compute.
        full.eval().requires_grad_(False)
        keep_states_in_place(full)
        backbone = wrap_backbone(full, tokenizer, name=name, source=source, max_length=max_length,
                                 words_input=words_input, revision=revision,
                                 files=weight_files(source, revision, allow_pickle),
                                 placed=(input_device(full), torch_dtype))
        backbone.placement = placement(full)
        log.info(describe_split(full, device_map, backbone.device))
        split.own(backbone)
        return backbone
    return wrap_backbone(full, tokenizer, name=name, source=source, device=torch_device, max_length=max_length,
                         words_input=words_input, revision=revision,
                         files=weight_files(source, revision, allow_pickle))


def _load_parts(name: str, source: str, unreachable: str | None, *, torch_dtype: torch.dtype, words_input: bool,
                allow_pickle: bool, device_map: str | None, max_memory: dict | None):
    """(config, tokenizer, model, split load or None) of ``source``, each failure one sentence.

    ``unreachable``: why the hub is not asked (only the local cache is read), or None.
    """
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    hub = {"local_files_only": True} if unreachable else {}
    try:
        config = AutoConfig.from_pretrained(source, **hub)
    except (OSError, ValueError, KeyError) as err:
        if unreachable:
            raise ModelLoadError(offline_refusal(name, unreachable)) from err
        raise ModelLoadError(
            f"Could not load model {name!r} ({_first_line(err)}); check the name, or pass a local folder "
            "with config.json and weights (the hub is unreachable offline)."
        ) from err
    local = Path(source).expanduser().is_dir()
    if local and not allow_pickle and not _folder_files(source, SAFETENSORS_FILES) \
            and _folder_files(source, PICKLE_FILES):
        raise ModelLoadError(_pickle_refusal(name))
    # None lets transformers fall back to pickle weights when a hub model has no safetensors.
    use_safetensors = True if not allow_pickle else None
    split = None if device_map is None else SplitLoad(device_map, max_memory)
    try:
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, **hub, **_prefix_space_kwargs(config, words_input))
            full = AutoModel.from_pretrained(source, dtype=torch_dtype, use_safetensors=use_safetensors, **hub,
                                             **({} if split is None else split.kwargs))
        except (OSError, ValueError, KeyError) as err:
            if unreachable:
                raise ModelLoadError(offline_refusal(name, unreachable)) from err
            if not local and not allow_pickle and "safetensors" in str(err):
                raise ModelLoadError(_pickle_refusal(name, maybe=True)) from err
            raise ModelLoadError(f"Could not load model {name!r} ({_first_line(err)}); check that the folder "
                                 "holds both weights and tokenizer files.") from err
    except BaseException:
        if split is not None:
            split.remove()  # whatever went wrong, the half-written offload folder goes now, not at exit
        raise
    return config, tokenizer, full, split


def wrap_backbone(full: torch.nn.Module, tokenizer, *, name: str, source: str, device: torch.device | None = None,
                  max_length: int | None = None, words_input: bool = False, revision: str | None = None,
                  files: list[Path] | None = None,
                  placed: tuple[torch.device, torch.dtype] | None = None) -> Backbone:
    """A :class:`Backbone` around a Hugging Face model and fast tokenizer that are already loaded.

    Of an encoder-decoder only the encoder runs. With ``device`` the model is put in eval mode with
    gradients off and moved there (what :func:`load_backbone` does); with ``None`` it is left as it
    is, on the device and in the dtype of its parameters (a model a caller already holds).
    ``files``: the checkpoint it was loaded from, whose bytes make the fingerprint
    (:func:`model_fingerprint`; without them its tensors do). ``placed``: the input device and dtype
    of a model split over devices (whose offloaded parameters are on ``meta``). The tokenizer gets a pad token when it
    has none and pads on the right, as :func:`load_backbone` prepares it (both enter its fingerprint).
    """
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    config = full.config
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    model = full.get_encoder() if encoder_decoder else full
    if encoder_decoder:
        kind = "encoder-decoder"
    elif config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        kind = "encoder"
    else:
        kind = "decoder"
    if device is not None:
        model.eval().requires_grad_(False).to(device)
    first_device, first_dtype = placed or _first_parameter(model)
    pad_from = None
    if tokenizer.pad_token is None:  # decoders: any id works, padded positions are masked and dropped
        pad_from = "eos_token" if tokenizer.eos_token is not None else "unk_token"
        tokenizer.pad_token = getattr(tokenizer, pad_from)
    tokenizer.padding_side = "right"

    n_layers = _num_layers(config)
    hidden = _hidden_size(config)
    limit = _max_length(config, tokenizer)
    if max_length is not None:
        if max_length < tokenizer.num_special_tokens_to_add() + 1 or max_length > limit:
            raise ConfigError(f"{option('max_length', max_length)} is outside what {name!r} supports "
                              f"({tokenizer.num_special_tokens_to_add() + 1} to {limit}).")
        limit = max_length
    words_prefix = word_prefix(tokenizer) if words_input else ""
    backbone = Backbone(
        name=name, source=source, model=model, tokenizer=tokenizer, kind=kind, device=first_device,
        dtype=first_dtype, n_layers=n_layers, hidden_size=hidden, max_length=limit, final_norm="none",
        revision=revision, fingerprint=model_fingerprint(model, files),
        tokenizer_fingerprint=tokenizer_fingerprint(tokenizer, word_prefix=words_prefix), pad_from=pad_from,
    )
    backbone.final_norm = _detect_final_norm(backbone)
    return backbone


def _first_parameter(model: torch.nn.Module) -> tuple[torch.device, torch.dtype]:
    first = next(model.parameters())
    return first.device, first.dtype


def _prefix_space_kwargs(config, words_input: bool) -> dict:
    # Byte-level BPE tokenizers lose the space before pre-split words unless told each word starts after
    # one. These model types have always loaded with add_prefix_space (their caches depend on it, the first
    # word included); every other tokenizer that loses the space is mended at encoding by word_prefix,
    # since add_prefix_space does nothing to a plain tokenizer.json backend (Llama 3, Qwen).
    if words_input and config.model_type in {"roberta", "gpt2", "bart", "longformer", "gpt_neox", "xlm-roberta",
                                              "camembert", "deberta", "opt", "mpnet"}:
        return {"add_prefix_space": True}
    return {}


def _config_int(config, keys: tuple[str, ...], what: str) -> int:
    """The first of ``keys`` that the config holds as an int (architectures name one number differently);
    refuses, saying ``what`` could not be told, when none does."""
    for key in keys:
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    raise ModelLoadError(f"Cannot tell {what}; please report it.")


def _num_layers(config) -> int:
    return _config_int(config, ("num_hidden_layers", "n_layer", "num_layers", "encoder_layers"),
                       f"how many layers a {config.model_type} model has")


def _hidden_size(config) -> int:
    return _config_int(config, ("hidden_size", "d_model", "n_embd", "dim"),
                       f"the hidden size of a {config.model_type} model")


def _max_length(config, tokenizer) -> int:
    limit = tokenizer.model_max_length if tokenizer.model_max_length < _NO_LIMIT else None
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            # RoBERTa reserves padding_idx + 1 positions: 514 embeddings serve 512 tokens.
            usable = value - (getattr(config, "pad_token_id", 0) or 0) - 1 if config.model_type in {
                "roberta", "xlm-roberta", "camembert", "longformer"} else value
            limit = usable if limit is None else min(limit, usable)
            break
    return int(limit or 512)


def _detect_final_norm(backbone: Backbone) -> str:
    """Does the model have a final norm, and is the last hidden state taken after it?"""
    model = backbone.model
    if not any(isinstance(getattr(model, n, None), torch.nn.Module) for n in FINAL_NORM_NAMES):
        return "none"
    ids = backbone.tokenizer("layer cache", return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        out = model(input_ids=ids.to(backbone.device), output_hidden_states=True, return_dict=True)
    same = torch.allclose(out.hidden_states[-1].float(), out.last_hidden_state.float())
    return "applied" if same else "not-applied"


def _pickle_refusal(name: str, maybe: bool = False) -> str:
    has = "has no safetensors weights (perhaps only pytorch_model.bin)" if maybe else \
        "has only pickle weights (pytorch_model.bin)"
    return (f"Model {name!r} {has}, and pickle files can run arbitrary code when loaded; "
            f"pass {option('allow_pickle', True)} only for a source you trust, or convert the weights to safetensors.")


def _folder_files(folder: str | Path, names: tuple[str, ...]) -> list[Path] | None:
    """The checkpoint files of a local folder for the first of ``names`` present (shards of an index)."""
    folder = Path(folder).expanduser()
    for name in names:
        path = folder / name
        if path.is_file():
            return _with_shards(path, lambda shard: folder / shard)
    return None


def _with_shards(path: Path, locate) -> list[Path] | None:
    """``[path]`` for a single checkpoint; for an index, every shard it names (``locate`` finds one)."""
    if not path.name.endswith(".index.json"):
        return [path]
    try:
        shards = sorted(set(json.loads(path.read_text())["weight_map"].values()))
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    found = [locate(shard) for shard in shards]
    return found if all(f is not None and Path(f).is_file() for f in found) else None


def weight_files(source: str, revision: str | None = None, allow_pickle: bool = False) -> list[Path] | None:
    """The checkpoint files ``from_pretrained`` loads for ``source``, or ``None`` when they cannot be found.

    A local folder is looked into; a hub id is looked up in the local Hugging Face cache at
    ``revision`` (the commit the config came from), with no network access. Safetensors files
    come first, as ``from_pretrained`` prefers them; pickle files count only with ``allow_pickle``.
    """
    names = SAFETENSORS_FILES + (PICKLE_FILES if allow_pickle else ())
    if Path(source).expanduser().is_dir():
        return _folder_files(source, names)
    from huggingface_hub import try_to_load_from_cache

    def cached(filename: str) -> Path | None:
        found = try_to_load_from_cache(source, filename, revision=revision)
        return Path(found) if isinstance(found, str) else None  # a sentinel object means "known absent"

    for name in names:
        path = cached(name)
        if path is not None:
            return _with_shards(path, cached)
    return None


def model_fingerprint(model: torch.nn.Module, files: list[Path] | None = None) -> str:
    """A hash of every weight and the config: ``"xxh3_128-files:<hex>"`` or ``"xxh3_128-tensors:<hex>"``.

    With ``files`` (the checkpoint ``from_pretrained`` read), their bytes are hashed, streamed:
    the same checkpoint has one fingerprint whatever dtype or device it runs in. A model with no
    files (built in memory) hashes its state dict instead, each tensor as float32 bytes (other
    dtypes as they are) in name order. The scheme leads the string, so fingerprints made by
    different schemes never compare equal by accident.
    """
    digest = xxhash.xxh3_128()
    config = {k: v for k, v in model.config.to_dict().items() if k not in _CONFIG_PROVENANCE}
    digest.update(json.dumps(config, sort_keys=True, default=str).encode())
    if files:
        for path in sorted(files, key=lambda f: Path(f).name):
            digest.update(f"{Path(path).name}:{file_checksum(path)}".encode())
        return f"xxh3_128-files:{digest.hexdigest()}"
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}:{tuple(tensor.shape)}:".encode())
        flat = tensor.detach().reshape(-1)
        for start in range(0, flat.numel(), _TENSOR_CHUNK):
            chunk = flat[start:start + _TENSOR_CHUNK]
            chunk = chunk.float() if chunk.is_floating_point() else chunk
            digest.update(chunk.cpu().contiguous().numpy().tobytes())
    return f"xxh3_128-tensors:{digest.hexdigest()}"


def tokenizer_fingerprint(tokenizer, word_prefix: str = "") -> str:
    """``"sha256:<hex>"`` of everything that decides a text's ids.

    That is the backend (normalizer, pre-tokenizer, vocabulary and merges, added tokens,
    post-processor with its special-token template), the added and special tokens as transformers
    sees them, and settings such as the truncation side. The backend's truncation and padding
    state is left out: every call sets it anew from layercache's own options (the maximum
    length is recorded beside the fingerprint), and it changes once the tokenizer has been used.
    ``word_prefix`` is what pre-split words get before them (``" "`` where they would lose their
    space, see :func:`~layercache.backbone.words.word_prefix`); it is hashed only when set,
    so text input and tokenizers that need nothing keep their fingerprints, while a cache of
    words made before the prefix existed (tokens of the wrong text) no longer matches.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        content = {k: v for k, v in json.loads(backend.to_str()).items() if k not in {"truncation", "padding"}}
    else:
        content = sorted(tokenizer.get_vocab().items())
    added = {str(i): {k: getattr(t, k, None) for k in ("content", "single_word", "lstrip", "rstrip", "normalized",
                                                       "special")} if not isinstance(t, str) else t
             for i, t in sorted(getattr(tokenizer, "added_tokens_decoder", {}).items())}
    payload = {"class": type(tokenizer).__name__, "backend": content, "added_tokens": added,
               "special_tokens": getattr(tokenizer, "special_tokens_map", {}),
               "settings": {k: getattr(tokenizer, k, None) for k in _TOKENIZER_SETTINGS}}
    if word_prefix:
        payload["word_prefix"] = word_prefix
    return f"sha256:{json_sha256(payload)}"


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__

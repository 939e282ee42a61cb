"""What extraction saves beside the shards from the model and its tokenizer: the vocabulary and the logit lens.

The analyses that read a cache never load a model, so anything they need of it is written here,
while the backbone is loaded: the tokenizer's id -> token table (``vocab.json``, every cache) and,
for a decoder whose token states are stored, its final norm and unembedding
(``lens.safetensors``). The formats, and their reading, live in :mod:`layercache.store.vocabulary`
and :mod:`layercache.store.lens`.

Both files follow from the model and tokenizer fingerprints, which the configuration hash covers,
so a resume keeps files that still match their checksums and rewrites any that do not, and a
cache written before these files existed gets them on its next run without a new hash.

The ``--project K`` basis (``projection.safetensors``) is different: every shard was projected
with it, so it can only be written again as the very bytes the manifest recorded.
:func:`restore_projection` fits it again on the same seeded sample and writes it only when the fit
reproduces those bytes; otherwise it refuses in one sentence and leaves the file as it found it.
Either way a link, a FIFO or a socket standing at a side file's name is removed (never what a link
points to) and a folder there is refused (it may hold someone's files).

How the lens is read off the model, since it must compute what the model computes:

- the final norm is the module the model's last hidden state comes out of (found by name,
  :data:`~layercache.backbone.loader.FINAL_NORM_NAMES`, at the top or one block down, as OPT's
  ``decoder.final_layer_norm``), confirmed by running the model once with a hook on it; that run
  also says whether ``layer_L`` is stored before or after it;
- its formula (LayerNorm or RMSNorm, a ``1 + weight`` scale) is whichever of them a float32 copy
  of the module reproduces on test inputs at two scales, not a guess from its class name;
- the unembedding is the LM head's weight read from the checkpoint (the loader loads the model
  without its head), or the input embeddings when ``tie_word_embeddings`` is set.
"""

from __future__ import annotations

import copy
import json
import logging
import stat
from pathlib import Path

import torch

from ..backbone.loader import FINAL_NORM_NAMES, Backbone, weight_files
from ..core.checksum import data_checksum
from ..core.confine import OwnedFolder, lstat_or_none
from ..core.option_names import option
from ..errors import CacheError
from ..store.lens import FinalNorm, LensWeights, write_lens
from ..store.manifest import Manifest
from ..store.projection import projection_bytes, write_projection_bytes
from ..store.schema import SIDE_FILES
from ..store.side_checks import side_file_problem
from ..store.vocabulary import Vocabulary, WordMarkers, write_vocabulary
from .held import HeldStates
from .plan import SplitPlan
from .projection_fit import fit_projection

log = logging.getLogger("layercache")

_PROBE_TEXT = "The lamp is good today , and the keys are bad ."
_EPS_NAMES = ("eps", "variance_epsilon", "epsilon", "layer_norm_eps")


def ensure_side_files(out: Path, manifest: Manifest, backbone: Backbone, *, allow_pickle: bool = False) -> list[str]:
    """Write the side files ``manifest`` lacks, or whose files are not as it recorded them; record them.

    Returns the files the manifest listed that were missing, not regular files or changed, and are
    written again. The caller writes the manifest when ``manifest.side_files`` changed. A lens that
    cannot be read off the model is left out, with a log message saying why; the cache is complete without it.
    """
    rewritten = []
    wanted = {"vocabulary": lambda: write_vocabulary(out, tokenizer_vocabulary(backbone))}
    if backbone.kind == "decoder" and manifest.stores_tokens:
        wanted["lens"] = lambda: _write_lens(out, backbone, allow_pickle)
    for kind, write in wanted.items():
        entry = manifest.side_files.get(kind)
        problem = "missing" if entry is None else side_file_problem(out, entry)  # a FIFO is never opened
        if problem is None:
            continue
        clear_side_file_name(out, SIDE_FILES[kind])
        new = write()
        if entry is not None:
            rewritten.append(entry.file)
            log.warning("%s is damaged (%s); written again from the model.", entry.file, problem)
        if new is None:
            manifest.side_files.pop(kind, None)
            continue
        manifest.side_files[kind] = new
    return rewritten


def restore_projection(out: Path, manifest: Manifest, backbone: Backbone, plans: dict[str, SplitPlan],
                       keep: list[int], held: HeldStates | None = None) -> list[str]:
    """Write ``projection.safetensors`` again when it is missing or changed: ``[its name]``, or ``[]`` when it is
    as recorded (or the cache is not projected).

    Fitted again as extraction fitted it (the same seeded sample of the first split), and written
    only when that gives the bytes the manifest recorded: every shard was projected with the
    original, so any other basis would read them wrongly. Otherwise a :class:`CacheError` says so
    and the damaged file is left as it is.
    """
    entry = manifest.side_files.get("projection")
    problem = side_file_problem(out, entry) if manifest.storage.project and entry is not None else None
    if problem is None:
        return []
    clear_side_file_name(out, entry.file)
    OwnedFolder.at(out).file(entry.file)  # a folder at its name is refused before the fit, not after
    split = next(iter(plans))
    data = projection_bytes(fit_projection(backbone, plans[split], keep, manifest.storage.project, split=split,
                                           held=held, basis=manifest.storage.projection_basis))
    if data_checksum(data) != entry.checksum:
        raise CacheError(
            f"{out / entry.file} is damaged ({problem}), and fitting it again on the same seeded sample of split "
            f"{split!r} does not give the bytes extraction wrote (this machine's forward pass or arithmetic differs "
            "from that run's, another device, dtype or thread count), so the states cannot be mapped back to the "
            f"model: restore the file from a copy of the cache, or re-extract with {option('overwrite', True)} (heads, "
            "probes and depth analyses still read the cache as it is).")
    write_projection_bytes(out, data)
    log.warning("%s is damaged (%s); fitted again on the same sample, to the bytes extraction wrote.", entry.file,
                problem)
    return [entry.file]


def clear_side_file_name(out: Path, name: str) -> None:
    """Remove a link, FIFO or socket standing where side file ``name`` is written (a link goes, its target stays).

    A folder stays: it may hold someone's files, and the write that follows refuses it in one sentence.
    """
    owner = OwnedFolder.at(out)
    st = lstat_or_none(owner.path(name))
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        owner.remove(name)


def _write_lens(out: Path, backbone: Backbone, allow_pickle: bool):
    lens, reason = lens_weights(backbone, allow_pickle=allow_pickle)
    if lens is None:
        log.info("No logit-lens weights saved for %s: %s.", backbone.name, reason)
        return None
    return write_lens(out, lens)


# --- the vocabulary ---------------------------------------------------------------------------
def tokenizer_vocabulary(backbone: Backbone) -> Vocabulary:
    """The tokenizer's id -> piece table (``convert_ids_to_tokens``), special ids and word markers."""
    tokenizer = backbone.tokenizer
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    size = max([len(tokenizer), *(i + 1 for i in added)])
    tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
    special = {int(i) for i in getattr(tokenizer, "all_special_ids", [])}
    special |= {int(i) for i, token in added.items() if getattr(token, "special", False)}
    return Vocabulary(tokens=tuple(t if isinstance(t, str) else None for t in tokens),
                      special_ids=frozenset(i for i in special if 0 <= i < size),
                      markers=word_markers(tokenizer), tokenizer_fingerprint=backbone.tokenizer_fingerprint)


def word_markers(tokenizer) -> WordMarkers:
    """How ``tokenizer``'s pieces mark words, read from its backend's decoder (and its model for WordPiece/BPE)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return WordMarkers()
    spec = json.loads(backend.to_str())
    found: dict = {}
    model = spec.get("model") or {}
    if model.get("type") in ("WordPiece", "BPE") and model.get("continuing_subword_prefix"):
        found["continuation"] = model["continuing_subword_prefix"]
    if model.get("type") == "BPE" and model.get("end_of_word_suffix"):
        found["word_end"] = model["end_of_word_suffix"]
    if model.get("byte_fallback"):
        found["byte_fallback"] = True
    for decoder in _flatten(spec.get("decoder")):
        kind = decoder.get("type")
        if kind == "ByteLevel":
            found["byte_level"] = True
        elif kind == "Metaspace" and decoder.get("replacement"):
            found["word_start"] = decoder["replacement"]
        elif kind == "Replace" and decoder.get("content") == " ":
            pattern = (decoder.get("pattern") or {}).get("String")
            if pattern:
                found["word_start"] = pattern
        elif kind == "WordPiece" and decoder.get("prefix"):
            found["continuation"] = decoder["prefix"]
        elif kind == "BPEDecoder" and decoder.get("suffix"):
            found["word_end"] = decoder["suffix"]
        elif kind == "ByteFallback":
            found["byte_fallback"] = True
    return WordMarkers(**found)


def _flatten(decoder) -> list[dict]:
    if not isinstance(decoder, dict):
        return []
    if decoder.get("type") == "Sequence":
        return [d for part in decoder.get("decoders", []) for d in _flatten(part)]
    return [decoder]


# --- the logit lens ---------------------------------------------------------------------------
def lens_weights(backbone: Backbone, *, allow_pickle: bool = False) -> tuple[LensWeights | None, str]:
    """The decoder's final norm and unembedding as :class:`LensWeights`, or ``(None, why not)``."""
    norm, status = final_norm(backbone)
    if norm is None:
        return None, status
    found = unembedding(backbone, allow_pickle=allow_pickle)
    if isinstance(found, str):
        return None, found
    weight, bias, source = found
    config = backbone.model.config
    scale = float(getattr(config, "logit_scale", None) or 1.0)  # Cohere multiplies the logits
    if getattr(config, "logits_scaling", None):  # Granite divides them
        scale /= float(config.logits_scaling)
    softcap = getattr(config, "final_logit_softcapping", None)  # Gemma 2 and 3
    return LensWeights(norm=norm, unembedding=weight, unembedding_bias=bias, logit_scale=scale,
                       logit_softcap=float(softcap) if softcap else None, source=source,
                       model_fingerprint=backbone.fingerprint, normed_last=status == "applied"), ""


def final_norm(backbone: Backbone) -> tuple[FinalNorm | None, str]:
    """The final norm as a :class:`FinalNorm` and whether ``layer_L`` comes after it (``"applied"``) or
    before it (``"not-applied"``, or ``"none"`` without a norm); ``(None, why not)`` when it cannot be told.
    """
    model = backbone.model
    module, name = _final_norm_module(model)
    enc = backbone.tokenizer(_PROBE_TEXT, return_tensors="pt")
    seen: dict[str, torch.Tensor] = {}

    def hook(_module, inputs, output):
        seen["input"], seen["output"] = inputs[0].detach(), output.detach()

    handle = module.register_forward_hook(hook) if module is not None else None
    try:
        with torch.inference_mode():
            out = model(input_ids=enc["input_ids"].to(backbone.device),
                        attention_mask=enc["attention_mask"].to(backbone.device),
                        output_hidden_states=True, return_dict=True)
    finally:
        if handle is not None:
            handle.remove()
    last, final = out.hidden_states[-1].float(), out.last_hidden_state.float()
    if module is None:
        if not _close(last, final):
            return None, "its last hidden state differs from layer_L and no final norm was found to explain it"
        return FinalNorm(kind="none"), "none"
    if "output" not in seen or not _close(seen["output"].float(), final):
        return None, f"its module {name!r} is not what the model's last hidden state comes out of"
    if _close(last, seen["output"].float()):
        status = "applied"
    elif _close(last, seen["input"].float()):
        status = "not-applied"
    else:
        return None, f"layer_L is neither the input nor the output of its final norm {name!r}"
    norm = norm_formula(module)
    if norm is None:
        return None, (f"its final norm {name!r} ({type(module).__name__}) computes neither LayerNorm nor RMSNorm "
                      "(with or without a 1 + weight scale)")
    return norm, status


def _final_norm_module(model: torch.nn.Module) -> tuple[torch.nn.Module | None, str]:
    """The model's last norm after its blocks: a top-level attribute named as in ``FINAL_NORM_NAMES``, else
    the last such module outside the numbered blocks (OPT's ``decoder.final_layer_norm``)."""
    for name in FINAL_NORM_NAMES:
        module = getattr(model, name, None)
        if isinstance(module, torch.nn.Module):
            return module, name
    found = [(n, m) for n, m in model.named_modules()
             if n.rsplit(".", 1)[-1] in FINAL_NORM_NAMES and not any(part.isdigit() for part in n.split("."))]
    return (found[-1][1], found[-1][0]) if found else (None, "")


def norm_formula(module: torch.nn.Module) -> FinalNorm | None:
    """The :class:`FinalNorm` that a float32 copy of ``module`` reproduces on test inputs, or None.

    Tried: LayerNorm and RMSNorm, each scaling by ``weight`` or ``1 + weight`` (Gemma), with the
    module's ``bias`` when it has one. The inputs have a large mean (which tells LayerNorm from
    RMSNorm) at two scales (the small one makes ``eps`` count).
    """
    eps = next((getattr(module, n) for n in _EPS_NAMES if isinstance(getattr(module, n, None), (int, float))), None)
    if eps is None:
        return None
    probe = copy.deepcopy(module).float().cpu().eval()
    weight = _tensor(getattr(probe, "weight", None))
    bias = _tensor(getattr(probe, "bias", None))
    generator = torch.Generator().manual_seed(0)
    dim = weight.shape[0] if weight is not None else _width(probe)
    if dim is None:
        return None
    x = torch.randn(8, dim, generator=generator) + 3.0  # (8, D)
    x = torch.cat([x * 4.0, x * 1e-3])  # (16, D)
    with torch.inference_mode():
        y = probe(x).float()  # (16, D)
    for kind in ("rmsnorm", "layernorm"):
        for offset in (0.0, 1.0) if weight is not None else (0.0,):
            norm = FinalNorm(kind=kind, weight=weight, bias=bias, eps=float(eps), weight_offset=offset)
            if torch.allclose(norm(x), y, rtol=1e-4, atol=1e-5):
                return norm
    return None


def _width(module: torch.nn.Module) -> int | None:
    shape = getattr(module, "normalized_shape", None)
    return int(shape[-1]) if shape else None


def _tensor(value) -> torch.Tensor | None:
    return value.detach().float().clone() if isinstance(value, torch.Tensor) else None


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to the forward dtype's rounding."""
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-3, atol=1e-4 * float(b.abs().max().clamp(min=1)))


def unembedding(backbone: Backbone, *, allow_pickle: bool = False):
    """``(weight (V, D), bias (V,) or None, source)`` of the model's output head, or a string saying why not.

    The loader loads the model without its LM head, so the head's weight is read from the checkpoint
    files under the name the model's causal-LM class gives it; with ``tie_word_embeddings`` the
    head is the input embeddings, read from the files too (their dtype), else from the loaded model.
    """
    from transformers import AutoModelForCausalLM

    model = backbone.model
    config = model.config
    try:
        with torch.device("meta"):  # only the names: no memory, no initialisation
            lm = AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, TypeError, RuntimeError, AttributeError, NotImplementedError) as err:
        return f"transformers has no causal-LM class for a {config.model_type} model ({str(err)[:80]})"
    head = lm.get_output_embeddings()
    head_name = next((n for n, m in lm.named_modules() if m is head), None) if head is not None else None
    if not head_name:
        return f"its causal-LM class {type(lm).__name__} has no output head"
    files = weight_files(backbone.source, backbone.revision, allow_pickle) or []
    tied = bool(getattr(config, "tie_word_embeddings", False))
    if tied:
        embeddings = model.get_input_embeddings().weight
        own = next((n for n, p in model.named_parameters() if p is embeddings), None)
        prefix = getattr(lm, "base_model_prefix", "")
        names = [n for n in (own, f"{prefix}.{own}" if prefix and own else None) if n]
        weight = _read_tensor(files, names)
        source = f"tied input embeddings ({own})"
        if weight is None:
            weight = embeddings.detach().cpu()
        bias = _read_tensor(files, [f"{head_name}.bias"])
    else:
        if not files:
            return f"its checkpoint files, which hold {head_name}.weight, were not found"
        weight = _read_tensor(files, [f"{head_name}.weight"])
        if weight is None:
            return (f"its checkpoint has no {head_name}.weight (a base model saved without its LM head) and its "
                    "config does not tie the head to the input embeddings")
        bias = _read_tensor(files, [f"{head_name}.bias"])
        source = f"{head_name}.weight"
    if weight.ndim != 2 or weight.shape[1] != backbone.hidden_size:
        return f"its output head has shape {tuple(weight.shape)}, not (vocabulary, {backbone.hidden_size})"
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        bias = None
    return weight.contiguous(), bias, source


def _read_tensor(files: list[Path], names: list[str]) -> torch.Tensor | None:
    """The first of ``names`` found in the checkpoint ``files`` (safetensors, or pickle when allowed), or None."""
    for path in files:
        path = Path(path)
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt", device="cpu") as handle:
                keys = set(handle.keys())
                for name in names:
                    if name in keys:
                        return handle.get_tensor(name)
        elif path.suffix == ".bin":  # only listed with allow_pickle (weight_files)
            state = torch.load(path, map_location="cpu", weights_only=True)
            for name in names:
                if name in state:
                    return state[name]
    return None

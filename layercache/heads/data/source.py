"""Which data a head reads: which tasks, and token states or the cache's pooled vectors when they give the same model.

A model whose every mixer is the same linear map at every token, under mean-pooling linear heads,
gives identical outputs on the cache's mean-pooled vectors (one per example) and on every token's
states, for far fewer bytes per epoch; ``auto`` picks those. A model that needs token states is
never silently run on pooled vectors.
"""

from __future__ import annotations

from ...core.option_names import option
from ...core.tasks import LabelTask, find_task, labelled_tasks
from ...errors import ConfigError
from ...store.feature_source import auto_source, parse_source, require_source
from ...store.reader import LayerCache
from ..mixers.registry import pooled_mixer_forms
from ..network.model import HeadModel
from ..network.tasks import SequenceHead


def _pooled_mixers() -> str:
    """``"last, layer:<i>, or scalar without layer_norm, with a mean-pooling head"``, from the registry."""
    forms = pooled_mixer_forms()
    listed = forms[0] if len(forms) == 1 else f"{', '.join(forms[:-1])}, or {forms[-1]}"
    return f"{listed}, with a mean-pooling head"


def pooled_equivalent(model: HeadModel) -> bool:
    """Whether ``model`` gives the same outputs on mean-pooled vectors as on all token states.

    True when every mixer is one linear map at every token (``last``, ``layer:<i>``, ``scalar``
    without layer norm) and every head is a sequence head that mean-pools before anything else:
    the mean then commutes with the mixer, and a ``(B, 1, S, D)`` batch replaces ``(B, T, S, D)``.
    The input normalisation must commute too: ``standardize`` is one affine map per dimension whose
    weights (the mean's) sum to 1, so it does; a per-token ``layer_norm`` does not. With
    ``mean_skip_first`` the model's mean pooling leaves out the first token as the cache's does.
    """
    return (model.normalize != "layer_norm"
            and all(m.commutes_with_token_mean() for m in model.mixers.values())
            and all(isinstance(h, SequenceHead) and h.pooling == "mean" and h.attention is None
                    for h in model.heads.values()))


def needs_tokens(model: HeadModel) -> str | None:
    """What in ``model`` needs token states, as the subject of a sentence, or None.

    Everything that :func:`pooled_equivalent` does not accept: a mixer that is not the same linear
    map at every token (``adaptive``, ``attention``, ``gumbel``, ``act``, ``scalar`` with layer
    norm), a token head, or a sequence head that attends over tokens or pools other than by mean.
    On one pooled vector per example such a model still runs, but it is not the model asked for.
    """
    if model.normalize == "layer_norm":
        return f"The input normalisation layer_norm (per token; {option('normalize', 'standardize')} is not)"
    for mixer in model.mixers.values():
        if not mixer.commutes_with_token_mean():
            return f"The mixer {model.mixer_spec!r}"
    for name, head in model.heads.items():
        if not isinstance(head, SequenceHead):
            return f"The token head of task {name!r}"
        if head.attention is not None:
            return f"The head of task {name!r} (self-attention over tokens, attention_heads)"
        if head.pooling != "mean":
            return f"The head option pooling={head.pooling} (task {name!r})"
    return None


def pooled_note(model: HeadModel, source: str) -> str | None:
    """A warning when ``source`` feeds pooled vectors to a model that is meant to read every token."""
    if not parse_source(source).is_pooled:
        return None
    need = needs_tokens(model)
    if need is None:
        return None
    return (f"{need} runs on one pooled vector per example ({option('source', source)}), not on token states: "
            "whatever it learns across tokens is degenerate here.")


def resolve_source(cache: LayerCache, source: str, tasks: list[LabelTask], model: HeadModel | None = None) -> str:
    """``auto`` -> the cache's mean-pooled vectors when ``model`` cannot tell them from token states
    (far fewer bytes per epoch), else token states when stored, else the first pooled mode when
    ``model`` does not need token states. Refuse what cannot work, or would silently train another
    model than the one asked for."""
    token_tasks = [t.name for t in tasks if t.kind == "token"]
    parsed = parse_source(source)
    if parsed.kind == "auto":
        prefer = ("mean",) if model is not None and pooled_equivalent(model) else ()
        chosen = auto_source(cache, tasks, prefer)
        need = None if model is None or prefer else needs_tokens(model)
        if chosen.is_pooled and need is not None:
            # Falling back to pooled vectors would silently train another model than the one asked
            # for (attention over one vector, a per-token depth with one token); only on request.
            raise ConfigError(f"{need} needs token states but the cache holds pooled vectors only; re-extract "
                              f"with {option('store', 'tokens')}, use a mixer that works on pooled vectors "
                              f"({_pooled_mixers()}), or pass {option('source', f'pooled:{chosen.mode}')} to run it on "
                              "one pooled vector per example.")
        return str(chosen)
    if parsed.is_pooled and token_tasks:
        raise ConfigError(f"Token task {token_tasks[0]!r} cannot be learned from pooled vectors; use "
                          f"{option('source', 'tokens')}.")
    return str(require_source(cache, parsed))


def resolve_tasks(cache: LayerCache, tasks: str | list[str] | None) -> list[LabelTask]:
    """The cache's label tasks named by ``tasks`` (default: every task), refusing a cache without labels or an
    unknown name."""
    known = labelled_tasks(cache.tasks, f"The cache {cache.path}")
    names = [tasks] if isinstance(tasks, str) else tasks
    return known if names is None else [find_task(known, n) for n in names]

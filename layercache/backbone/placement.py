"""A backbone larger than one device: ``--device-map``, split over GPUs, CPU memory and disk by accelerate.

``device_map="auto"`` (or ``balanced``, ``balanced_low_0``, ``sequential``) hands the placement to
transformers and accelerate: blocks fill the GPUs in order, then CPU memory, then a disk folder,
within ``max_memory`` per device when given. A block on CPU or disk still computes on the main
device (the first GPU, or the CPU when there is none): its weights are brought there block by
block, which is slow but lets a model run that fits nowhere whole.

Two choices differ from what transformers does by default, both so that a split model's states
never gather on one device:

- the model's top-level hook no longer moves its outputs back to the input's device, so every
  hidden state stays on the device that computed it; readers take the real tokens of each state
  where it lies and move only those (:func:`tokens_of`);
- disk-offloaded weights go to a fresh temporary folder the backbone owns (under ``TMPDIR``, or
  ``offload_root``), removed when the backbone is; nothing is written into a folder layercache
  did not make.
"""

from __future__ import annotations

import tempfile
import weakref
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import torch

from ..core.devices import DEVICE_MAPS, check_max_memory
from ..core.option_names import option
from ..core.units import human_bytes
from ..errors import ConfigError

MEMORY_KEYS = "cuda:N (or N), cpu"
"""How ``--max-memory`` names a device, as its messages write it."""


def check_device_map(device_map: str | None, device: str, max_memory: Mapping | None = None) -> None:
    """Refuse an unknown strategy, a missing accelerate, a ``--device`` beside ``--device-map``, or
    ``--max-memory`` without it."""
    check_max_memory(device_map, max_memory)
    if device_map is None:
        return
    if device_map not in DEVICE_MAPS:
        raise ConfigError(f"{option('device_map', device_map, typed=repr(device_map))} is not a placement; "
                          f"choose {', '.join(DEVICE_MAPS)}.")
    if device != "auto":
        raise ConfigError(f"{option('device', device)} and {option('device_map', device_map)} both place the model; "
                          f"pass one of them ({option('device_map')} decides every block's device, the first GPU or "
                          "the CPU computing).")
    try:
        import accelerate  # noqa: F401
    except ImportError:
        raise ConfigError(f"{option('device_map')} needs the accelerate package; install it with "
                          "pip install 'layercache[large]' (or pip install accelerate).") from None


def memory_limits(max_memory: Mapping | None) -> dict[int | str, int | str] | None:
    """``{"cuda:0": "20GiB", "cpu": 64e9}`` -> accelerate's ``{0: "20GiB", "cpu": 64000000000}``.

    A device is ``cuda:N``, ``N`` or ``cpu``; a limit is a byte count or a size accelerate reads
    (``20GiB``, ``500MB``). Anything else is refused in one sentence.
    """
    if not max_memory:
        return None
    limits: dict[int | str, int | str] = {}
    for key, value in max_memory.items():
        name = str(key).strip().lower()
        if name == "cpu":
            device: int | str = "cpu"
        else:
            index = name.removeprefix("cuda:")
            if not index.isdigit():
                raise ConfigError(f"{option('max_memory')} names the device {key!r}; name devices {MEMORY_KEYS}.")
            device = int(index)
            gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if device >= gpus:
                have = "cpu" + (f", cuda:0 to cuda:{gpus - 1}" if gpus else "")
                raise ConfigError(f"{option('max_memory')} names cuda:{device}, but torch sees {gpus} GPU(s); limit "
                                  f"only the devices this machine has ({have}).")
        if isinstance(value, bool) or not isinstance(value, (int, float, str)) or \
                (isinstance(value, (int, float)) and value <= 0):
            raise ConfigError(f"{option('max_memory')} gives {key} the limit {value!r}; give a size such as 20GiB.")
        limits[device] = int(value) if isinstance(value, float) else value
    return limits


class SplitLoad:
    """The keywords ``from_pretrained`` takes for a split model, and the offload folder they name.

    The folder is made fresh (``tempfile.mkdtemp``) and removed when :meth:`own` hands it to the
    loaded model's backbone and that is garbage-collected, or at interpreter exit.
    """

    def __init__(self, device_map: str, max_memory: Mapping | None, offload_root: str | Path | None = None):
        limits = memory_limits(max_memory)  # refused before anything is written
        self.folder = Path(tempfile.mkdtemp(prefix="layercache-offload-", dir=offload_root))
        self.kwargs = {"device_map": device_map, "offload_folder": str(self.folder)}
        if limits:
            self.kwargs["max_memory"] = limits
        self._cleanup = weakref.finalize(self, _remove_folder, self.folder)

    def own(self, owner: object) -> None:
        """Tie the offload folder's life to ``owner`` (the backbone) instead of this object."""
        self._cleanup.detach()
        weakref.finalize(owner, _remove_folder, self.folder)

    def remove(self) -> None:
        """Remove the offload folder now (a load that failed)."""
        self._cleanup()


def _remove_folder(folder: Path) -> None:
    """Delete the offload folder this process made: its files are the model's weights, nothing else."""
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def placement(model: torch.nn.Module) -> dict[str, int] | None:
    """Modules per device of a split model (``{"cuda:0": 14, "disk": 3}``), or None for a model on one device."""
    device_map = getattr(model, "hf_device_map", None)
    if not device_map:
        return None
    counts = Counter(_device_name(d) for d in device_map.values())
    return dict(sorted(counts.items()))


def describe_split(model: torch.nn.Module, strategy: str, computes_on: torch.device) -> str:
    """One line saying where ``--device-map strategy`` put a split model's parts: per device, how many and how large.

    ``"--device-map auto split the model: cpu 1 part (139.6 KiB), disk 2 parts (70.9 KiB); the parts on disk
    are brought to cpu block by block"``. Sizes are the parameters and buffers as loaded (an offloaded part's
    on ``meta``, same shape and dtype).
    """
    parts: dict[str, list[int]] = {}
    for name, device in (getattr(model, "hf_device_map", None) or {}).items():
        module = model.get_submodule(name)
        size = sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))
        count = parts.setdefault(_device_name(device), [0, 0])
        count[0] += 1
        count[1] += size
    shown = ", ".join(f"{device} {n} part{'s' if n != 1 else ''} ({human_bytes(size)})"
                      for device, (n, size) in sorted(parts.items(), key=lambda item: _device_order(item[0])))
    here = str(computes_on)
    away = [d for d in sorted(parts, key=_device_order) if d in ("cpu", "disk") and d != here]
    brought = f"; the parts on {' and '.join(away)} are brought to {here} block by block" if away else ""
    return f"{option('device_map', strategy)} split the model: {shown}{brought}."


def _device_order(device: str) -> tuple:
    """GPUs by index, then cpu, then disk: the order accelerate fills them."""
    if device.startswith("cuda:"):
        return (0, int(device.split(":")[1]))
    return (1 if device == "cpu" else 2, 0)


def _device_name(device) -> str:
    """accelerate writes a GPU as its index: ``0`` -> ``cuda:0``; ``cpu`` and ``disk`` as they are."""
    return f"cuda:{device}" if isinstance(device, int) else str(device)


def input_device(model: torch.nn.Module) -> torch.device:
    """Where a split model takes its inputs: the device that computes its input embeddings."""
    embeddings = model.get_input_embeddings()
    hook = getattr(embeddings, "_hf_hook", None)
    device = getattr(hook, "execution_device", None)
    if device is None:
        device = next(embeddings.parameters()).device
    device = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
    return torch.device("cpu") if device.type == "meta" else device


def keep_states_in_place(model: torch.nn.Module) -> None:
    """Stop accelerate's top-level hook moving every output back to the input's device.

    Each hidden state then stays on the device whose block computed it, so a split model's L+1
    states never gather on the first GPU (for a 70B model that is tens of GB per batch).
    """
    hook = getattr(model, "_hf_hook", None)
    for single in getattr(hook, "hooks", [hook]):  # a SequentialHook holds several
        if hasattr(single, "io_same_device"):
            single.io_same_device = False


def tokens_of(state: torch.Tensor, index: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """(t, D) rows ``index`` of a (R, W, D) or (R * W, D) state, selected where the state lies, then on ``device``.

    Only the real tokens cross devices; for a model on one device this is a plain ``index_select``.
    """
    flat = state.reshape(-1, state.shape[-1])  # (R * W, D)
    picked = flat.index_select(0, index.to(flat.device, non_blocking=True))  # (t, D)
    # Blocking: a non-blocking copy to the host could be read before it lands.
    return picked if device is None else picked.to(device)

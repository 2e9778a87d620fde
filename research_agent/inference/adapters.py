"""LoRA adapters on disk: one directory format, read by inference and written by the trainer.

An RL adapter is trained on a base whose weights already hold the SFT adapter (merged, so that
"adapter disabled" — the KL reference — is the SFT policy).  Loading it therefore means merging the
adapters it sits on, oldest first, and then applying it.  An adapter directory carries those
earlier adapters itself, as copies under ``chain/0``, ``chain/1`` ..., listed by relative path in
``adapter_chain.json``, so a run directory, a checkpoint or a final adapter can be moved or copied
and still loads on its own.  (Older checkpoints listed absolute paths; ``Path / absolute`` is that
absolute path, so they still read.)

``policy.load_policy`` (inference) and the trainer both use this module; it imports neither.
``research_agent.train.export`` folds a chain into one plain peft adapter (or a merged model) for
tools that know nothing of chains (plain peft, vLLM).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

CHAIN_FILE = "adapter_chain.json"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


class AdapterError(ValueError):
    """A directory that should hold a LoRA adapter does not."""


def adapter_chain(path: str | Path) -> list[Path]:
    """The adapters an adapter was trained on top of (oldest first), then the adapter itself."""
    path = Path(path)
    meta = path / CHAIN_FILE
    if not meta.exists():
        return [path]
    try:
        earlier = json.loads(meta.read_text())
    except ValueError as e:
        raise AdapterError(f"{meta} is not valid JSON ({e}); it should list the adapter's chain/ copies") from None
    if not isinstance(earlier, list) or not all(isinstance(p, str) for p in earlier):
        raise AdapterError(f"{meta} should be a JSON list of adapter directories, not {earlier!r}")
    return [*(path / p for p in earlier), path]


def adapter_config(path: str | Path) -> dict:
    """The ``adapter_config.json`` of the adapter at ``path``, or an AdapterError saying what is missing.

    Exporting reads the configs (scaling, variants) before any model is loaded, so a wrong
    directory fails in a second with its name rather than minutes later inside peft.
    """
    path = Path(path)
    if not path.is_dir():
        raise AdapterError(f"{path} does not exist or is not a directory; pass a LoRA adapter directory")
    meta = path / "adapter_config.json"
    if not meta.exists():
        raise AdapterError(f"{path} is not a LoRA adapter directory (no adapter_config.json)")
    try:
        config = json.loads(meta.read_text())
    except ValueError as e:
        raise AdapterError(f"{meta} is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise AdapterError(f"{meta} should hold a JSON object (a peft config)")
    return config


def merge_adapters(base, paths: list[Path]):
    """Merge each adapter of ``paths`` into ``base`` in order; returns the plain merged model."""
    from peft import PeftModel

    for p in paths:
        if not (Path(p) / "adapter_config.json").exists():
            raise AdapterError(f"{p} is not a LoRA adapter directory (no adapter_config.json)")
        base = PeftModel.from_pretrained(base, str(p)).merge_and_unload()
    return base


def merge_adapter_chain(base, path: str | Path):
    """Merge every adapter of the chain ending in ``path`` into ``base``; return (model, chain)."""
    chain = adapter_chain(path)
    return merge_adapters(base, chain), [str(p.resolve()) for p in chain]


def load_adapter(base, path: str | Path):
    """``base`` with the adapter at ``path`` applied on top of its merged chain (a ``PeftModel``)."""
    from peft import PeftModel

    chain = adapter_chain(path)
    merged = merge_adapters(base, chain[:-1])
    if not (Path(path) / "adapter_config.json").exists():
        raise AdapterError(f"{path} is not a LoRA adapter directory (no adapter_config.json)")
    return PeftModel.from_pretrained(merged, str(path))


def write_adapter(model, directory: str | Path) -> None:
    """Write ``model``'s trainable adapter into ``directory`` with copies of the adapters it sits on.

    ``model.merged_chain`` (set by the trainer) lists the directories merged into its base. Not
    atomic by itself: callers write into a temporary directory and rename it into place.
    """
    directory = Path(directory)
    model.save_pretrained(directory)
    chain = getattr(model, "merged_chain", [])
    for i, p in enumerate(chain):
        (directory / "chain" / str(i)).mkdir(parents=True, exist_ok=True)
        for f in ADAPTER_FILES:
            shutil.copy2(Path(p) / f, directory / "chain" / str(i) / f)
    if chain:
        (directory / CHAIN_FILE).write_text(json.dumps([f"chain/{i}" for i in range(len(chain))]))


def save_adapter(model, final: str | Path) -> None:
    """Write the adapter (with its chain) to ``final`` atomically: a kill mid-save keeps the old one."""
    final = Path(final)
    tmp = final.with_name(f".{final.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    write_adapter(model, tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)

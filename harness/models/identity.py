"""What identifies a model's weights on disk: per-file sha256s, one hash over them, and a folder-safe name."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.fileio import file_digest

# Files that hold weights. Trainer checkpoints also carry optimizer.pt, scheduler.pt and
# training_args.bin, which must not count as (or change the hash of) the model.
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "adapter_model.bin")
# Small files that also shape a vector: model config, tokenizer, sentence-transformers modules.
CONFIG_PATTERNS = ("*.json", "vocab.txt", "merges.txt", "*.model")


@functools.lru_cache(maxsize=4096)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a file; size and mtime are part of the key so a rewritten file is hashed again."""
    return file_digest(path, "sha256")


def cached_digest(path: Path) -> str:
    """sha256 of a file, hashed once per process while its size and mtime stay the same."""
    stat = path.stat()
    return _digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


def _matching_files(folder: Path, patterns: tuple[str, ...]) -> list[Path]:
    found = {
        path
        for pattern in patterns
        for path in folder.rglob(pattern)
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    }
    return sorted(found)


def weight_files(folder: Path) -> list[Path]:
    """The weight files in a model folder (sub-module folders such as ``2_Dense/`` included)."""
    return _matching_files(folder, WEIGHT_PATTERNS)


def folder_identity(folder: Path) -> dict[str, Any]:
    """Hashes that identify a model folder's contents: per-file weight sha256s and one hash over all.

    Raises a one-line error for a folder that cannot be a model (no weights, no config).
    """
    folder = Path(folder)
    weights = weight_files(folder)
    if not weights:
        raise HarnessError(
            f"{folder}: no model weights found (expected model.safetensors or pytorch_model.bin); "
            "pass the folder of a saved or fine-tuned checkpoint"
        )
    if not (folder / "config.json").is_file() and not (folder / "modules.json").is_file():
        raise HarnessError(
            f"{folder}: no config.json or modules.json, so this is not a Hugging Face model folder"
        )
    weights_sha256 = {path.relative_to(folder).as_posix(): cached_digest(path) for path in weights}
    configs = {
        path.relative_to(folder).as_posix(): cached_digest(path)
        for path in _matching_files(folder, CONFIG_PATTERNS)
    }
    weights_hash = hashlib.sha256(json.dumps(weights_sha256, sort_keys=True).encode()).hexdigest()
    config_hash = hashlib.sha256(json.dumps(configs, sort_keys=True).encode()).hexdigest()
    return {"weights_sha256": weights_sha256, "weights_hash": weights_hash, "config_hash": config_hash}


def slugify(name: str) -> str:
    """A filesystem-safe folder name: ``owner/model`` becomes ``owner__model``."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name.strip().replace("/", "__")).strip("._")
    return slug or "model"

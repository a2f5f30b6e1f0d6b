"""Ready-to-load dataset folders: a registry name is downloaded and verified once, a path is used as is."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.errors import HarnessError
from harness.core.paths import default_data_dir
from harness.datasets.beir import BeirDataset, load_dataset
from harness.datasets.dataset_registry import dataset_registry, unknown_name_hint
from harness.datasets.download import install_dataset
from harness.datasets.qrels import DEFAULT_DUPLICATES

MIRROR_ENV = "HARNESS_BEIR_MIRROR"
DATA_FILE_STEMS = ("corpus.jsonl", "queries.jsonl")


def env_mirror() -> str | None:
    """Mirrors named by ``HARNESS_BEIR_MIRROR`` (None when unset or empty)."""
    return os.environ.get(MIRROR_ENV) or None


def prepare_dataset(name_or_path: str, data_dir: Path | None = None, mirror: str | None = None) -> Path:
    """A verified local folder for a registry name (downloaded on first use), or an existing folder as is.

    ``mirror`` (default: env ``HARNESS_BEIR_MIRROR``) is tried before the official URL; it names URL
    prefixes or local folders holding ``<name>.zip`` or ``<name>/`` (comma-separated for several).
    """
    registry = dataset_registry()
    if name_or_path in registry:
        return install_dataset(
            registry[name_or_path],
            Path(data_dir) if data_dir is not None else default_data_dir(),
            mirror if mirror is not None else env_mirror(),
        )
    check_dataset_spec(name_or_path)
    return Path(name_or_path)


def check_dataset_spec(name_or_path: str) -> None:
    """Refuse, before any work, a ``--dataset`` that is neither a registry name nor a folder (say which it is)."""
    registry = dataset_registry()
    path = Path(name_or_path)
    if name_or_path in registry or path.is_dir():
        return
    if path.exists():
        parent = f"; did you mean its folder {path.parent}?" if path.name.startswith(DATA_FILE_STEMS) else ""
        raise HarnessError(
            f"--dataset {name_or_path} is a file; expected a registry name or a BEIR folder holding "
            f"corpus.jsonl, queries.jsonl and qrels/{parent}"
        )
    raise HarnessError(
        f"--dataset {name_or_path!r} is neither a known dataset nor a folder; "
        f"{unknown_name_hint(name_or_path, sorted(registry))}"
    )


@dataclass(frozen=True)
class DataSettings:
    """What the data stage needs: where datasets live and come from, and how strictly they are read."""

    data_dir: Path = field(default_factory=default_data_dir)
    mirror: str | None = None  # None: env HARNESS_BEIR_MIRROR, then the official server
    split: str | None = None  # None: the registry's eval_split, else test
    strict: bool = False  # qrels naming missing queries or documents are an error, not a count
    qrels_duplicates: str = DEFAULT_DUPLICATES  # a pair judged twice: "error" (trec_eval) or "last" (BEIR)


def open_dataset(name_or_path: str, settings: DataSettings) -> BeirDataset:
    """A registry name (downloaded and verified once) or a BEIR folder, loaded for evaluation."""
    folder = prepare_dataset(name_or_path, data_dir=settings.data_dir, mirror=settings.mirror)
    name = name_or_path if not Path(name_or_path).exists() else None
    return load_dataset(
        folder,
        settings.split,
        strict=settings.strict,
        name=name,
        qrels_duplicates=settings.qrels_duplicates,
    )

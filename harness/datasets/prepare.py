"""Ready-to-load dataset folders: a registry name is downloaded and verified once, a path is used as is.

Besides registry names and BEIR folders, ``--dataset`` takes a Hugging Face dataset in the MTEB layout
at a pinned revision (``hf:mteb/scifact@<commit>``) and a local folder laid out as the hub stores such a
dataset; both are converted once into a BEIR folder under the data directory (``hf/...``, ``hf-local/...``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.cache import digest_of, safe_name
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write_json
from harness.core.paths import default_data_dir
from harness.core.staging import make_staging
from harness.datasets.beir import BeirDataset, load_dataset
from harness.datasets.checksums import ChecksumStore
from harness.datasets.dataset_registry import (
    SOURCE_FILE,
    DatasetRecord,
    dataset_registry,
    known_names,
    unknown_name_hint,
)
from harness.datasets.download import install_dataset
from harness.datasets.hub_layout import (
    HubReading,
    HubSpec,
    convert_to_beir,
    is_hub_layout,
    local_configs,
    plan_files,
)
from harness.datasets.qrels import DEFAULT_DUPLICATES
from harness.datasets.subset import verified_recipe

MIRROR_ENV = "HARNESS_BEIR_MIRROR"
DATA_FILE_STEMS = ("corpus.jsonl", "queries.jsonl")
LOCAL_HUB_DIR = "hf-local"  # in the data directory: converted local hub-layout folders
DEFAULT_SPLIT = "test"  # the split of a dataset no registry record describes (as load_dataset assumes)


def env_mirror() -> str | None:
    """Mirrors named by ``HARNESS_BEIR_MIRROR`` (None when unset or empty)."""
    return os.environ.get(MIRROR_ENV) or None


def hub_spec_record(spec: HubSpec, split: str | None = None) -> DatasetRecord:
    """A registry-like record for ``hf:<repo>@<revision>``: its converted copy lives at ``hf/<repo>@<rev>``."""
    split = split or DEFAULT_SPLIT
    return DatasetRecord(
        name=f"{spec.repo}@{spec.revision}",
        title=spec.repo,
        hub=spec.repo,
        hub_revision=spec.revision,
        splits=[split],
        eval_split=split,
        archive_dir=f"{spec.folder}-{split}" if split != DEFAULT_SPLIT else spec.folder,
    )


def prepare_dataset(
    name_or_path: str, data_dir: Path | None = None, mirror: str | None = None, split: str | None = None
) -> Path:
    """A verified local folder for a registry name or an ``hf:`` spec (downloaded on first use), a local
    hub-layout folder converted once, or an existing BEIR folder as is.

    ``mirror`` (default: env ``HARNESS_BEIR_MIRROR``) is tried before the official URL; it names URL
    prefixes or local folders holding ``<name>.zip`` or ``<name>/`` (comma-separated for several).
    """
    return locate_dataset(name_or_path, data_dir, mirror, split)[0]


def locate_dataset(
    name_or_path: str, data_dir: Path | None = None, mirror: str | None = None, split: str | None = None
) -> tuple[Path, str | None]:
    """The folder to load for ``name_or_path`` and the name its results go under (None: from the folder)."""
    registry = dataset_registry()
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    mirror = mirror if mirror is not None else env_mirror()
    if name_or_path in registry:
        name = name_or_path if not Path(name_or_path).exists() else None
        return install_dataset(registry[name_or_path], data_dir, mirror), name
    spec = HubSpec.parse(name_or_path)
    if spec is not None:
        record = hub_spec_record(spec, split)
        return install_dataset(record, data_dir, mirror), record.name
    check_dataset_spec(name_or_path)
    folder = Path(name_or_path)
    if is_hub_layout(folder):
        return local_hub_copy(folder, data_dir, split)
    return folder, None


def local_hub_copy(folder: Path, data_dir: Path, split: str | None = None) -> tuple[Path, str]:
    """A local hub-layout folder converted (once per content) into ``<data_dir>/hf-local/<name>-<digest>``,
    and the name its results go under: ``<folder name>@<first 8 hex of its files' checksums>``."""
    reading = HubReading(split=split or DEFAULT_SPLIT)
    plan = plan_files(local_configs(folder), reading, str(folder))
    checksums = ChecksumStore()
    files = {
        relative: checksums.sha256(folder, relative)
        for relative in sorted({path for paths in plan.values() for path in paths})
    }
    digest = digest_of({"files": files, "split": reading.split, "plan": plan})
    name = f"{folder.resolve().name}@{digest[:8]}"
    dest = data_dir / LOCAL_HUB_DIR / f"{safe_name(folder.resolve().name)}-{digest[:16]}"
    if dest.is_dir():
        return dest, name
    staging = make_staging(data_dir, ".tmp-hf-local-")
    try:
        counts = convert_to_beir(folder, plan, reading, staging / "copy")
        provenance = {
            "kind": "hub",
            "location": str(folder.resolve()),
            "files": files,
            "counts": vars(counts),
        }
        atomic_write_json(staging / "copy" / SOURCE_FILE, provenance)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(staging / "copy", dest)
        except OSError:
            if not dest.is_dir():  # else another process converted the same content meanwhile
                raise HarnessError(f"could not move the converted copy of {folder} to {dest}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest, name


def check_dataset_spec(name_or_path: str) -> None:
    """Refuse, before any work, a ``--dataset`` that is neither a registry name nor a folder (say which it is)."""
    registry = dataset_registry()
    path = Path(name_or_path)
    if name_or_path in registry or path.is_dir() or HubSpec.parse(name_or_path) is not None:
        return
    if path.exists():
        parent = f"; did you mean its folder {path.parent}?" if path.name.startswith(DATA_FILE_STEMS) else ""
        raise HarnessError(
            f"--dataset {name_or_path} is a file; expected a registry name or a BEIR folder holding "
            f"corpus.jsonl, queries.jsonl and qrels/{parent}"
        )
    raise HarnessError(
        f"--dataset {name_or_path!r} is neither a known dataset nor a folder; "
        f"{unknown_name_hint(name_or_path, known_names(registry))}"
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
    """A registry name or ``hf:`` spec (downloaded and verified once), a hub-layout or BEIR folder, loaded."""
    folder, name = locate_dataset(name_or_path, settings.data_dir, settings.mirror, settings.split)
    # A subset (`harness data subset`) goes under its derived name, read by default at its own split and
    # with its source's identical-id rule, so its results never pass for the full dataset's.
    recipe = verified_recipe(folder) if name is None else None
    dataset = load_dataset(
        folder,
        settings.split or (recipe.split if recipe else None),
        strict=settings.strict,
        name=recipe.name if recipe else name,
        qrels_duplicates=settings.qrels_duplicates,
    )
    if recipe is not None:
        dataset.drop_identical_ids = recipe.source.drop_identical_ids
    return dataset

"""The dataset registry (``datasets.yaml``): one validated record per BEIR dataset the harness knows.

The shipped ``harness/records/datasets.yaml`` is read first, then the user's (``HARNESS_CONFIG_DIR``),
whose entries add to or replace shipped ones of the same name. Every entry is a pydantic record that
forbids unknown keys, so a typo is one error naming the file and the key.
"""

from __future__ import annotations

import difflib
import functools
from pathlib import Path
from typing import Any, Literal

from pydantic import model_validator

from harness.core.config import Record, read_mapping, record_files, shipped_dir, validate
from harness.core.errors import HarnessError, InputError

REGISTRY_FILE = "datasets.yaml"
# The BEIR folder layout every record describes (and datasets.beir reads).
CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
QRELS_DIR = "qrels"
# Written by `harness data download` into each folder it installs: which source the copy came from.
SOURCE_FILE = ".harness-source.json"
# Top-level keys of a registry file: anchors for shared values live under `templates`.
REGISTRY_KEYS = {"version", "templates", "datasets"}


# The configs of a hub dataset a record may rename (mteb's RetrievalDatasetLoader names).
HUB_CONFIG_ROLES = ("corpus", "queries", "qrels")
HubLayout = Literal["mteb", "bright"]


class DatasetRecord(Record):
    """One dataset of ``datasets.yaml``: a BEIR zip (``url``) or a Hugging Face dataset (``hub``), or both.

    Hub fields, as mteb's ``TaskMetadata.dataset`` and ``RetrievalDatasetLoader`` name them:
    ``hub`` is the dataset repo (``mteb/scifact``), ``hub_revision`` the pinned commit; ``hub_layout``
    ``mteb`` reads configs ``corpus`` / ``queries`` / ``default`` (qrels; ``qrels`` when there is no
    ``default``), each prefixed ``<hub_config>-`` when ``hub_config`` is set (mteb's ``config``);
    ``hub_configs`` renames any of them (``{corpus: long_documents}``). ``hub_layout: bright`` reads
    BRIGHT's repo: ``hub_configs.corpus`` (``documents`` / ``long_documents``) and ``examples``, both
    at split ``hub_split`` (the domain), ``hub_configs.qrels`` naming the examples' judged-ids field
    (``gold_ids`` / ``gold_ids_long``) and each example's ``excluded_ids`` kept per query.
    ``hub_split`` is the split to read when the hub names it otherwise than ``eval_split``. ``hub_files``
    pins the hub files by their path in the repo (``corpus/corpus-00000-of-00001.parquet``: sha256), as
    ``files`` pins the members of the BEIR zip.
    """

    name: str
    url: str | None = None
    md5: str | None = None
    splits: list[str]
    eval_split: str
    drop_identical_ids: bool = False
    files: dict[str, str] = {}  # path relative to the dataset folder -> sha256 pin
    counts: dict[str, dict[str, int]] = {}  # split -> {"docs", "queries", "qrels"}
    title: str = ""
    sha256: str | None = None  # of the zip
    bytes: int | None = None  # of the zip, informational
    archive_dir: str = ""  # folder inside the zip holding the dataset
    # The group(s) a name on the command line stands for: "cqadupstack", "mteb-eng-v2-retrieval", "bright".
    group: str | list[str] | None = None
    hf_corpus: str | None = None
    hf_qrels: str | None = None
    hub: str | None = None  # Hugging Face dataset repo in the MTEB layout, e.g. "mteb/scifact"
    hub_revision: str | None = None  # the commit (or tag) it is read at; required with `hub`
    hub_layout: HubLayout = "mteb"
    hub_config: str | None = None  # mteb's `config`: configs are read as "<hub_config>-corpus", ...
    hub_configs: dict[Literal["corpus", "queries", "qrels"], str] = {}  # explicit config names
    hub_split: str | None = None  # the hub's split name when it is not eval_split (BRIGHT: the domain)
    hub_files: dict[str, str] = {}  # path in the hub repo -> sha256 pin

    @model_validator(mode="after")
    def _eval_split_is_a_split(self) -> DatasetRecord:
        if self.eval_split not in self.splits:
            raise ValueError(f"eval_split {self.eval_split!r} not in splits {self.splits}")
        if not self.url and not self.hub:
            raise ValueError("needs a `url` (BEIR zip) or a `hub` (Hugging Face dataset repo)")
        if self.hub and not self.hub_revision:
            raise ValueError(f"hub {self.hub!r} needs a pinned `hub_revision` (a commit sha)")
        return self

    @property
    def groups(self) -> list[str]:
        """The group names this record belongs to (``group`` as a list)."""
        if self.group is None:
            return []
        return [self.group] if isinstance(self.group, str) else list(self.group)

    @property
    def archive_name(self) -> str:
        """File name of the zip (``scifact.zip``; shared by the cqadupstack forums); ``""`` for hub-only."""
        return self.url.rstrip("/").rsplit("/", 1)[-1] if self.url else ""

    @property
    def required_files(self) -> list[str]:
        """Files a usable copy must have: corpus, queries and the qrels of the reported split."""
        return [CORPUS_FILE, QUERIES_FILE, f"{QRELS_DIR}/{self.eval_split}.tsv"]


def _record_from_yaml(name: str, entry: Any, source: Path) -> DatasetRecord:
    if not isinstance(entry, dict):
        raise InputError(source, None, f"dataset {name!r} is not a mapping", "see the other entries")
    # title and archive_dir default to the name (an explicit null too, as before).
    data = {**entry, "name": name}
    data["title"] = str(entry.get("title") or name)
    data["archive_dir"] = str(entry.get("archive_dir") or name)
    return validate(DatasetRecord, data, source, where=f"dataset {name!r}")


@functools.lru_cache(maxsize=4)
def _read_registry_file(path: str, mtime_ns: int) -> dict[str, DatasetRecord]:
    document = read_mapping(path)
    unknown = sorted(str(key) for key in document if key not in REGISTRY_KEYS)
    if unknown:
        raise InputError(path, None, f"unknown key {unknown[0]!r} (check its spelling)")
    datasets = document.get("datasets")
    if not isinstance(datasets, dict):
        raise InputError(path, None, "no 'datasets' mapping")
    return {str(name): _record_from_yaml(str(name), entry, Path(path)) for name, entry in datasets.items()}


def dataset_registry() -> dict[str, DatasetRecord]:
    """Every known dataset by name: shipped records, overridden by the user's (``HARNESS_CONFIG_DIR``)."""
    files = record_files(REGISTRY_FILE)
    if not files:
        raise HarnessError(
            f"dataset registry {shipped_dir() / REGISTRY_FILE} not found (broken installation?)"
        )
    registry: dict[str, DatasetRecord] = {}
    for path in files:
        registry.update(_read_registry_file(str(path), path.stat().st_mtime_ns))
    return registry


def unknown_name_hint(name: str, candidates: list[str]) -> str:
    """``did you mean ...?`` with close matches, or where to look up the known names."""
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.5)
    if close:
        return f"did you mean {', '.join(close)}?"
    return "`harness data list` shows the known datasets"


def known_names(registry: dict[str, DatasetRecord]) -> list[str]:
    """Dataset names and group (benchmark) names, sorted: what a name on the command line may be."""
    groups = {group for record in registry.values() for group in record.groups}
    return sorted(set(registry) | groups)


def get_dataset_record(name: str) -> DatasetRecord:
    """The registry entry for ``name``; an unknown name raises ``HarnessError`` with close matches."""
    registry = dataset_registry()
    if name in registry:
        return registry[name]
    raise HarnessError(f"unknown dataset {name!r}; {unknown_name_hint(name, known_names(registry))}")


def expand_dataset_names(names: list[str]) -> list[str]:
    """Registry names with group names (``cqadupstack``, ``bright``) replaced by their members, order kept."""
    registry = dataset_registry()
    expanded: list[str] = []
    for name in names:
        members = [record.name for record in registry.values() if name in record.groups]
        for member in members or [name]:
            if member not in expanded:
                expanded.append(member)
    return expanded

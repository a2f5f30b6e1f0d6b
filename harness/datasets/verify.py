"""Checking a dataset folder: every pinned file's sha256 and the split's document, query and qrels counts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.fileio import read_json_or_none
from harness.datasets.beir import BeirDataset, LoadReport, load_dataset
from harness.datasets.checksums import ChecksumStore
from harness.datasets.dataset_registry import SOURCE_FILE, DatasetRecord, dataset_registry, get_dataset_record
from harness.datasets.qrels import DEFAULT_DUPLICATES


@dataclass
class FileCheck:
    """One file of a dataset folder against its pin."""

    relative: str
    status: str  # "ok", "mismatch", "missing", "unpinned"
    expected: str | None = None
    actual: str | None = None


def installed_source(root: Path) -> dict[str, Any]:
    """Where ``harness data download`` got this folder from (empty when it did not make it)."""
    return read_json_or_none(root / SOURCE_FILE) or {}


def check_pins(
    root: Path, record: DatasetRecord | None, checksums: ChecksumStore | None = None
) -> list[FileCheck]:
    """Every pinned file of ``record`` plus every other data file present, each with its status.

    A copy exported from the Hugging Face hub is re-serialised, so the zip's pins do not apply to it:
    its files are all reported unpinned (its counts were checked when it was installed).
    """
    checksums = checksums if checksums is not None else ChecksumStore()
    pins = record.files if record and installed_source(root).get("kind") != "hub" else {}
    present = sorted(
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(root).parts)
    )
    checks = []
    for relative in sorted(set(pins) | set(present)):
        expected = pins.get(relative)
        if relative not in present:
            checks.append(FileCheck(relative, "missing", expected))
        elif expected is None:
            checks.append(FileCheck(relative, "unpinned"))
        else:
            actual = checksums.sha256(root, relative)
            checks.append(FileCheck(relative, "ok" if actual == expected else "mismatch", expected, actual))
    return checks


@dataclass
class CountCheck:
    what: str  # "docs", "queries", "qrels"
    actual: int
    expected: int | None

    @property
    def ok(self) -> bool:
        return self.expected is None or self.actual == self.expected


@dataclass
class VerifyResult:
    name: str
    root: Path
    split: str
    files: list[FileCheck]
    counts: list[CountCheck]
    report: LoadReport

    @property
    def failures(self) -> list[str]:
        """One short phrase per failed check (empty when everything matched)."""
        bad = [f"{check.relative} {check.status}" for check in self.files if check.status == "mismatch"]
        bad += [
            f"{count.what} {count.actual:,} != {count.expected:,}" for count in self.counts if not count.ok
        ]
        return bad


def verify_dataset(dataset: BeirDataset) -> VerifyResult:
    """Check a loaded dataset's files against their pins and its split's counts against the registry.

    Load it with ``load_dataset`` first: the same loader, and so the same verdict on its files, as
    every other command.
    """
    root = Path(dataset.root)
    record = dataset_registry().get(dataset.name)
    files = check_pins(root, record, dataset.checksums)
    expected = record.counts.get(dataset.split, {}) if record else {}
    counts = [
        CountCheck("docs", dataset.num_docs, expected.get("docs")),
        CountCheck("queries", len(dataset.queries), expected.get("queries")),
        CountCheck("qrels", dataset.num_qrels, expected.get("qrels")),
    ]
    return VerifyResult(dataset.name, root, dataset.split, files, counts, dataset.report)


def dataset_folder(name: str, data_dir: Path) -> tuple[Path, str | None]:
    """The folder to check for ``name`` and its registry name: a registry dataset's copy under ``data_dir``,
    or a folder path (registry name None). A registry name not downloaded, or an unknown name, raises."""
    registry = dataset_registry()
    if name in registry:
        folder = data_dir / registry[name].archive_dir
        if not folder.is_dir():
            raise HarnessError(f"{name} is not in {data_dir} (run `harness data download {name}` first)")
        return folder, name
    if Path(name).is_dir():
        return Path(name), None
    get_dataset_record(name)  # raises with close matches
    raise AssertionError("unreachable")


def verify_named(
    name: str,
    data_dir: Path,
    *,
    split: str | None = None,
    strict: bool = False,
    qrels_duplicates: str = DEFAULT_DUPLICATES,
    checksums: ChecksumStore | None = None,
) -> VerifyResult:
    """Load the dataset ``name`` names (see :func:`dataset_folder`) as every command does, then verify it."""
    folder, registry_name = dataset_folder(name, data_dir)
    dataset = load_dataset(
        folder,
        split,
        strict=strict,
        name=registry_name,
        qrels_duplicates=qrels_duplicates,
        checksums=checksums,
    )
    return verify_dataset(dataset)

"""``harness data list | info | download | verify``: the BEIR datasets of the registry and their local copies."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.api.command_result import Command, CommandGroup, CommandResult
from harness.api.shared_options import qrels_duplicates_option
from harness.core.errors import HarnessError
from harness.core.options import MAX_RETRIES, MAX_TIMEOUT, OptionsRecord, folder, option
from harness.core.paths import default_data_dir
from harness.core.text_table import text_table
from harness.datasets.checksums import ChecksumStore
from harness.datasets.dataset_registry import (
    DatasetRecord,
    dataset_registry,
    expand_dataset_names,
    get_dataset_record,
)
from harness.datasets.download import DEFAULT_ATTEMPTS, DEFAULT_TIMEOUT, install_datasets
from harness.datasets.prepare import env_mirror
from harness.datasets.verify import FileCheck, VerifyResult, installed_source, verify_named

Echo = Callable[[str], Any] | None


# ------------------------------------------------------------------------------ shared options


def data_dir_option() -> Any:
    """``--data-dir DIR``: where the datasets live (None: env HARNESS_DATA_DIR, else ./data)."""
    return option(
        None,
        parse=folder,
        help="folder holding the datasets (env HARNESS_DATA_DIR, default: data/ in the working directory)",
    )


def names_option(help: str) -> Any:
    """``NAME..``: one or more dataset names; a group name (``cqadupstack``) stands for its members."""
    return option(positional=True, nargs="+", metavar="NAME", help=help)


def _data_dir(data_dir: Path | None) -> Path:
    return data_dir if data_dir is not None else default_data_dir()


def zip_size(num_bytes: int | None) -> str:
    """A download size in decimal units as servers state them (``1.2 MB``); ``?`` when unknown."""
    if not num_bytes:
        return "?"
    size = float(num_bytes)
    for unit in ("B", "KB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def _count(value: int | None) -> str:
    return f"{value:,}" if value is not None else "?"


# ---------------------------------------------------------------------------------------- list


class DataListOptions(OptionsRecord):
    """``harness data list``: every dataset of the registry."""

    data_dir: Path | None = data_dir_option()


@dataclass
class DataListResult(CommandResult):
    """Every registry dataset with its reported split, expected sizes, pins and whether it is local."""

    datasets: list[DatasetRecord]
    local: list[bool]
    data_dir: Path

    def payload(self) -> dict[str, Any]:
        return {
            "data_dir": str(self.data_dir),
            "datasets": [
                {
                    "name": record.name,
                    "split": record.eval_split,
                    "counts": record.counts.get(record.eval_split, {}),
                    "zip_bytes": record.bytes,
                    "pins": len(record.files),
                    "local": here,
                }
                for record, here in zip(self.datasets, self.local, strict=True)
            ],
        }

    def render(self) -> str:
        rows: list[tuple[str, ...]] = [("NAME", "SPLIT", "DOCS", "QUERIES", "QRELS", "ZIP", "PINS", "LOCAL")]
        for record, here in zip(self.datasets, self.local, strict=True):
            counts = record.counts.get(record.eval_split, {})
            rows.append(
                (
                    record.name,
                    record.eval_split,
                    _count(counts.get("docs")),
                    _count(counts.get("queries")),
                    _count(counts.get("qrels")),
                    zip_size(record.bytes),
                    str(len(record.files)),
                    "yes" if here else "-",
                )
            )
        return "\n".join([*text_table(rows, right=(2, 3, 4, 5, 6)), "", f"data folder: {self.data_dir}"])


def data_list(options: DataListOptions | None = None, /, **values: Any) -> DataListResult:
    """List every dataset the registry knows (shipped ``datasets.yaml`` plus ``HARNESS_CONFIG_DIR``'s).

    E.g. ``data_list(data_dir="data")``; ``result.datasets`` holds the registry records, ``result.local``
    whether each has a folder under the data folder.
    """
    options = DataListOptions.coerce(options, values)
    data_dir = _data_dir(options.data_dir)
    records = list(dataset_registry().values())
    local = [(data_dir / record.archive_dir).is_dir() for record in records]
    return DataListResult(datasets=records, local=local, data_dir=data_dir)


# ---------------------------------------------------------------------------------------- info


class DataInfoOptions(OptionsRecord):
    """``harness data info NAME``: one dataset's registry entry."""

    data_dir: Path | None = data_dir_option()
    name: str = option(positional=True, help="dataset name, e.g. scifact or cqadupstack/android")


@dataclass
class DataInfoResult(CommandResult):
    """One dataset's registry entry and its local folder (None: not downloaded)."""

    record: DatasetRecord
    folder: Path | None

    def payload(self) -> dict[str, Any]:
        return {
            **self.record.model_dump(mode="json"),
            "local_copy": str(self.folder) if self.folder else None,
        }

    def render(self) -> str:
        record = self.record
        lines = [
            f"{record.name}: {record.title}",
            f"  url:                {record.url}",
            f"  zip md5:            {record.md5 or '-'}",
            f"  zip sha256:         {record.sha256 or '-'}",
            f"  zip size:           {zip_size(record.bytes)}"
            + (f" ({record.bytes:,} bytes)" if record.bytes else ""),
            f"  folder in zip:      {record.archive_dir}/",
            f"  splits:             {', '.join(record.splits)} (papers report {record.eval_split})",
            f"  drop identical ids: {'yes' if record.drop_identical_ids else 'no'}",
            f"  hub copies:         {record.hf_corpus or '-'}, {record.hf_qrels or '-'}",
            f"  local copy:         {self.folder or 'not downloaded'}",
            "  expected counts:",
        ]
        lines += [
            f"    {split:<6} {_count(counts.get('docs'))} docs, {_count(counts.get('queries'))} queries, "
            f"{_count(counts.get('qrels'))} qrels"
            for split, counts in record.counts.items()
        ]
        lines.append("  sha256 pins:" if record.files else "  sha256 pins:        none published")
        lines += [f"    {relative:<16} {digest}" for relative, digest in record.files.items()]
        return "\n".join(lines)


def data_info(options: DataInfoOptions | None = None, /, **values: Any) -> DataInfoResult:
    """Everything the registry knows about one dataset: URL, checksums, splits, counts, sha256 pins.

    E.g. ``data_info(name="scifact").record.counts["test"]``; an unknown name raises ``HarnessError``
    naming close matches.
    """
    options = DataInfoOptions.coerce(options, values)
    record = get_dataset_record(options.name)
    local = _data_dir(options.data_dir) / record.archive_dir
    return DataInfoResult(record=record, folder=local if local.is_dir() else None)


# ------------------------------------------------------------------------------------ download


class DataDownloadOptions(OptionsRecord):
    """``harness data download NAME..``: fetch datasets into the data folder, checked against their pins."""

    data_dir: Path | None = data_dir_option()
    names: list[str] = names_option("dataset names; 'cqadupstack' means all 12 forums")
    mirror: list[str] | None = option(
        None,
        action="append",
        help="URL prefix or local folder holding <name>.zip or unpacked <name>/ (repeatable, tried first; "
        "env HARNESS_BEIR_MIRROR, comma-separated)",
    )
    strict: bool = option(
        False, action="store_true", help="also require every pinned file and refuse unpinnable hub copies"
    )
    force: bool = option(
        False, action="store_true", help="replace an existing copy (only once the new one verified)"
    )
    hub: bool = option(
        False,
        action="store_true",
        help="fall back to the Hugging Face hub copies (BeIR/<name>), not pin-checked",
    )
    retries: int = option(
        DEFAULT_ATTEMPTS,
        low=1,
        high=MAX_RETRIES,
        help=f"attempts per URL, resuming with HTTP Range (default {DEFAULT_ATTEMPTS})",
    )
    timeout: float = option(
        DEFAULT_TIMEOUT,
        above=0,
        high=MAX_TIMEOUT,
        help=f"seconds without data before retrying (default {DEFAULT_TIMEOUT:g})",
    )


@dataclass
class DataDownloadResult(CommandResult):
    """The folder of each dataset now in place, and why the others failed (then ``exit_code`` is 2)."""

    ready: dict[str, Path] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    echoed: bool = False  # the lines were shown through ``echo`` as each dataset became ready

    def payload(self) -> dict[str, Any]:
        return {"ready": {name: str(path) for name, path in self.ready.items()}, "failures": self.failures}

    def render(self) -> str:
        """One ``NAME: ready in FOLDER`` line per dataset (empty when ``echo`` showed them already)."""
        return "" if self.echoed else "\n".join(_ready_line(name, path) for name, path in self.ready.items())


def _ready_line(name: str, path: Path) -> str:
    return f"{name}: ready in {path}"


def data_download(
    options: DataDownloadOptions | None = None, /, *, echo: Echo = None, **values: Any
) -> DataDownloadResult:
    """Download datasets into ``DATA_DIR/<name>/``; a copy already there and verified is kept as is.

    Sources are tried in order: each ``mirror`` (default: env HARNESS_BEIR_MIRROR), the official URL,
    then with ``hub`` the Hugging Face copy. Zips are checked against the published md5, files against
    their sha256 pins, before anything is put in place. E.g. ``data_download(names=["scifact"])``.
    One dataset that cannot be installed raises ``HarnessError``; of several, the others are still
    installed and ``result.failures`` says why each failed one did. ``echo`` (e.g. ``print``) is called
    with each ``ready`` line as it happens.
    """
    options = DataDownloadOptions.coerce(options, values)
    records = [get_dataset_record(name) for name in expand_dataset_names(options.names)]
    result = DataDownloadResult(echoed=echo is not None)
    installed = install_datasets(
        records,
        _data_dir(options.data_dir),
        options.mirror if options.mirror is not None else env_mirror(),
        strict=options.strict,
        force=options.force,
        use_hub=options.hub,
        attempts=options.retries,
        timeout=options.timeout,
    )
    for record, outcome in installed:
        if isinstance(outcome, HarnessError):
            result.failures.append(str(outcome))
            continue
        result.ready[record.name] = outcome
        result.paths.append(outcome)
        if echo is not None:
            echo(_ready_line(record.name, outcome))
    if result.failures:
        failed = " || ".join(result.failures)
        result.messages.append(f"error: {len(result.failures)} of {len(records)} datasets failed: {failed}")
        result.exit_code = 2
    return result


# -------------------------------------------------------------------------------------- verify


class DataVerifyOptions(OptionsRecord):
    """``harness data verify NAME..``: check local copies against their pins and expected counts."""

    data_dir: Path | None = data_dir_option()
    names: list[str] = names_option("dataset names ('cqadupstack' means its 12 forums) or folders")
    split: str | None = option(None, help="split to count (default: the split papers report)")
    strict: bool = option(
        False, action="store_true", help="qrels rows naming missing queries or documents are errors"
    )
    qrels_duplicates: str = qrels_duplicates_option()


@dataclass
class DataVerifyResult(CommandResult):
    """Each dataset's file and count checks; ``exit_code`` 2 when any failed."""

    results: list[VerifyResult] = field(default_factory=list)
    echoed: bool = False  # each dataset's lines were shown through ``echo`` once it was checked

    @property
    def failed(self) -> list[str]:
        """``NAME: what failed`` per failed dataset (empty: all verified)."""
        return [f"{result.name}: {', '.join(result.failures)}" for result in self.results if result.failures]

    def payload(self) -> dict[str, Any]:
        return {"datasets": [_verify_json(result) for result in self.results]}

    def render(self) -> str:
        """Each dataset's checks and verdict (empty when ``echo`` showed them already)."""
        return (
            "" if self.echoed else "\n".join(line for result in self.results for line in verify_lines(result))
        )


def data_verify(
    options: DataVerifyOptions | None = None, /, *, echo: Echo = None, **values: Any
) -> DataVerifyResult:
    """Check local dataset copies: each file's sha256 against its pin, the split's counts against the registry.

    A name is a registry dataset under the data folder (``cqadupstack`` means its forums) or a folder
    path. E.g. ``data_verify(names=["scifact"]).failed``; ``result.results`` holds each dataset's checks
    and ``exit_code`` is 2 when any mismatched. ``echo`` (e.g. ``print``) gets each dataset's lines as
    soon as it is checked. A name neither registered nor a folder raises ``HarnessError``.
    """
    options = DataVerifyOptions.coerce(options, values)
    data_dir = _data_dir(options.data_dir)
    result = DataVerifyResult(echoed=echo is not None)
    checksums = ChecksumStore()  # shared, so the forums of one group hash each file once
    for name in expand_dataset_names(options.names):
        checked = verify_named(
            name,
            data_dir,
            split=options.split,
            strict=options.strict,
            qrels_duplicates=options.qrels_duplicates,
            checksums=checksums,
        )
        result.results.append(checked)
        if echo is not None:
            for line in verify_lines(checked):
                echo(line)
    if result.failed:
        result.messages.append(f"error: verification failed: {'; '.join(result.failed)}")
        result.exit_code = 2
    return result


def verify_lines(result: VerifyResult) -> list[str]:
    """One dataset's printed checks: its files, its counts, loader notes, then ``NAME: OK`` or ``FAILED``."""
    lines = [f"{result.name} ({result.root}, split {result.split})"]
    source = installed_source(result.root)
    if source.get("kind") == "hub":
        lines.append(
            f"  from the Hugging Face hub copy {source.get('location')}: re-serialised, the zip's pins do not apply"
        )
    statuses = [[check.relative, _file_status(check)] for check in result.files]
    lines += [f"  {line}" for line in text_table(statuses, last_unpadded=True)]
    for count in result.counts:
        expected = f"expected {count.expected:,}" if count.expected is not None else "no expected count"
        verdict = ("ok" if count.ok else "MISMATCH") if count.expected is not None else ""
        lines.append(f"  {count.what:<8} {count.actual:>10,}  ({expected}) {verdict}".rstrip())
    lines += [f"  note: {problem}" for problem in result.report.problems()]
    lines.append(f"{result.name}: {'FAILED' if result.failures else 'OK'}")
    return lines


def _file_status(check: FileCheck) -> str:
    return {
        "ok": "sha256 ok",
        "mismatch": f"sha256 MISMATCH: {check.actual} (pinned {check.expected})",
        "missing": "pinned but not present",
        "unpinned": "no published pin",
    }[check.status]


def _verify_json(result: VerifyResult) -> dict[str, Any]:
    return {
        "name": result.name,
        "root": str(result.root),
        "split": result.split,
        "files": [vars(check) for check in result.files],
        "counts": [{**vars(count), "ok": count.ok} for count in result.counts],
        "problems": list(result.report.problems()),
        "failures": result.failures,
    }


DATA = CommandGroup(
    "data",
    help="list, download and verify BEIR datasets",
    description="The BEIR datasets of the registry (harness/records/datasets.yaml + HARNESS_CONFIG_DIR): list "
    "them, show one, download them (mirrors first, checked against md5 and sha256 pins) and verify local "
    "copies.",
    title="data commands",
    commands=(
        Command(
            "list",
            DataListOptions,
            data_list,
            help="every known dataset with its reported split and sizes",
            description="",
        ),
        Command(
            "info",
            DataInfoOptions,
            data_info,
            help="everything the registry knows about one dataset",
            description="",
        ),
        Command(
            "download",
            DataDownloadOptions,
            data_download,
            help="download datasets into the data folder (no-op when already there and verified)",
            description="Fetch datasets into DATA_DIR/<name>/. Sources are tried in order: each --mirror, "
            "then the official URL, then (with --hub) the Hugging Face copy. Zips are checked against the "
            "published md5, files against their sha256 pins, before anything is put in place.",
            echo=True,
        ),
        Command(
            "verify",
            DataVerifyOptions,
            data_verify,
            help="check local copies against the sha256 pins and the expected counts",
            description="For each dataset (a registry name under the data folder, or a folder path): the "
            "checksum status of each file, then documents, judged queries and qrels rows of the split "
            "compared with the registry. Exits non-zero on any mismatch or bad line.",
            echo=True,
        ),
    ),
)

COMMANDS = (DATA,)

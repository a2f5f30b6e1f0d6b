"""``harness data list | info | download | verify``: the BEIR datasets the harness knows and their local copies."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.common import (
    MAX_RETRIES,
    MAX_TIMEOUT,
    add_qrels_duplicates_argument,
    folder,
    number_above,
    whole_number,
)
from harness.core.errors import HarnessError
from harness.core.paths import default_data_dir
from harness.datasets.beir import load_dataset
from harness.datasets.checksums import ChecksumStore
from harness.datasets.dataset_registry import dataset_registry, expand_dataset_names, get_dataset_record
from harness.datasets.download import install_dataset
from harness.datasets.prepare import env_mirror
from harness.datasets.verify import VerifyResult, installed_source, verify_dataset


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser(
        "data",
        help="list, download and verify BEIR datasets",
        description="The BEIR datasets of the registry (harness/records/datasets.yaml + HARNESS_CONFIG_DIR): list them, show one, download them "
        "(mirrors first, checked against md5 and sha256 pins) and verify local copies.",
    )
    commands = data.add_subparsers(title="data commands", dest="data_command", metavar="ACTION")
    data.set_defaults(func=lambda args: _help(data))

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir",
        type=folder,
        default=None,
        help="folder holding the datasets (env HARNESS_DATA_DIR, default: data/ in the working directory)",
    )

    listing = commands.add_parser(
        "list", parents=[common], help="every known dataset with its reported split and sizes"
    )
    listing.set_defaults(func=run_list)

    info = commands.add_parser(
        "info", parents=[common], help="everything the registry knows about one dataset"
    )
    info.add_argument("name", help="dataset name, e.g. scifact or cqadupstack/android")
    info.set_defaults(func=run_info)

    download = commands.add_parser(
        "download",
        parents=[common],
        help="download datasets into the data folder (no-op when already there and verified)",
        description="Fetch datasets into DATA_DIR/<name>/. Sources are tried in order: each --mirror, "
        "then the official URL, then (with --hub) the Hugging Face copy. Zips are checked against the "
        "published md5, files against their sha256 pins, before anything is put in place.",
    )
    download.add_argument(
        "names", nargs="+", metavar="NAME", help="dataset names; 'cqadupstack' means all 12 forums"
    )
    download.add_argument(
        "--mirror",
        action="append",
        default=None,
        help="URL prefix or local folder holding <name>.zip or unpacked <name>/ (repeatable, tried first; "
        "env HARNESS_BEIR_MIRROR, comma-separated)",
    )
    download.add_argument(
        "--strict",
        action="store_true",
        help="also require every pinned file and refuse unpinnable hub copies",
    )
    download.add_argument(
        "--force", action="store_true", help="replace an existing copy (only once the new one verified)"
    )
    download.add_argument(
        "--hub",
        action="store_true",
        help="fall back to the Hugging Face hub copies (BeIR/<name>), not pin-checked",
    )
    download.add_argument(
        "--retries", type=whole_number(1, MAX_RETRIES), default=3, help="attempts per URL, resuming with HTTP Range (default 3)"
    )
    download.add_argument(
        "--timeout", type=number_above(0, MAX_TIMEOUT), default=30.0, help="seconds without data before retrying (default 30)"
    )
    download.set_defaults(func=run_download)

    verify = commands.add_parser(
        "verify",
        parents=[common],
        help="check local copies against the sha256 pins and the expected counts",
        description="For each dataset (a registry name under the data folder, or a folder path): the "
        "checksum status of each file, then documents, judged queries and qrels rows of the split "
        "compared with the registry. Exits non-zero on any mismatch or bad line.",
    )
    verify.add_argument(
        "names",
        nargs="+",
        metavar="NAME",
        help="dataset names ('cqadupstack' means its 12 forums) or folders",
    )
    verify.add_argument("--split", default=None, help="split to count (default: the split papers report)")
    verify.add_argument(
        "--strict", action="store_true", help="qrels rows naming missing queries or documents are errors"
    )
    add_qrels_duplicates_argument(verify)
    verify.set_defaults(func=run_verify)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _data_dir(args: argparse.Namespace) -> Path:
    return args.data_dir if args.data_dir is not None else default_data_dir()


def _size(num_bytes: int | None) -> str:
    if not num_bytes:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if num_bytes < 1000 or unit == "GB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1000
    return "?"


def _count(value: int | None) -> str:
    return f"{value:,}" if value is not None else "?"


def run_list(args: argparse.Namespace) -> int:
    data_dir = _data_dir(args)
    rows = [("NAME", "SPLIT", "DOCS", "QUERIES", "QRELS", "ZIP", "PINS", "LOCAL")]
    for record in dataset_registry().values():
        counts = record.counts.get(record.eval_split, {})
        local = "yes" if (data_dir / record.archive_dir).is_dir() else "-"
        rows.append(
            (
                record.name,
                record.eval_split,
                _count(counts.get("docs")),
                _count(counts.get("queries")),
                _count(counts.get("qrels")),
                _size(record.bytes),
                str(len(record.files)),
                local,
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        cells = [
            cell.ljust(width) if column in (0, 1, 7) else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())
    print(f"\ndata folder: {data_dir}")
    return 0


def run_info(args: argparse.Namespace) -> int:
    record = get_dataset_record(args.name)
    folder = _data_dir(args) / record.archive_dir
    lines = [
        f"{record.name}: {record.title}",
        f"  url:                {record.url}",
        f"  zip md5:            {record.md5 or '-'}",
        f"  zip sha256:         {record.sha256 or '-'}",
        f"  zip size:           {_size(record.bytes)}"
        + (f" ({record.bytes:,} bytes)" if record.bytes else ""),
        f"  folder in zip:      {record.archive_dir}/",
        f"  splits:             {', '.join(record.splits)} (papers report {record.eval_split})",
        f"  drop identical ids: {'yes' if record.drop_identical_ids else 'no'}",
        f"  hub copies:         {record.hf_corpus or '-'}, {record.hf_qrels or '-'}",
        f"  local copy:         {folder if folder.is_dir() else 'not downloaded'}",
        "  expected counts:",
    ]
    for split, counts in record.counts.items():
        lines.append(
            f"    {split:<6} {_count(counts.get('docs'))} docs, {_count(counts.get('queries'))} queries, "
            f"{_count(counts.get('qrels'))} qrels"
        )
    lines.append("  sha256 pins:" if record.files else "  sha256 pins:        none published")
    lines += [f"    {relative:<16} {digest}" for relative, digest in record.files.items()]
    print("\n".join(lines))
    return 0


def run_download(args: argparse.Namespace) -> int:
    names = expand_dataset_names(args.names)
    records = [get_dataset_record(name) for name in names]
    mirror = args.mirror if args.mirror is not None else env_mirror()
    data_dir = _data_dir(args)
    failures = []
    for index, record in enumerate(records):
        # Forums sharing one zip (cqadupstack) reuse it; it is deleted after the last one.
        shared_later = any(other.url == record.url for other in records[index + 1 :])
        try:
            folder = install_dataset(
                record,
                data_dir,
                mirror,
                strict=args.strict,
                force=args.force,
                use_hub=args.hub,
                keep_archive=shared_later,
                attempts=args.retries,
                timeout=args.timeout,
            )
        except HarnessError as error:
            if len(records) == 1:
                raise
            failures.append(str(error))
            continue
        print(f"{record.name}: ready in {folder}")
    if failures:
        raise HarnessError(f"{len(failures)} of {len(records)} datasets failed: {' || '.join(failures)}")
    return 0


def _resolve_target(name: str, data_dir: Path) -> tuple[Path, str | None]:
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


def _print_result(result: VerifyResult) -> None:
    print(f"{result.name} ({result.root}, split {result.split})")
    source = installed_source(result.root)
    if source.get("kind") == "hub":
        print(
            f"  from the Hugging Face hub copy {source.get('location')}: re-serialised, the zip's pins do not apply"
        )
    width = max((len(check.relative) for check in result.files), default=0)
    for check in result.files:
        status = {
            "ok": "sha256 ok",
            "mismatch": f"sha256 MISMATCH: {check.actual} (pinned {check.expected})",
            "missing": "pinned but not present",
            "unpinned": "no published pin",
        }[check.status]
        print(f"  {check.relative:<{width}}  {status}")
    for count in result.counts:
        expected = f"expected {count.expected:,}" if count.expected is not None else "no expected count"
        verdict = "ok" if count.ok else "MISMATCH"
        print(
            f"  {count.what:<8} {count.actual:>10,}  ({expected}) {verdict if count.expected is not None else ''}".rstrip()
        )
    for problem in result.report.problems():
        print(f"  note: {problem}")


def run_verify(args: argparse.Namespace) -> int:
    data_dir = _data_dir(args)
    failed = []
    checksums = ChecksumStore()
    for name in expand_dataset_names(args.names):
        folder, registry_name = _resolve_target(name, data_dir)
        dataset = load_dataset(
            folder,
            args.split,
            strict=args.strict,
            name=registry_name,
            qrels_duplicates=args.qrels_duplicates,
            checksums=checksums,
        )
        result = verify_dataset(dataset)
        _print_result(result)
        if result.failures:
            failed.append(f"{result.name}: {', '.join(result.failures)}")
            print(f"{result.name}: FAILED")
        else:
            print(f"{result.name}: OK")
    if failed:
        raise HarnessError(f"verification failed: {'; '.join(failed)}")
    return 0

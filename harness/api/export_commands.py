"""``harness export RESULT_DIR --format {mteb,model-index} --output DIR``: results in other tools' formats."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.api.command_result import Command, CommandResult
from harness.core.errors import HarnessError
from harness.core.options import OptionsRecord, folder, option
from harness.results.export_formats import EXPORT_FORMATS, export_results
from harness.results.result_store import (
    METRICS_FILE,
    PROVENANCE_FILE,
    StoredResult,
    load_result,
    scan_results,
)


class ExportOptions(OptionsRecord):
    """``harness export RESULT_DIR``: the result folder (or every result below a folder) written as
    ``format`` (``mteb``: MTEB's ``<org>__<model>/<revision>/<Task>.json`` with ``model_meta.json`` and
    ``run_settings.jsonl``; ``model-index``: a Hugging Face model card's ``model-index`` YAML, its results'
    source at ``source_url``) into ``output``."""

    results: Path = option(
        positional=True,
        parse=Path,
        role="input",
        metavar="RESULT_DIR",
        help="a result folder (metrics.json and provenance.json), or a folder of results: every one below it",
    )
    format: str = option(
        choices=EXPORT_FORMATS,
        help="mteb (the MTEB results repository's files) or model-index (a Hugging Face model card's YAML)",
    )
    output: Path = option(
        parse=folder,
        role="output",
        metavar="DIR",
        help="folder to write into: mteb writes DIR/<org>__<model>/<revision>/<Task>.json, model-index "
        "DIR/<org>__<model>/model-index.yaml",
    )
    source_url: str | None = option(
        None,
        metavar="URL",
        help="model-index: where the numbers are published, written as each result's source (Hugging Face "
        "takes a source only with its url; without it no source is written)",
    )


@dataclass
class ExportResult(CommandResult):
    """The results exported and the files written (``paths``)."""

    format: str
    results: list[StoredResult]

    def payload(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "results": [str(result.directory) for result in self.results],
            "files": [str(path) for path in self.paths],
        }

    def render(self) -> str:
        return "\n".join(f"wrote {path}" for path in self.paths)


def _results(path: Path) -> tuple[list[StoredResult], list[str]]:
    """The result folder ``path``, or every readable result below it (one warning per unreadable one)."""
    if (path / METRICS_FILE).is_file():
        return [load_result(path)], []
    if not path.is_dir():
        raise HarnessError(f"result folder not found: {path}")
    good, bad = scan_results(path)
    warnings = [f"warning: skipped {folder}: {reason}" for folder, reason in bad]
    if not good:
        raise HarnessError(
            f"no harness result in {path}: a result folder holds {METRICS_FILE} and {PROVENANCE_FILE}"
        )
    return good, warnings


def export(options: ExportOptions | None = None, /, **values: Any) -> ExportResult:
    """Write results in another tool's format, as ``harness export``.

    ``format="mteb"``: files mteb's own ``TaskResult.from_disk`` and ``ResultCache`` load, with the scores
    as mteb reports them (its keys, ``main_score`` nDCG@10, its rounding). ``format="model-index"``: the
    ``model-index`` YAML of a Hugging Face model card. A dataset with no MTEB task is one error line, and
    nothing is written. Example: ``export(results="results", format="mteb", output="mteb-results").paths``.
    """
    options = ExportOptions.coerce(options, values)
    results, warnings = _results(options.results)
    written = export_results(results, options.format, options.output, source_url=options.source_url)
    return ExportResult(options.format, results, paths=written, messages=warnings)


COMMANDS = (
    Command(
        "export",
        ExportOptions,
        export,
        help="write results in another tool's format: MTEB result files or a Hugging Face model-index",
        description="Write a result folder (or every result below a folder) as MTEB's results files "
        "(DIR/<org>__<model>/<revision>/<Task>.json with model_meta.json and run_settings.jsonl: what "
        "mteb's TaskResult and ResultCache load, scores under mteb's keys and rounding, main_score "
        "nDCG@10; the BEIR dataset -> MTEB task table is records/mteb_tasks.yaml) or as the model-index "
        "YAML of a Hugging Face model card (DIR/<org>__<model>/model-index.yaml: task retrieval, dataset "
        "name, hub id, split and data revision, every metric, with --source-url the source). A dataset's "
        "revision is sha256: + a digest of the data checksums the result recorded.",
    ),
)

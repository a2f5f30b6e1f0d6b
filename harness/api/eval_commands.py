"""Commands that run the pipeline: ``eval`` (dataset x model pairs), ``encode`` (fill the embedding cache)
and ``reproduce`` (a suite of conditions against published numbers).

All three take the pipeline's options, :class:`~harness.pipeline.EvalOptions` (one record, declared where
the pipeline reads it), so that ``encode`` and ``reproduce`` build exactly the cache keys and result
configs ``eval`` does. Each command's own options come before the shared ones on its command line.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import field_validator

from harness import pipeline
from harness.api.command_result import Command, CommandResult, StepOutcome
from harness.api.shared_options import (
    fuse_depth_option,
    fuse_method_option,
    norm_option,
    rrf_k_option,
    weights_option,
)
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write, atomic_write_json
from harness.core.options import OptionsRecord, option
from harness.core.text_table import text_table
from harness.encoding.embedding_cache import ShardedEmbeddings
from harness.encoding.shards import CorpusEncoding, SliceOutcome
from harness.evaluation.judged import HEADLINE_K, judged_warning
from harness.evaluation.metrics import HEADLINE_METRICS, pretty_metric
from harness.pipeline import EvalOptions, PairOutcome, check_inputs, load_inputs, run_pairs
from harness.reproduction.references import display_path, references_option
from harness.reproduction.suites import (
    MISS,
    OK,
    SKIPPED,
    ReproduceReport,
    SuiteSummary,
    format_markdown,
    format_suite_list,
    format_text,
    list_suites,
    load_suite,
    run_suite,
    select_conditions,
    write_markdown,
)
from harness.results.result_store import StoredResult
from harness.retrieval.rerank import RerankSettings
from harness.retrieval.systems import SYSTEM_OPTIONS, SystemRecord, systems_from_options

# Each command's own options are declared in a record of their own, listed after EvalOptions among the
# command record's bases: pydantic takes the fields of the last-listed base first, so they lead the
# command line as they always have.

SYSTEMS = (
    "systems",
    "fuse the --model runs into one system and/or re-rank with a cross-encoder (see README)",
)


# ------------------------------------------------------------------------------------------ eval


class _EvalPairs(OptionsRecord):
    dataset: list[str] = option(nargs="+", help="registry names or BEIR-format folders")
    model: list[str] = option(
        nargs="+", help="registry names/aliases (models or systems), Hugging Face ids or local model folders"
    )


class EvalCommandOptions(EvalOptions, _EvalPairs):
    """``harness eval --dataset D.. --model M..``: every dataset x model pair through the pipeline.

    ``dataset`` and ``model`` are lists; the pipeline's options are :class:`EvalOptions`'s. ``fuse`` (and
    ``rrf_k``, ``norm``, ``weights``, ``fuse_depth``) fuses the models' runs into one system, ``rerank``
    re-ranks each run with a cross-encoder (see :meth:`systems`).
    """

    fuse: str | None = fuse_method_option("--fuse", group=SYSTEMS)
    rrf_k: int = rrf_k_option(group=SYSTEMS)
    norm: str | None = norm_option(group=SYSTEMS)
    # --weights names the model's weights folder here (EvalOptions.model_weights), so fusion's are --fuse-weights.
    weights: list[float] | None = weights_option(group=SYSTEMS, flags=("--fuse-weights",))
    fuse_depth: int | None = fuse_depth_option(group=SYSTEMS)
    rerank: str | None = option(
        None, metavar="MODEL", group=SYSTEMS, help="cross-encoder (folder or hub id) re-ranking each run"
    )
    # Re-ranking's own settings refuse a depth or length below 1 (RerankSettings): from every source.
    rerank_depth: int = option(
        RerankSettings.depth,
        metavar="N",
        group=SYSTEMS,
        help="documents re-ranked per query; below it the first-stage order is kept (default: %(default)s)",
    )
    rerank_max_length: int | None = option(
        RerankSettings.max_length,
        metavar="N",
        group=SYSTEMS,
        help="pair truncation (default: 512)",
    )

    def systems(self) -> list[str | SystemRecord]:
        """The models as given, or the system(s) ``fuse``/``rerank`` make of them."""
        return systems_from_options(self.model, **{name: getattr(self, name) for name in SYSTEM_OPTIONS})


@dataclass
class EvalResult(CommandResult):
    """Every pair that ran: its stored result (metrics, run file, folder) and its time; failed pairs' lines."""

    outcomes: list[PairOutcome]
    failures: list[str] = field(default_factory=list)

    @property
    def results(self) -> list[StoredResult]:
        return [outcome.result for outcome in self.outcomes]

    def payload(self) -> dict[str, Any]:
        """What an experiment's ``results.json`` holds: each pair's folder, run and headline metrics."""
        return {"results": [_result_summary(result) for result in self.results]}

    def render(self) -> str:
        return "\n".join(summary_table(self.outcomes)) if self.outcomes else ""

    def summary(self) -> list[str]:
        """One line per pair: its headline metrics, and whether the result was reused."""
        return [
            f"{result.dataset} x {result.label}: "
            + ", ".join(
                f"{name} {result.metrics[name]:.4f}" for name in HEADLINE_METRICS if name in result.metrics
            )
            + (" (reused)" if result.reused else "")
            for result in self.results
        ]


def eval(
    options: EvalCommandOptions | None = None,
    /,
    *,
    notify: Callable[[str], None] | None = None,
    **values: Any,
) -> EvalResult:
    """Encode, index, retrieve and evaluate every dataset x model pair, as ``harness eval``.

    Each pair writes ``results/<dataset>/<model>/`` (run.trec, metrics.json, provenance.json); an unchanged
    pair reuses its result and embeddings are cached. Inputs are checked before any pair starts; a pair
    that fails later is one ``error:`` message (exit code 2) while the others still run. ``result.results``
    holds the stored results. ``notify`` receives the ``note:`` lines about ignored options as soon as the
    inputs are checked (before the pairs run); without it they lead ``result.messages``.
    Example: ``eval(dataset=["scifact"], model=["bm25", "minilm"], top_k=100)``.
    """
    options = EvalCommandOptions.coerce(options, values)
    systems = options.systems()
    notes = [f"note: {note}" for note in check_inputs(options.dataset, systems, options)]
    for note in notes if notify is not None else []:
        notify(note)
    outcomes, failures = run_pairs(options.dataset, systems, options)
    messages = [] if notify is not None else notes
    for outcome in outcomes:
        warning = judged_warning(
            outcome.result.judged.get("mean") or {}, outcome.result.judged.get("ceiling")
        )
        if warning:
            messages.append(f"warning: {outcome.result.dataset} x {outcome.result.label}: {warning}")
    messages += [f"error: {failure}" for failure in failures]
    return EvalResult(
        outcomes=outcomes,
        failures=failures,
        paths=[outcome.result.directory for outcome in outcomes],
        messages=messages,
        exit_code=2 if failures else 0,
    )


def summary_table(outcomes: list[PairOutcome]) -> list[str]:
    """The closing table: one line per (dataset, model) with how its vectors were computed.

    Judged@10 stands beside nDCG@10: the share of the top 10 that has a judgment at all.
    """
    names = [pretty_metric(name) for name in HEADLINE_METRICS]
    header = ("dataset", "model", "runtime", names[0], f"Judged@{HEADLINE_K}", *names[1:], "time (s)")
    rows = []
    for outcome in outcomes:
        result = outcome.result
        values = [f"{result.metrics.get(name, float('nan')):.4f}" for name in HEADLINE_METRICS]
        judged = result.judged_share(HEADLINE_K)
        rows.append(
            (
                result.dataset,
                result.label,
                result.runtime_label,
                values[0],
                "-" if judged is None else f"{judged:.2f}",
                *values[1:],
                f"{outcome.seconds:.1f}" + (" (reused)" if result.reused else ""),
            )
        )
    return text_table([header, *rows], rule=True)


def _result_summary(result: StoredResult) -> dict[str, Any]:
    return {
        "dataset": result.dataset,
        "model": result.model,
        "label": result.label,
        "directory": str(result.directory),
        "run": str(result.run_path),
        "reused": result.reused,
        "metrics": {name: result.metrics[name] for name in HEADLINE_METRICS if name in result.metrics},
    }


def eval_step(options: EvalCommandOptions, directory: Path) -> StepOutcome:
    """``eval`` as an experiment step: ``results.json`` in the step's folder; any failed pair fails the step."""
    result = eval(options)
    if result.failures:
        raise HarnessError("; ".join(result.failures))
    output = directory / "results.json"
    atomic_write_json(output, result.payload())
    return StepOutcome([output], result.summary(), reused=all(item.reused for item in result.results))


# ---------------------------------------------------------------------------------------- encode


def parse_shard_slice(text: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)`` with ``0 <= I < N``."""
    index_text, slash, count_text = text.partition("/")
    if not slash or not index_text.strip().isdigit() or not count_text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected I/N such as 0/4, got {text!r}")
    index, count = int(index_text), int(count_text)
    if count < 1 or index >= count:
        raise argparse.ArgumentTypeError(f"need 0 <= I < N in I/N, got {text!r}")
    return index, count


class _EncodePair(OptionsRecord):
    dataset: str = option(help="registry name or BEIR-format folder")
    model: str = option(help="registry name/alias, Hugging Face id or local folder")
    shard: tuple[int, int] | None = option(
        None,
        parse=parse_shard_slice,
        metavar="I/N",
        help="encode only the shards i with i %% N == I (0 <= I < N); finished shards are skipped",
        exclusive="mode",
    )
    merge: bool = option(
        False,
        flags=("--merge", "--finalize"),
        action="store_true",
        help="check that all shards exist and finalise the cache entry (run after every --shard task)",
        exclusive="mode",
    )

    @field_validator("shard", mode="before")
    @classmethod
    def _slice_as_typed(cls, value: Any) -> Any:
        """``"1/4"`` (as on the command line) is ``(1, 4)``."""
        if isinstance(value, str):
            try:
                return parse_shard_slice(value)
            except argparse.ArgumentTypeError as error:
                raise ValueError(str(error)) from None
        return value


class EncodeOptions(EvalOptions, _EncodePair):
    """``harness encode --dataset D --model M [--shard I/N | --merge]``: one corpus into the embedding cache.

    ``shard=(I, N)`` encodes only the shards ``i`` with ``i % N == I`` (one task of a job array); ``merge``
    checks that every shard is there and finalises the entry. The pipeline's options are
    :class:`EvalOptions`'s, so the cache key is the one ``eval`` computes with the same options.
    """


@dataclass
class EncodeResult(CommandResult):
    """What was encoded: the entry's label and folder, its shards; the corpus or the slice's shards."""

    label: str
    directory: Path
    num_shards: int
    merged: bool = False
    corpus: ShardedEmbeddings | None = None  # the whole entry (a merge, or a whole encode)
    slice: SliceOutcome | None = None  # the shards one --shard task owns and encoded now

    def payload(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "label": self.label,
            "directory": str(self.directory),
            "shards": self.num_shards,
        }
        if self.corpus is not None:
            found.update(merged=self.merged, docs=self.corpus.num_docs, dim=self.corpus.dim)
        if self.slice is not None:
            found["slice"] = {
                "index": self.slice.index,
                "count": self.slice.count,
                "owned": self.slice.owned,
                "encoded": self.slice.encoded,
            }
        return found

    def render(self) -> str:
        if self.slice is not None:
            done = self.slice
            return (
                f"slice {done.index}/{done.count} of {self.label}: encoded {len(done.encoded)} of its "
                f"{len(done.owned)} shards ({len(done.owned) - len(done.encoded)} already done) in "
                f"{self.directory}; `harness encode --merge` when all slices finish"
            )
        corpus = self.corpus
        assert corpus is not None
        if self.merged:
            return (
                f"merged {self.num_shards} shards of {self.label} ({corpus.num_docs} docs, dim {corpus.dim}) "
                f"in {self.directory}"
            )
        return (
            f"encoded {self.label}: {corpus.num_docs} docs in {self.num_shards} shards, and its queries, "
            f"in {self.directory}"
        )


def encode(options: EncodeOptions | None = None, /, **values: Any) -> EncodeResult:
    """Encode one dataset's corpus with one model into the embedding cache, as ``harness encode``.

    Whole (then its queries too), one ``shard=(I, N)`` slice, or ``merge=True`` to finalise the entry once
    every slice is done; ``eval`` with the same options then encodes nothing. Example:
    ``encode(dataset="scifact", model="minilm", shard=(0, 4))``.
    """
    options = EncodeOptions.coerce(options, values)
    if options.merge and options.shard is not None:  # the command line's parser refuses both already
        raise HarnessError("encode: give shard or merge, not both")
    dataset, model = load_inputs(
        options.dataset,
        options.model,
        options.data_settings(),
        trust_remote_code=options.trust_remote_code,
        weights=options.model_weights,
    )
    job = CorpusEncoding.create(dataset, model, options.encoding_settings())
    if options.merge:
        corpus = job.merge()
        return EncodeResult(job.label, job.directory, job.num_shards, merged=True, corpus=corpus)
    if options.shard is None:
        corpus = job.encode_all()
        return EncodeResult(job.label, job.directory, job.num_shards, corpus=corpus)
    done = job.encode_slice(*options.shard)
    return EncodeResult(job.label, job.directory, job.num_shards, slice=done)


# ------------------------------------------------------------------------------------- reproduce


class _Suite(OptionsRecord):
    suite: str | None = option(
        None,
        positional=True,
        nargs="?",
        help="suite name (e.g. offline-smoke), a suite file, or a pyserini 2CR YAML file",
    )
    list_suites: bool = option(
        False,
        flags=["--list"],
        action="store_true",
        help="list the suites (shipped and HARNESS_CONFIG_DIR's) with their description and cell counts",
    )
    models: list[str] | None = option(
        None, nargs="+", metavar="MODEL", help="run only the suite's conditions of these models (or aliases)"
    )
    datasets: list[str] | None = option(
        None, nargs="+", metavar="DATASET", help="run only the suite's conditions on these datasets"
    )
    allow_skipped: bool = option(
        False,
        action="store_true",
        help="exit 0 even when conditions are skipped: when none could run here (nothing reproduced) "
        "or the suite sets fail_on_skip",
    )
    references: Path | None = references_option(
        "published numbers in place of the shipped references.yaml plus HARNESS_CONFIG_DIR's"
    )


class ReproduceOptions(EvalOptions, _Suite):
    """``harness reproduce SUITE``: every condition of a suite run (or reused) and checked against its
    published numbers; ``references`` replaces the shipped references file. The pipeline's options are
    :class:`EvalOptions`'s; a suite's own ``options`` override them per condition.

    ``list_suites`` lists the suites instead; ``models`` / ``datasets`` run a subset of the suite's
    conditions; ``allow_skipped`` lets SKIPPED conditions pass (a run with no OK and no MISS fails otherwise).
    """


@dataclass
class SuiteListResult(CommandResult):
    """``harness reproduce --list``: every suite with its description and cell counts."""

    suites: list[SuiteSummary] = field(default_factory=list)

    def payload(self) -> dict[str, Any]:
        return {
            "suites": [
                {
                    "name": summary.name,
                    "path": display_path(summary.path),
                    "description": summary.description,
                    "conditions": summary.conditions,
                    "cells": summary.cells,
                    "problem": summary.problem,
                }
                for summary in self.suites
            ]
        }

    def render(self) -> str:
        return format_suite_list(self.suites)


@dataclass
class ReproduceResult(CommandResult):
    """The suite's checks (OK / MISS / SKIPPED per cell), the pipeline results behind them, the table file."""

    report: ReproduceReport
    results: list[StoredResult]
    markdown: Path | None = None  # RESULTS_DIR/reproduce-SUITE.md

    def payload(self) -> dict[str, Any]:
        return {
            "suite": self.report.suite.name,
            "counts": {status: self.report.count(status) for status in (OK, MISS, SKIPPED)},
            "checks": [
                {
                    "dataset": check.condition.dataset,
                    "model": check.condition.model,
                    "metric": check.metric,
                    "status": check.status,
                    "ours": check.ours,
                    "published": check.expected,
                    "tolerance": check.condition.tolerance,
                    "source": check.condition.source,
                    "reason": check.reason,
                }
                for check in self.report.checks
            ],
        }

    def render(self) -> str:
        text = format_text(self.report)  # ends with its verdict line and a newline
        return text + f"wrote {self.markdown}" if self.markdown else text.removesuffix("\n")

    def summary(self) -> list[str]:
        """The counts an experiment step shows."""
        return [f"{status}: {self.report.count(status)}" for status in (OK, MISS, SKIPPED)]


def reproduce(options: ReproduceOptions | None = None, /, **values: Any) -> ReproduceResult | SuiteListResult:
    """Run a reproduction suite and compare every cell with its published number, as ``harness reproduce``.

    Conditions without a matching result run through the pipeline (cached embeddings and results are
    reused); one whose model or data cannot be obtained is SKIPPED. Writes RESULTS_DIR/reproduce-SUITE.md;
    the exit code is 1 on any MISS, when nothing was reproduced (every condition SKIPPED) and on SKIPPED
    when the suite sets fail_on_skip -- the last two not with ``allow_skipped``. ``models`` / ``datasets``
    keep a subset of the conditions; ``list_suites`` returns the suites instead (a SuiteListResult).
    Example: ``reproduce(suite="offline-smoke").report.count("OK")``.
    """
    options = ReproduceOptions.coerce(options, values)
    if options.list_suites:
        return SuiteListResult(suites=list_suites(options.references))
    if options.suite is None:
        raise HarnessError("name a suite (e.g. offline-smoke), or --list to see them")
    result = _run_suite(options)
    result.markdown = write_markdown(result.report, options.results_dir)
    result.paths.append(result.markdown)
    return result


def _run_suite(options: ReproduceOptions) -> ReproduceResult:
    if options.suite is None:
        raise HarnessError("reproduce: name a suite (e.g. offline-smoke), or --list to see them")
    suite = load_suite(options.suite, options.references)
    suite = select_conditions(suite, options.models, options.datasets)
    results: list[StoredResult] = []

    def recording_run_eval(dataset: str, model: str, eval_options: EvalOptions) -> StoredResult:
        # Looked up at call time, as run_suite does, so the pipeline can be stood in for (tests, dry runs).
        results.append(pipeline.run_eval(dataset, model, eval_options))
        return results[-1]

    report = run_suite(suite, options, run_eval=recording_run_eval, allow_skipped=options.allow_skipped)
    notes = [f"note: {note}" for note in suite.notes]
    return ReproduceResult(report=report, results=results, exit_code=report.exit_code, messages=notes)


def reproduce_step(options: ReproduceOptions, directory: Path) -> StepOutcome:
    """``reproduce`` as an experiment step: ``reproduce.md`` in the step's folder and the OK/MISS/SKIPPED counts."""
    result = _run_suite(options)
    output = directory / "reproduce.md"
    with atomic_write(output) as handle:
        handle.write(format_markdown(result.report))
    reused = all(item.reused for item in result.results)
    return StepOutcome([output], result.summary(), reused=reused, exit_code=result.exit_code)


# ``reproduce`` is listed after ``table`` and ``report`` in ``harness --help``: see harness.api.commands.
COMMANDS = (
    Command(
        "eval",
        EvalCommandOptions,
        eval,
        help="encode, index, retrieve and evaluate every dataset x model pair",
        description="Run the dense (or BM25) pipeline for every dataset x model pair and write "
        "results/<dataset>/<model>/ (run.trec, metrics.json, provenance.json). Embeddings are cached; "
        "an unchanged pair reuses its result.",
        step=eval_step,
        notify=True,
    ),
    Command(
        "encode",
        EncodeOptions,
        encode,
        help="encode a corpus into the embedding cache (whole, or one --shard I/N slice for job arrays)",
        description="Encode one dataset's corpus with one model into the embedding cache, so that "
        "`harness eval` with the same options reuses it. With --shard I/N only the shards i with "
        "i % N == I are encoded (one task of a SLURM array: --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT); "
        "--merge then checks that every shard exists and finalises the cache entry. All tasks must "
        "share the cache directory. Eval's options are accepted so the cache key is identical; "
        "retrieval and metric options have no effect here.",
    ),
)

REPRODUCE = Command(
    "reproduce",
    ReproduceOptions,
    reproduce,
    help="run a suite of conditions and compare with published numbers (OK / MISS / SKIPPED)",
    description="Load the suite SUITE (harness/records/suites/ or HARNESS_CONFIG_DIR/suites/, a suite file, "
    "or a pyserini 2CR file such as pyserini/2cr/beir.yaml, each condition run by the harness model "
    "mapped to it in records/pyserini_2cr.yaml), run every model x dataset condition "
    "that has no matching result yet (cached embeddings and results are reused), and print ours "
    "vs published with the difference and OK / MISS per cell; the same table is written to "
    "RESULTS_DIR/reproduce-SUITE.md. A condition whose model or data cannot be obtained is SKIPPED with "
    "the reason. Exits 1 on any MISS, when nothing was reproduced (no OK and no MISS), and on SKIPPED when "
    "the suite sets fail_on_skip; --allow-skipped accepts skipped conditions. --models / --datasets run a "
    "subset of the suite's conditions; --list lists the suites.",
    step=reproduce_step,
)

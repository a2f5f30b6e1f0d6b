"""Commands on run files: ``evaluate`` (trec_eval-exact metrics), ``compare`` (paired tests), ``fuse``."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.api.command_result import Command, CommandResult, StepOutcome
from harness.api.shared_options import (
    alpha_option,
    complete_option,
    correction_option,
    fuse_depth_option,
    fuse_method_option,
    json_output_option,
    ks_option,
    n_resamples_option,
    norm_option,
    paired_test_option,
    qrels_duplicates_option,
    relevance_level_option,
    rrf_k_option,
    score_precision_option,
    seed_option,
    significance_of,
    weights_option,
)
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write, atomic_write_json, describe_inputs, file_digest
from harness.core.options import INT32_MAX, OptionsRecord, option
from harness.core.output_guard import check_outputs
from harness.core.text_table import text_table
from harness.datasets.qrels import (
    DEFAULT_INPUT_RULES,
    INPUT_RULES_READING,
    QrelsFile,
    irds_dataset_id,
    read_qrels,
)
from harness.evaluation.comparison import COMPARE_METRICS, PAIRING_RULE, SignificanceSettings, compare_runs
from harness.evaluation.ir_metadata import Header, read_run_header, resources_section, run_header
from harness.evaluation.metrics import EVALUATE_FAMILIES, PIPELINE_KS, Evaluation
from harness.evaluation.metrics import evaluate as score_run
from harness.evaluation.scoring_options import METRIC_NAMES_HELP, input_rules_option
from harness.evaluation.trec import (
    Run,
    RunColumns,
    cut_run,
    read_run,
    read_run_columns,
    run_labels,
    write_run,
)
from harness.experiments import ultrarag
from harness.retrieval.fusion import FusionSettings
from harness.retrieval.fusion import fuse as fuse_runs
from harness.retrieval.settings import RetrievalSettings
from harness.retrieval.systems import fusion_from_options

METRICS_HELP = f"commas or spaces between names; {METRIC_NAMES_HELP}"
FORMATS_HELP = (
    "QRELS is TREC `qid iter docid rel` or BEIR TSV `query-id corpus-id score` (header optional); runs are "
    "TREC `qid Q0 docid rank score tag`, columns after the tag ignored. ranx JSON ({qid: {docid: score}} "
    "runs, {qid: {docid: grade}} qrels; .json, .json.gz) and parquet runs (q_id, doc_id, score columns) are "
    "read too, ranked alike; irds:<dataset-id> names an ir_datasets dataset's qrels (or scoreddocs), where "
    "ir_datasets is installed. Files are read as trec_eval reads "
    "them: columns split on spaces and tabs, lines starting with # skipped, relevance read as an integer "
    "(1.5 is 1), scores as C reads them (0x1p-1 too); .gz is read transparently. Ranking is trec_eval's: "
    "score descending, then docid descending; the rank column is ignored. --input-rules trec_eval reads "
    "legacy files exactly as trec_eval 10 does (2abc, 0.5abc, nan, a lone CR), --input-rules ultrarag as "
    "UltraRAG does."
)
KS_HELP = (
    "cutoffs for bare metric names, e.g. --metrics ndcg recall --ks 10 100 "
    f"(default: {' '.join(map(str, PIPELINE_KS))} with the default metrics; otherwise bare map, mrr "
    "and ndcg cover the whole ranking)"
)
RELEVANCE_HELP = (
    "a document is relevant when rel >= N (trec_eval -l; default: %(default)s); nDCG's gain is rel itself"
)
COMPLETE_HELP = (
    "average over every judged query, scoring those the run missed as 0 (trec_eval -c); "
    "default: only judged queries present in the run"
)
ULTRARAG_SAVE_PATH = "also write UltraRAG's result JSON here, the harness's fuller report beside it"


class EvaluateOptions(OptionsRecord):
    """``harness evaluate QRELS RUN``: trec_eval-exact metrics of one run file."""

    qrels: Path = option(positional=True, metavar="QRELS", parse=Path)
    run: Path = option(positional=True, metavar="RUN", parse=Path)
    metrics: list[str] | None = option(
        None,
        nargs="+",
        metavar="NAME",
        help=f"{METRICS_HELP} (default: {' '.join(EVALUATE_FAMILIES)})",
    )
    ks: list[int] | None = ks_option(KS_HELP, metavar="K")
    relevance_level: int = relevance_level_option(RELEVANCE_HELP, metavar="N")
    complete: bool = complete_option(COMPLETE_HELP)
    score_precision: str = score_precision_option()
    input_rules: str = input_rules_option()
    output: Path | None = json_output_option()
    qrels_duplicates: str = qrels_duplicates_option()
    no_diagnostics: bool = option(
        False,
        action="store_true",
        help="skip judged@k and the tie bounds (the bounds re-score every query whose tie order matters "
        "twice: about 3x the time on a large run full of ties)",
    )
    per_query: bool = option(
        False,
        action="store_true",
        help="include per-query values (in the JSON with --output, else printed as `qid metric value` lines)",
    )
    max_docs_per_query: int | None = option(
        None,
        low=1,
        high=INT32_MAX,
        metavar="N",
        help="score only each query's first N documents in trec_eval's ranking order, as trec_eval -M N "
        "(default: every document of the run)",
    )
    ultrarag_save_path: Path | None = option(None, hidden=True, role="output", help=ULTRARAG_SAVE_PATH)

    def cutoffs(self) -> list[int] | None:
        """``ks``, or the default cut-offs when the default metric families are used."""
        if self.ks is None and self.metrics is None:
            return list(PIPELINE_KS)
        return self.ks


@dataclass
class EvaluateResult(CommandResult):
    """The metrics of one run: means, per-query values, coverage, judged@k and tie diagnostics."""

    options: EvaluateOptions
    evaluation: Evaluation
    inputs: dict[str, dict[str, str]]

    def payload(self) -> dict[str, Any]:
        return {"inputs": self.inputs, **self.evaluation.to_json(self.options.per_query)}

    def render(self) -> str:
        result = self.evaluation
        lines = text_table([[name, f"{value:.4f}"] for name, value in result.aggregate.items()])
        lines.append(coverage_line(result))
        if self.options.input_rules != DEFAULT_INPUT_RULES:
            lines.append(reading_line(self.options.input_rules, self.options.score_precision))
        if result.judged:
            lines.append(_judged_line(result))
        if result.ties:
            lines.append(_ties_line(result))
        if self.options.output:
            lines.append(f"wrote {self.options.output}")
        elif self.options.per_query:
            lines += [
                f"{qid}\t{name}\t{value:.4f}"
                for qid, values in result.per_query.items()
                for name, value in values.items()
            ]
        return "\n".join(lines)

    def summary(self) -> list[str]:
        """The two lines an experiment step shows."""
        result = self.evaluation
        lines = [
            ", ".join(f"{name} {value:.4f}" for name, value in result.aggregate.items()),
            f"averaged over {result.n_queries} queries present in both run and qrels",
        ]
        if self.options.input_rules != DEFAULT_INPUT_RULES:
            lines.append(reading_line(self.options.input_rules, self.options.score_precision))
        return lines


def evaluate(options: EvaluateOptions | None = None, /, **values: Any) -> EvaluateResult:
    """Score a TREC run file against qrels exactly as trec_eval does.

    Give an :class:`EvaluateOptions` or its fields as keywords, e.g.
    ``evaluate(qrels="qrels.txt", run="run.trec", metrics=["ndcg@10", "recall@100"])``.
    The result's ``evaluation.aggregate`` holds the means, ``evaluation.per_query`` the per-query values;
    ``output`` (a JSON file) and ``ultrarag_save_path`` are written when given.
    """
    options = EvaluateOptions.coerce(options, values)
    qrels_file = read_qrels(options.qrels, duplicates=options.qrels_duplicates, rules=options.input_rules)
    qrels = qrels_file.qrels
    run: RunColumns | Run = read_run_columns(options.run, rules=options.input_rules)
    notes = reading_notes(qrels_file, {"run": run})
    if options.max_docs_per_query is not None:
        run = cut_run(run, options.max_docs_per_query, options.score_precision)
    evaluation = score_run(
        qrels,
        run,
        options.metrics or list(EVALUATE_FAMILIES),
        ks=options.cutoffs(),
        relevance_level=options.relevance_level,
        complete=options.complete,
        score_precision=options.score_precision,
        diagnose=not options.no_diagnostics,
    )
    evaluation.settings |= reading_settings(options.input_rules, notes)
    inputs = describe_sources({"qrels": options.qrels, "run": options.run})
    result = EvaluateResult(options=options, evaluation=evaluation, inputs=inputs)
    result.messages += [f"note: {note}" for note in notes]
    if evaluation.judged.get("warning"):
        result.messages.append(f"warning: {evaluation.judged['warning']}")
    if options.output:
        result.write_payload(options.output)
    if options.ultrarag_save_path:
        shaped = ultrarag.trec_results(evaluation.aggregate)
        result.paths += write_ultrarag(options.ultrarag_save_path, shaped, result.payload())
    return result


def describe_sources(sources: dict[str, Path]) -> dict[str, dict[str, str]]:
    """``role -> {path, sha256}`` of each input file; an ``irds:`` source is recorded by its id alone."""
    files = {role: path for role, path in sources.items() if irds_dataset_id(path) is None}
    described = describe_inputs(files)
    return {role: described.get(role) or {"ir_datasets": str(path)} for role, path in sources.items()}


def file_inputs(sources: dict[str, Path]) -> dict[str, Path]:
    """The sources that are files (an experiment step's reuse key); ``irds:`` ids are in its options."""
    return {role: path for role, path in sources.items() if irds_dataset_id(path) is None}


def reading_notes(qrels: QrelsFile, runs: dict[str, RunColumns]) -> list[str]:
    """What a lenient rule set read silently (lines skipped, unreadable numbers taken as 0...), by file."""
    notes = [f"qrels {qrels.path}: {note}" for note in qrels.notes]
    return notes + [f"{label} {run.path}: {note}" for label, run in runs.items() for note in run.notes]


def reading_settings(rules: str, notes: list[str]) -> dict[str, Any]:
    """The output's record of how the files were read."""
    settings: dict[str, Any] = {"input_rules": rules, "reading": INPUT_RULES_READING[rules]}
    if notes:
        settings["reading_notes"] = notes
    return settings


def reading_line(rules: str, score_precision: str) -> str:
    """One line naming how the files were read and the scores ranked, and the profile that is."""
    line = f"read with --input-rules {rules}, scores ranked in {score_precision}"
    for profile, (profile_rules, precision, _) in ultrarag.TREC_PROFILES.items():
        if (profile_rules, precision) == (rules, score_precision):
            line = f"profile {profile}: {line}"
    return line


def _judged_line(result: Evaluation) -> str:
    means = ", ".join(f"{name} {value:.4f}" for name, value in result.judged["mean"].items())
    return f"judged (share of the top k with a judgment): {means}"


def _ties_line(result: Evaluation) -> str:
    ties = result.ties
    if not ties["queries_with_ties"]:
        return "ties: no query has tied scores; every metric is independent of the tie rule"
    straddling = ", ".join(f"{cut} {entry['queries']}" for cut, entry in ties["straddling_cutoff"].items())
    moving = [
        f"{name} {bound['lowest']:.4f}..{bound['highest']:.4f}"
        for name, bound in ties["bounds"].items()
        if bound["lowest"] != bound["highest"]
    ]
    return (
        f"ties: {ties['queries_with_ties']} queries have tied scores; straddling the cut-off: {straddling or '-'}; "
        f"range over tie orders: {', '.join(moving) or 'none moves'}"
    )


def preview(qids: list[str], limit: int = 5) -> str:
    """The first ``limit`` ids, then how many more."""
    shown = ", ".join(qids[:limit])
    return shown + (f", ... (+{len(qids) - limit})" if len(qids) > limit else "")


def coverage_line(result: Evaluation) -> str:
    """Which queries were averaged, which judged ones had no results, which run queries had no qrels."""
    missing, unjudged = result.qrels_queries_without_results, result.run_queries_without_qrels
    how = (
        "scored as 0 (--complete)"
        if result.settings["complete"]
        else "not averaged (use --complete to count as 0)"
    )
    line = f"averaged over {result.n_queries} queries; {len(missing)} judged queries without results, {how}"
    if missing:
        line += f": {preview(missing)}"
    line += f"; {len(unjudged)} run queries without judgments skipped"
    return line


def write_ultrarag(save_path: str | Path, shaped: dict[str, Any], fuller: dict[str, Any]) -> list[Path]:
    """UltraRAG's JSON at ``save_path`` (its indent of 4) and the harness's report beside it."""
    path = Path(save_path)
    # The report beside save_path is named by no option, so the record's guard has not seen it.
    check_outputs({"save_path": path, "the report beside save_path": ultrarag.beside(path)})
    with atomic_write(path) as handle:
        json.dump(shaped, handle, ensure_ascii=False, indent=4)
    atomic_write_json(ultrarag.beside(path), fuller)
    return [path, ultrarag.beside(path)]


# -------------------------------------------------------------------------------------- compare


class CompareOptions(OptionsRecord):
    """``harness compare QRELS RUN_A RUN_B..``: paired significance tests of runs against the first."""

    qrels: Path = option(positional=True, metavar="QRELS", parse=Path)
    baseline: Path = option(positional=True, metavar="RUN_A", parse=Path, help="the baseline run")
    others: list[Path] = option(
        positional=True, nargs="+", metavar="RUN_B", parse=Path, help="runs compared with RUN_A"
    )
    metrics: list[str] = option(
        list(COMPARE_METRICS),
        nargs="+",
        metavar="NAME",
        help=f"{METRICS_HELP} (default: {' '.join(COMPARE_METRICS)})",
    )
    ks: list[int] | None = ks_option(KS_HELP, metavar="K")
    relevance_level: int = relevance_level_option(RELEVANCE_HELP, metavar="N")
    complete: bool = complete_option(COMPLETE_HELP)
    score_precision: str = score_precision_option()
    input_rules: str = input_rules_option()
    output: Path | None = json_output_option()
    qrels_duplicates: str = qrels_duplicates_option()
    test: str = paired_test_option()
    n_resamples: int = n_resamples_option()
    seed: int = seed_option()
    alpha: float = alpha_option()
    correction: str = correction_option("all metric x run comparisons")
    ultrarag_save_path: Path | None = option(None, hidden=True, role="output", help=ULTRARAG_SAVE_PATH)


@dataclass
class CompareResult(CommandResult):
    """Each run against the baseline on each metric: means, difference, interval, p-values, verdict."""

    comparison: dict[str, Any]
    inputs: dict[str, dict[str, str]]
    significance: SignificanceSettings
    output: Path | None = None

    def payload(self) -> dict[str, Any]:
        return {"inputs": self.inputs, **self.comparison}

    def render(self) -> str:
        lines = comparison_lines(self.comparison)
        if self.output:
            lines.append(f"wrote {self.output}")
        return "\n".join(lines)

    def summary(self) -> list[str]:
        """The lines an experiment step shows: the settings, then one line per comparison."""
        result, described = self.comparison, self.significance.describe()
        lines = [f"baseline {result['baseline']}; {result['n_queries']} paired queries; {described}"]
        settings = result["settings"]
        if settings.get("input_rules", DEFAULT_INPUT_RULES) != DEFAULT_INPUT_RULES:
            lines.append(reading_line(settings["input_rules"], settings["score_precision"]))
        return lines + [
            f"{row['metric']} {row['system']} {row['mean_system']:.4f} vs {row['mean_baseline']:.4f}: "
            f"diff {row['difference']:+.4f}, p {row['p_value']:.4f}{', significant' if row['significant'] else ''}"
            for row in result["comparisons"]
        ]


def compare(options: CompareOptions | None = None, /, **values: Any) -> CompareResult:
    """Paired significance tests of runs against a baseline run, as ``harness compare``.

    E.g. ``compare(qrels="qrels.txt", baseline="bm25.trec", others=["dense.trec"], metrics=["ndcg@10"])``;
    ``result.comparison["comparisons"]`` has one row per metric x run (difference, CI, p, p_adj).
    """
    options = CompareOptions.coerce(options, values)
    paths = [options.baseline, *options.others]
    labels = run_labels(paths)
    if len(set(labels)) != len(labels):
        raise HarnessError("the same run file is given twice")
    significance = significance_of(options)
    qrels_file = read_qrels(options.qrels, duplicates=options.qrels_duplicates, rules=options.input_rules)
    qrels = qrels_file.qrels
    columns = {
        label: read_run_columns(path, rules=options.input_rules)
        for label, path in zip(labels, paths, strict=True)
    }
    notes = reading_notes(qrels_file, columns)
    runs = {label: run.to_run() for label, run in columns.items()}
    comparison = compare_runs(
        qrels,
        runs,
        options.metrics,
        ks=options.ks,
        settings=significance,
        relevance_level=options.relevance_level,
        complete=options.complete,
        score_precision=options.score_precision,
    )
    comparison["settings"] |= reading_settings(options.input_rules, notes)
    files = {
        "qrels": options.qrels,
        **{f"run:{label}": path for label, path in zip(labels, paths, strict=True)},
    }
    result = CompareResult(
        comparison=comparison,
        inputs=describe_sources(files),
        significance=significance,
        output=options.output,
    )
    result.messages += [f"note: {note}" for note in notes]
    if options.output:
        result.write_payload(options.output)
    if options.ultrarag_save_path:
        shaped = ultrarag.pvalue_results(comparison["comparisons"])
        result.paths += write_ultrarag(options.ultrarag_save_path, shaped, result.payload())
    return result


def comparison_lines(result: dict[str, Any]) -> list[str]:
    """The printed comparison: settings, pairing, runs missing queries, then the table."""
    settings = result["settings"]
    lines = [
        f"A = {result['baseline']} (baseline); {result['n_queries']} paired queries; two-sided paired "
        f"{settings['test']} test; {settings['correction']} correction over {settings['n_comparisons']} "
        f"comparisons, alpha {settings['alpha']}; CI: {settings['confidence_interval']} "
        f"({settings['n_resamples']} resamples, seed {settings['seed']})",
        f"pairing: {result['pairing_rule']}",
    ]
    for label, info in result["runs"].items():
        missing = info["missing_queries_scored_as_empty"]
        if missing["count"]:
            lines.append(
                f"  {label}: {missing['count']} paired queries without results, counted as 0: {preview(missing['qids'])}"
            )
    ci_label = settings["confidence_interval"].split()[0] + " CI"
    header = ["metric", "B", "A_mean", "B_mean", "Diff(B-A)", ci_label, "n", "p", "p_adj", "sig"]
    rows = [
        [
            row["metric"],
            row["system"],
            f"{row['mean_baseline']:.4f}",
            f"{row['mean_system']:.4f}",
            f"{row['difference']:+.4f}",
            f"[{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]",
            str(row["n_queries"]),
            f"{row['p_value']:.4f}",
            f"{row['p_value_adjusted']:.4f}",
            "yes" if row["significant"] else "no",
        ]
        for row in result["comparisons"]
    ]
    return lines + text_table([header, *rows])


# ----------------------------------------------------------------------------------------- fuse


class FuseOptions(OptionsRecord):
    """``harness fuse RUN.. --method M --output F``: fuse run files into one run."""

    runs: list[Path] = option(
        positional=True, nargs="+", parse=Path, metavar="RUN", help="run files (TREC, ranx JSON, parquet)"
    )
    fuse: str | None = fuse_method_option("--method")
    rrf_k: int = rrf_k_option()
    norm: str | None = norm_option()
    weights: list[float] | None = weights_option()
    fuse_depth: int | None = fuse_depth_option()
    output: Path = option(
        flags=("--output", "-o"),
        parse=Path,
        role="output",
        help="fused run file to write: TREC text with an ir_metadata header (.gz compressed), ranx JSON "
        "(.json, .json.gz) or parquet (.parquet), by its name",
    )
    top_k: int = option(
        RetrievalSettings.top_k, low=1, high=INT32_MAX, help="documents kept per query (default: %(default)s)"
    )
    tag: str = option("harness-fused", help="run tag column (default: %(default)s)")
    input_rules: str = input_rules_option()


@dataclass
class FuseResult(CommandResult):
    """The fused run written to ``output``."""

    output: Path
    n_queries: int
    method: str
    n_runs: int

    def payload(self) -> dict[str, Any]:
        return {
            "output": str(self.output),
            "queries": self.n_queries,
            "method": self.method,
            "runs": self.n_runs,
        }

    def render(self) -> str:
        return f"wrote {self.output}: {self.n_queries} queries, {self.method} of {self.n_runs} runs"


def fuse(options: FuseOptions | None = None, /, **values: Any) -> FuseResult:
    """Fuse run files (rrf, combsum, combmnz, interpolation) and write the fused run, as ``harness fuse``."""
    options = FuseOptions.coerce(options, values)
    started = time.perf_counter()
    settings = fusion_from_options(
        options.fuse, options.rrf_k, options.norm, options.weights, options.fuse_depth
    )
    if settings is None:
        raise HarnessError("harness fuse needs --method (rrf, combsum, combmnz or interpolation)")
    runs = [read_run(path, rules=options.input_rules, finite=True) for path in options.runs]
    labels = run_labels(options.runs)
    fused = fuse_runs(runs, settings, [str(path) for path in options.runs])
    header = fused_header(options, settings, labels, time.perf_counter() - started)
    write_run(options.output, fused, options.tag, top_k=options.top_k, header=header)
    return FuseResult(
        output=options.output,
        n_queries=len(fused),
        method=settings.method,
        n_runs=len(runs),
        paths=[options.output],
    )


def fused_header(options: FuseOptions, settings: FusionSettings, labels: list[str], seconds: float) -> Header:
    """The fused run's ir_metadata: each input run (path, checksum) and the fusion over them; the test
    collection when every input's header names the same one."""
    steps: list[dict[str, Any]] = [
        {"name": label, "method": "run file", "source": str(path)}
        | ({} if irds_dataset_id(path) else {"checksum": f"sha256:{file_digest(path)}"})
        for label, path in zip(labels, options.runs, strict=True)
    ]
    joins = "interpolates" if settings.method == "interpolation" else "ensembles"
    steps.append(
        {"name": "fusion", "method": settings.method, "params": settings.describe(len(labels)), joins: labels}
    )
    return run_header(
        tag=options.tag,
        name=f"{settings.method} fusion",
        steps=steps,
        method={"top k": options.top_k},
        data=_shared_data(options.runs),
        command=sys.argv,
        resources=resources_section(wallclock_seconds=seconds),
    )


def _shared_data(paths: list[Path]) -> dict[str, Any] | None:
    """The ``data`` section every input run's header records alike, else None (a header that cannot be read
    leaves it out: the runs themselves were read)."""
    sections = []
    for path in paths:
        try:
            header = read_run_header(path)
        except HarnessError:
            return None
        sections.append((header or {}).get("data"))
    first = sections[0]
    return first if first and all(section == first for section in sections) else None


# ---------------------------------------------------------------------------------------- steps


def evaluate_step(options: EvaluateOptions, directory: Path) -> StepOutcome:
    """``evaluate`` as an experiment step: ``evaluation.json`` in the step's folder."""
    result = evaluate(options.replace(output=directory / "evaluation.json"))
    return StepOutcome(result.paths, result.summary())


def compare_step(options: CompareOptions, directory: Path) -> StepOutcome:
    """``compare`` as an experiment step: ``comparison.json`` in the step's folder."""
    result = compare(options.replace(output=directory / "comparison.json"))
    return StepOutcome(result.paths, result.summary())


COMMANDS = (
    Command(
        "evaluate",
        EvaluateOptions,
        evaluate,
        help="score a run file against qrels with trec_eval's semantics",
        description="Score a run against qrels. " + FORMATS_HELP,
        step=evaluate_step,
        step_inputs=lambda o: file_inputs({"qrels": o.qrels, "run": o.run}),
    ),
    Command(
        "compare",
        CompareOptions,
        compare,
        help="paired significance tests of runs against the first run",
        description="Compare RUN_B, RUN_C, ... with the baseline RUN_A on each metric: means, difference "
        "(B-A) with a bootstrap confidence interval, two-sided paired p-value, and the multiple-comparison "
        "correction over all metric x run comparisons. Pairing: " + PAIRING_RULE + " (listed in the "
        "output). " + FORMATS_HELP,
        step=compare_step,
        step_inputs=lambda o: file_inputs(
            {"qrels": o.qrels, **{f"run{i}": p for i, p in enumerate([o.baseline, *o.others])}}
        ),
    ),
    Command(
        "fuse",
        FuseOptions,
        fuse,
        help="fuse run files into one run (rrf, combsum, combmnz, interpolation)",
        description="Fuse two or more runs over the same queries (TREC, ranx JSON or parquet). Each run is "
        "ranked in trec_eval order (score descending, then docid descending) before its ranks or scores are "
        "used. The output's name picks its container: TREC text headed by an ir_metadata header (the inputs, "
        "their checksums and the fusion), .json for ranx JSON (no header: JSON has no place for one), "
        ".parquet for parquet (the header in its metadata).",
    ),
)

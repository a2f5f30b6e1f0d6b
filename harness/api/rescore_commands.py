"""``harness rescore RUN --qrels Q --as TOOL..``: one run scored as other tools score it, and why they differ.

The tools are declarative protocols (:mod:`harness.evaluation.tool_protocols`); for each, a waterfall goes
from trec_eval's value to the tool's one setting at a time and names the queries each step moved.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.api.command_result import Command, CommandResult
from harness.api.shared_options import json_output_option
from harness.core.errors import HarnessError, InputError
from harness.core.fileio import describe_inputs, read_json_object
from harness.core.options import INT32_MAX, OptionsRecord, option
from harness.core.text_table import text_table
from harness.datasets.dataset_registry import dataset_registry, unknown_name_hint
from harness.datasets.qrels import read_qrels
from harness.evaluation.metrics import HEADLINE_METRICS, MetricSpec, parse_metric_specs, pretty_metric
from harness.evaluation.tool_protocols import (
    TOOLS,
    TOP_QUERIES,
    TREC_EVAL,
    Step,
    Waterfall,
    score_under,
    tool_protocol,
    waterfall,
)
from harness.evaluation.trec import RunColumns, read_run_columns

EXCLUDED_IDS_FIX = 'expected {"query id": ["document id", ...], ...}, as BRIGHT\'s excluded_ids'


class RescoreOptions(OptionsRecord):
    """``harness rescore RUN --qrels Q --as TOOL..``: a run scored as each tool would, with the gap explained."""

    run: Path = option(positional=True, metavar="RUN", parse=Path, help="TREC run file")
    qrels: Path = option(parse=Path, metavar="QRELS", role="input", help="qrels (TREC or BEIR TSV)")
    tools: list[str] = option(
        list(TOOLS),
        flags=("--as",),
        nargs="+",
        choices=TOOLS,
        metavar="TOOL",
        help=f"tools to score as: {', '.join(TOOLS)} (default: all)",
    )
    metric: str = option(
        HEADLINE_METRICS[0], metavar="NAME", help="metric to explain, e.g. ndcg@10 (default: %(default)s)"
    )
    excluded_ids: Path | None = option(
        None,
        parse=Path,
        metavar="FILE.json",
        role="input",
        help='documents BRIGHT removes per query: {"qid": ["docid", ...]} (its excluded_ids)',
    )
    dataset: str | None = option(
        None,
        metavar="NAME",
        help="BEIR dataset of the run, for mteb's per-task identical-id rule (default: NAME of a qrels path "
        ".../NAME/qrels/SPLIT.tsv)",
    )
    top_queries: int = option(
        TOP_QUERIES,
        low=0,
        high=INT32_MAX,
        metavar="N",
        help="queries listed per step, those whose share of the mean moved most (default: %(default)s)",
    )
    output: Path | None = json_output_option("also write the waterfalls as JSON")


@dataclass
class RescoreResult(CommandResult):
    """trec_eval's value of the metric, each tool's, and each tool's waterfall of settings and queries."""

    options: RescoreOptions
    spec: MetricSpec
    dataset: str | None
    trec_eval: float
    waterfalls: list[Waterfall]
    inputs: dict[str, dict[str, str]]

    def payload(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "metric": self.spec.name,
            "dataset": self.dataset,
            "trec_eval": self.trec_eval,
            "baseline": "trec_eval 10 (harness evaluate): graded, float64 scores, ties by docid descending",
            "tools": {fall.tool.name: fall.to_json(self.spec) for fall in self.waterfalls},
        }

    def render(self) -> str:
        name = pretty_metric(self.spec.name)
        rows = [["tool", name, "vs trec_eval", "emulates"], ["trec_eval", f"{self.trec_eval:.6f}", "", ""]]
        rows += [
            [fall.tool.name, f"{fall.value:.6f}", signed(fall.value - self.trec_eval), fall.tool.title]
            for fall in self.waterfalls
        ]
        lines = text_table(rows, rule=True, right=(1, 2), last_unpadded=True)
        for fall in self.waterfalls:
            lines += [
                "",
                f"{fall.tool.name}: {name} {fall.start:.6f} -> {fall.value:.6f}",
                *_step_lines(fall),
            ]
            lines += [f"  note: {note}" for note in fall.notes(self.spec)]
        if self.options.output:
            lines.append(f"wrote {self.options.output}")
        return "\n".join(line.rstrip() for line in lines)


def signed(change: float) -> str:
    """A change at 6 decimals; one too small for them in scientific notation, none as 0."""
    if change == 0:
        return "0"
    return f"{change:+.6f}" if abs(change) >= 5e-7 else f"{change:+.1e}"


def _queries(step: Step) -> str:
    return ", ".join(f"{qid} {signed(share)}" for qid, share in step.queries) or "-"


def _step_lines(fall: Waterfall) -> list[str]:
    rows = [["setting: trec_eval -> tool", "value", "change", "queries that moved most (share of mean)"]]
    rows.append(["trec_eval", f"{fall.start:.6f}", "", ""])
    rows += [
        [
            f"{step.setting}: {step.was} -> {step.now}",
            f"{step.after:.6f}",
            signed(step.change),
            _queries(step),
        ]
        for step in fall.steps
    ]
    if not fall.steps:
        rows.append(["(no setting differs)", f"{fall.value:.6f}", "", ""])
    return ["  " + line for line in text_table(rows, rule=True, right=(1, 2), last_unpadded=True)]


def read_excluded_ids(path: Path) -> dict[str, frozenset[str]]:
    """BRIGHT's ``{qid: [docid, ...]}``; anything else is one line naming the file and the query."""
    payload = read_json_object(path, fix=EXCLUDED_IDS_FIX)
    excluded = {}
    for qid, docids in payload.items():
        if not isinstance(docids, list) or not all(isinstance(docid, str) for docid in docids):
            raise InputError(path, None, f"query {qid!r}: not a list of document ids", EXCLUDED_IDS_FIX)
        excluded[qid] = frozenset(docids)
    return excluded


def dataset_of(options: RescoreOptions) -> str | None:
    """The dataset named by ``--dataset`` (checked), else by a qrels path ``.../NAME/qrels/SPLIT.tsv``."""
    known = dataset_registry()
    if options.dataset is not None:
        if options.dataset not in known:
            hint = unknown_name_hint(options.dataset, sorted(known))
            raise HarnessError(f"--dataset {options.dataset}: not a known dataset; {hint}")
        return options.dataset
    parts = options.qrels.resolve().parts
    if len(parts) >= 4 and parts[-2] == "qrels":
        for name in (f"{parts[-4]}/{parts[-3]}", parts[-3]):
            if name in known:
                return name
    return None


def rescore(options: RescoreOptions | None = None, /, **values: Any) -> RescoreResult:
    """Score one run as each named tool would and explain the gap to trec_eval, as ``harness rescore``.

    E.g. ``rescore(run="bm25.trec", qrels="qrels/test.tsv", tools=["st-ir", "mteb"])``: ``result.waterfalls``
    holds, per tool, trec_eval's value, one step per setting the tool changes (the mean before and after,
    the queries whose share of the mean moved most) and the tool's value; ``output`` writes them as JSON.
    """
    options = RescoreOptions.coerce(options, values)
    spec = _one_metric(options.metric)
    qrels = read_qrels(options.qrels).qrels
    run = read_run_columns(options.run)
    excluded = read_excluded_ids(options.excluded_ids) if options.excluded_ids else {}
    dataset = dataset_of(options)
    matches = _answered(run) == set(qrels)
    tools = [
        tool_protocol(name, dataset=dataset, run_matches_qrels=matches)
        for name in dict.fromkeys(options.tools)
    ]
    for tool in tools:
        tool.check(spec)
    start = score_under(TREC_EVAL, qrels, run, spec)
    falls = [
        waterfall(tool, qrels, run, spec, excluded=excluded, top_queries=options.top_queries, start=start)
        for tool in tools
    ]
    files = {"qrels": options.qrels, "run": options.run}
    if options.excluded_ids:
        files["excluded_ids"] = options.excluded_ids
    result = RescoreResult(
        options=options,
        spec=spec,
        dataset=dataset,
        trec_eval=start.mean,
        waterfalls=falls,
        inputs=describe_inputs(files),
    )
    if options.excluded_ids and "bright" not in options.tools:
        result.messages.append("note: --excluded-ids only changes bright's scoring, which was not asked for")
    if options.output:
        result.write_payload(options.output)
    return result


def _one_metric(name: str) -> MetricSpec:
    specs = parse_metric_specs([name])
    if len(specs) != 1:
        raise HarnessError(f"--metric {name}: give one metric, e.g. ndcg@10")
    return specs[0]


def _answered(run: RunColumns) -> set[str]:
    """The run's queries that have at least one document."""
    return {qid for index, qid in enumerate(run.qids) if run.offsets[index + 1] > run.offsets[index]}


COMMANDS = (
    Command(
        "rescore",
        RescoreOptions,
        rescore,
        help="score a run as other tools would (sentence-transformers, mteb, pyserini, ranx, BRIGHT) and "
        "explain the gap",
        description="Score RUN against --qrels as each tool of --as scores it, and explain each difference "
        "from trec_eval: a waterfall switching one setting at a time from trec_eval's protocol to the tool's "
        "(relevance, removed documents, ranking depth, written scores, score precision, tie order, metric "
        "definition, averaging, rounding), each step's change of the mean and the queries responsible.",
    ),
)

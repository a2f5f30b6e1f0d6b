"""``harness check-model``: a preflight of one model on one dataset, before any number is computed.

Lists every setting that can move a number (prompts per role, pooling, normalisation, max length,
similarity, revision, the identical-id rule) as the model's record states it, beside what the model's own
sentence-transformers files and mteb (when installed) state, and flags each disagreement. With
``--probe N`` it measures, on N queries against a BM25 candidate pool, how much each disagreement moves
nDCG@10 (:mod:`harness.reproduction.model_probe`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.api.command_result import Command, CommandResult
from harness.core.options import OptionsRecord, option
from harness.core.text_table import text_table
from harness.datasets.prepare import open_dataset
from harness.models.preflight import Preflight, SettingCheck, preflight
from harness.models.resolve import resolve_model
from harness.pipeline import EvalOptions
from harness.reproduction.model_probe import PROBE_METRIC, ProbeOutcome, probe


class _ModelOnDataset(OptionsRecord):
    model: str = option(help="registry name/alias, Hugging Face id or local model folder")
    dataset: str = option(help="registry name of the dataset whose task, prompts and identical-id rule apply")
    probe: int = option(
        0,
        low=0,
        metavar="N",
        help="measure each disagreement's effect on nDCG@10 on N queries (BM25 top-100 pool); 0: do not",
    )


class CheckModelOptions(EvalOptions, _ModelOnDataset):
    """``harness check-model --model M --dataset D [--probe N]``: record vs model config vs mteb.

    The pipeline's options (:class:`EvalOptions`) say where data and caches are and how to encode for the
    probe (device, batch size, runtime, precision, ``trust_remote_code``, ``model_weights``).
    """


@dataclass
class CheckModelResult(CommandResult):
    """Every checked setting, the disagreements, and (with ``probe``) their measured effect."""

    preflight: Preflight
    probes: list[ProbeOutcome] = field(default_factory=list)
    probed_queries: int = 0

    def payload(self) -> dict[str, Any]:
        found = self.preflight
        return {
            "model": found.model,
            "dataset": found.dataset,
            "folder": found.folder,
            "mteb_version": found.mteb_version,
            "checks": [_check_json(check) for check in found.checks],
            "disagreements": [check.setting for check in found.disagreements],
            "probe": {
                "queries": self.probed_queries,
                "metric": PROBE_METRIC,
                "settings": [_probe_json(outcome) for outcome in self.probes],
            },
            "notes": list(found.notes),
        }

    def render(self) -> str:
        found = self.preflight
        mteb = f"mteb {found.mteb_version}" if found.mteb_version else "mteb not compared"
        lines = [
            f"check-model {found.model} on {found.dataset} (model folder: {found.folder or '-'}; {mteb})"
        ]
        rows = [["setting", "record", "other sources", "status"]]
        rows += [_check_row(check) for check in found.checks]
        lines += text_table(rows, rule=True, last_unpadded=True)
        lines += [f"note: {note}" for note in found.notes]
        lines += _disagreement_lines(found)
        lines += _probe_lines(self.probes, self.probed_queries)
        return "\n".join(lines)


def check_model(options: CheckModelOptions | None = None, /, **values: Any) -> CheckModelResult:
    """Compare a model's record with its own configuration and mteb's metadata on one dataset.

    Exit code 1 when any setting disagrees. Example (the offline MiniLM, probed on 20 queries):
    ``check_model(model="minilm", dataset="scifact", probe=20)``.
    """
    options = CheckModelOptions.coerce(options, values)
    model = resolve_model(
        options.model, trust_remote_code=options.trust_remote_code, weights=options.model_weights
    )
    found = preflight(model, options.dataset)
    outcomes: list[ProbeOutcome] = []
    probed = 0
    if options.probe and found.disagreements and not model.record.is_lexical:
        dataset = open_dataset(options.dataset, options.data_settings())
        outcomes = probe(found, model, dataset, options.probe, options.encoding_settings())
        probed = min(options.probe, sum(1 for qid in dataset.queries if dataset.qrels.get(qid)))
    messages = [
        f"warning: {check.setting}: the record says {_value(check.record)}, "
        + "; ".join(f"{other.source} says {_value(other.value)}" for other in check.disagreements)
        for check in found.disagreements
    ]
    return CheckModelResult(
        found, outcomes, probed, messages=messages, exit_code=1 if found.disagreements else 0
    )


def _value(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _check_row(check: SettingCheck) -> list[str]:
    others = "; ".join(f"{other.source}: {_value(other.value)}" for other in check.others) or "(not stated)"
    status = "ok" if check.agrees else "DISAGREE"
    if check.note and not check.agrees:
        status += f" ({check.note})"
    return [check.setting, _value(check.record), others, status]


def _disagreement_lines(found: Preflight) -> list[str]:
    if not found.disagreements:
        return ["no disagreement: the record, the model's files and mteb agree on every setting they state"]
    lines = [f"{len(found.disagreements)} disagreement(s):"]
    for check in found.disagreements:
        sources = ", ".join(f"{other.source} {_value(other.value)}" for other in check.disagreements)
        lines.append(f"  {check.setting}: record {_value(check.record)} vs {sources}")
    return lines


def _probe_lines(outcomes: list[ProbeOutcome], queries: int) -> list[str]:
    if not outcomes:
        return []
    metric = "nDCG@10"
    lines = [f"probe on {queries} queries (BM25 top-100 pool plus judged documents), {metric}:"]
    rows = [["setting", "alternative", "record", "alternative", "difference"]]
    for outcome in outcomes:
        alternative = _value(outcome.check.alternative)
        if outcome.skipped:
            rows.append(
                [outcome.check.setting, alternative, _number(outcome.record_score), "-", outcome.skipped]
            )
            continue
        difference = outcome.difference
        rows.append(
            [
                outcome.check.setting,
                alternative,
                _number(outcome.record_score),
                _number(outcome.alternative_score),
                "" if difference is None else f"{difference:+.5f}",
            ]
        )
    return lines + ["  " + line for line in text_table(rows, rule=True, last_unpadded=True)]


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.5f}"


def _check_json(check: SettingCheck) -> dict[str, Any]:
    return {
        "setting": check.setting,
        "record": check.record,
        "others": [{"source": other.source, "value": other.value} for other in check.others],
        "agrees": check.agrees,
        "alternative": check.alternative,
        "changes": check.changes,
        "note": check.note,
    }


def _probe_json(outcome: ProbeOutcome) -> dict[str, Any]:
    return {
        "setting": outcome.check.setting,
        "changes": outcome.change,
        "record": outcome.record_score,
        "alternative_score": outcome.alternative_score,
        "difference": outcome.difference,
        "skipped": outcome.skipped,
    }


COMMANDS = (
    Command(
        "check-model",
        CheckModelOptions,
        check_model,
        help="preflight: where a model's record, its own config and mteb disagree (--probe N measures it)",
        description="For one model and dataset, list every setting that can move a number -- query and "
        "document prompts (with the dataset's task instruction), pooling, normalisation, max length, "
        "similarity, revision, the identical-id rule -- as the model's record states it, beside what the "
        "model's config_sentence_transformers.json, modules.json, Pooling config.json and "
        "sentence_bert_config.json state and, when mteb is installed, mteb's ModelMeta and task metadata. "
        "With --probe N, encode the dataset's first N judged queries both ways against a candidate pool "
        "(BM25's top 100 of those queries plus their judged documents) and report nDCG@10 under the "
        "record's setting, under the alternative, and the difference. Exits 1 when any setting disagrees.",
    ),
)

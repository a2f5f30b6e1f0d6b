"""``harness run EXPERIMENT.yaml``: run an experiment file (or an UltraRAG parameter file) step by step."""

from __future__ import annotations

import argparse

from harness.experiments.document import load_experiment
from harness.experiments.runner import RESOLVED_FILE, SUMMARY_FILE, plan, run_experiment
from harness.experiments.steps import STEP_KINDS


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run an experiment file: eval, evaluate, compare, qa-eval, table, report, reproduce steps",
        description="Run the steps of an experiment YAML in order, each with the options of its command "
        f"({', '.join(STEP_KINDS)}). Shared parameters live under `params` and are referred to as ${{name}}. "
        "A step whose options and input files are unchanged is reused (eval and reproduce: per dataset x "
        "model, by the result cache). Writes the resolved experiment and every step's output to the "
        "experiment's output folder. An UltraRAG parameter file (its `evaluation` section) runs as the "
        "matching steps with UltraRAG's metric definitions and result file.",
    )
    parser.add_argument("experiment", metavar="EXPERIMENT.yaml", help="experiment or UltraRAG parameter file")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override parameter KEY, `output`, or STEP.OPTION (VALUE read as YAML); repeatable",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan (what runs, what is reused) and stop"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    experiment = load_experiment(args.experiment, args.overrides)
    if args.dry_run:
        print("\n".join(plan(experiment)))
        return 0
    outcomes = run_experiment(experiment, echo=print)
    ran = sum(outcome.status == "ran" for outcome in outcomes)
    print(
        f"{len(outcomes)} steps: {ran} ran, {len(outcomes) - ran} reused; "
        f"{experiment.output / RESOLVED_FILE}, {experiment.output / SUMMARY_FILE}"
    )
    return max((outcome.exit_code for outcome in outcomes), default=0)

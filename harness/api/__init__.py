"""The public Python API: one function and one options record per command.

Every ``harness`` command is a function here taking its options record (or the same options as
keywords) and returning a typed result that prints itself as the command does (``render()``) and
serialises itself (``to_json()``); ``help(harness.api.eval)`` lists every option::

    import harness

    result = harness.evaluate(qrels="qrels.txt", run="run.trec", metrics=["ndcg@10", "recall@100"])
    result.evaluation.aggregate        # {"ndcg@10": ..., "recall@100": ...}

The command line (``harness.cli``) and experiment steps (``harness run``) call these same functions
with these same records.
"""

from __future__ import annotations

from harness.api.cache_commands import (
    CacheClearOptions,
    CacheClearResult,
    CacheListOptions,
    CacheListResult,
    cache_clear,
    cache_list,
)
from harness.api.check_model_commands import CheckModelOptions, CheckModelResult, check_model
from harness.api.command_result import Command, CommandGroup, CommandResult, StepOutcome
from harness.api.commands import COMMAND_LINE, STEP_KINDS
from harness.api.data_commands import (
    DataDownloadOptions,
    DataDownloadResult,
    DataInfoOptions,
    DataInfoResult,
    DataListOptions,
    DataListResult,
    DataVerifyOptions,
    DataVerifyResult,
    data_download,
    data_info,
    data_list,
    data_verify,
)
from harness.api.diff_commands import DiffOptions, DiffResult, diff
from harness.api.eval_commands import (
    EncodeOptions,
    EncodeResult,
    EvalCommandOptions,
    EvalResult,
    ReproduceOptions,
    ReproduceResult,
    encode,
    eval,
    reproduce,
)
from harness.api.experiment_commands import RUN, RunOptions, RunResult, run
from harness.api.export_commands import ExportOptions, ExportResult, export
from harness.api.qa_commands import (
    QACompareOptions,
    QACompareResult,
    QAEvalOptions,
    QAEvalResult,
    RAGCompareOptions,
    RAGCompareResult,
    RAGEvalOptions,
    RAGEvalResult,
    qa_compare,
    qa_eval,
    rag_compare,
    rag_eval,
)
from harness.api.rescore_commands import RescoreOptions, RescoreResult, rescore
from harness.api.run_file_commands import (
    CompareOptions,
    CompareResult,
    EvaluateOptions,
    EvaluateResult,
    FuseOptions,
    FuseResult,
    compare,
    evaluate,
    fuse,
)
from harness.api.view_commands import ReportOptions, ReportResult, TableOptions, TableResult, report, table
from harness.pipeline import EvalOptions

# Every command in ``harness --help`` order: the stage commands, then ``run``.
COMMANDS: tuple[Command | CommandGroup, ...] = (*COMMAND_LINE, RUN)

__all__ = [
    "COMMANDS",
    "STEP_KINDS",
    "CacheClearOptions",
    "CacheClearResult",
    "CacheListOptions",
    "CheckModelOptions",
    "CheckModelResult",
    "CacheListResult",
    "Command",
    "CommandGroup",
    "CommandResult",
    "CompareOptions",
    "CompareResult",
    "DataDownloadOptions",
    "DataDownloadResult",
    "DataInfoOptions",
    "DataInfoResult",
    "DataListOptions",
    "DataListResult",
    "DataVerifyOptions",
    "DataVerifyResult",
    "DiffOptions",
    "DiffResult",
    "EncodeOptions",
    "EncodeResult",
    "EvalCommandOptions",
    "EvalOptions",
    "EvalResult",
    "EvaluateOptions",
    "EvaluateResult",
    "ExportOptions",
    "ExportResult",
    "FuseOptions",
    "FuseResult",
    "QACompareOptions",
    "QACompareResult",
    "QAEvalOptions",
    "QAEvalResult",
    "RAGCompareOptions",
    "RAGCompareResult",
    "RAGEvalOptions",
    "RAGEvalResult",
    "ReportOptions",
    "ReportResult",
    "ReproduceOptions",
    "ReproduceResult",
    "RescoreOptions",
    "RescoreResult",
    "RunOptions",
    "RunResult",
    "StepOutcome",
    "TableOptions",
    "TableResult",
    "cache_clear",
    "cache_list",
    "compare",
    "data_download",
    "data_info",
    "data_list",
    "data_verify",
    "check_model",
    "diff",
    "encode",
    "eval",
    "evaluate",
    "export",
    "fuse",
    "qa_compare",
    "qa_eval",
    "rag_compare",
    "rag_eval",
    "report",
    "reproduce",
    "rescore",
    "run",
    "table",
]

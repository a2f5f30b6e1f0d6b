"""Capture what every `harness` command shows a user, to prove a refactor changed none of it.

The refactor rule is "nothing a user sees may change". This script runs a fixed list of cases
(every command's --help, typical successful invocations, error cases) against one checkout and
writes what each case showed: argv, exit code, stdout, stderr and every file it wrote. Capture
before and after a change, then compare the two captures:

    python scripts/capture_outputs.py capture --python .venv/bin/python --repo /tmp/baseline \\
        --out /tmp/capture/baseline.json [--only NAME...]
    python scripts/capture_outputs.py capture --python .venv/bin/python --repo . --out /tmp/capture/now.json
    python scripts/capture_outputs.py compare /tmp/capture/baseline.json /tmp/capture/now.json
    python scripts/capture_outputs.py list

How a case runs. `PY -m harness ARGS` with `PYTHONPATH=REPO` (so any checkout is captured with the
same interpreter; `harness.__file__` is printed and checked once), in a fresh working folder
`<root>/work` (the same path for every case, recreated each time), with HARNESS_DATA_DIR and
HARNESS_RESULTS_DIR inside it, HARNESS_BEIR_MIRROR at /work/shared/data/beir, the Hugging Face hub
offline and COLUMNS=80 (argparse wraps help text to the terminal width). The root is a fixed path
(--root, default /tmp/harness-capture, emptied first): `harness run` step keys hash absolute paths,
so only captures made in the same root compare, and one capture runs at a time per root.

Fixtures. Every case starts from a copy of a fixture folder: `inputs` holds the checkout's
configs/ and tests/data/, a tiny BEIR folder (`tiny/`, 30 documents of scifact) and small
hand-made files in `inputs/` (a second answers file, malformed qrels, experiment and suite files);
other fixtures add harness commands run on top (scifact installed, result folders, first runs of
experiments). A fixture is built once per capture, when a case first needs it, and copied for each
case; files it holds are not recorded, only what the case itself writes or deletes.

The cache is SHARED between the cases of one capture (`<root>/cache`, shown as <CACHE>) to save
encoding time, and warmed first (BM25 indexes of scifact, MiniLM vectors of tiny/ and of the RAG
examples), so a case sees the same cache whether it runs alone (--only) or in the whole list.
Entries only one case creates (an ONNX export, an HNSW index) are still order-dependent: compare
--only captures with --only captures of the same names. The `cache list/clear` cases and the
sharded `encode` cases use their own cache inside the working folder, so its files are recorded too
(and in `cache` output the entry sizes are normalised: a manifest holds its encoding seconds).

Normalised, because they change from run to run: the working folder (<TMP>), the shared cache
(<CACHE>), the temporary root (<ROOT>), the checkout (<REPO>) and the interpreter's environment
(<VENV>); ISO datetimes; timings (JSON keys such as `timings`, `*seconds`, `created_at`,
`elapsed`, `time`; the `time (s)` column of tables; "in 1.2 s"); the values of `environment`
blocks (library versions, hardware, host); progress bars (dropped, their labels listed at the
end); pids and host names in staging-folder names; mtime stamps of checksum sidecars; the key of a
table/report step (it hashes the results' provenance, timings included). Scores, counts, metric values, file names
and option values are kept as they are. Not covered: the default `--runtime exact` (it times the
runtimes and picks the fastest, so its label and last score digits move) and scifact with MiniLM
(`reproduce offline-smoke`, the dense half of scifact-dense-vs-bm25.yaml): minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import gzip
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

MIRROR = Path("/work/shared/data/beir").resolve()
# One fixed root for every capture: step keys of `harness run` hash absolute paths, so two captures
# are comparable only when they ran in the same folder (hence one capture at a time per root).
ROOT = Path("/tmp/harness-capture")
MAX_TEXT = 256 * 1024  # text files up to this size are stored whole, bigger ones as sha256 + head
HEAD_LINES = 10  # lines kept of a big text file (each cut to HEAD_WIDTH characters)
HEAD_WIDTH = 300
MAX_DIFF_LINES = 40
CASE_TIMEOUT = 600

# --------------------------------------------------------------------------------------------
# Cases and fixtures
# --------------------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    args: list[str]
    fixture: str = "inputs"


@dataclass
class Fixture:
    parent: str | None
    commands: list[str] = field(default_factory=list)  # harness argument strings, run in order
    own_cache: bool = False  # cache inside the working folder instead of the shared one


TINY = "tiny@3d65dfd0"  # the result name of tiny/ (folder name @ checksum of its files)
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
QRELS = "configs/examples/trec/qrels.txt"
RUN_A = "configs/examples/trec/run_a.txt"
RUN_B = "configs/examples/trec/run_b.txt"
TE = "tests/data/trec_eval"
ANSWERS = "configs/examples/answers.jsonl"
RAG_A = "configs/examples/rag_example.jsonl"
RAG_B = "configs/examples/rag_example_b.jsonl"
EXPERIMENTS = ["answers", "rag", "ultrarag-eval-trec", "ultrarag-eval-trec-pvalue", "ultrarag-evaluate"]
ENCODE = f"encode --dataset tiny --model {MINILM} --runtime torch --shard-size 8 --no-progress"
# scifact-dense-vs-bm25.yaml's dense part (MiniLM over all of scifact) takes minutes on 2 cores:
# it is captured as a plan (--dry-run) and run with bm25-lucene in place of the dense model.
SCIFACT_LUCENE = (
    "--set dense=bm25-lucene --set 'dense_run=${results_dir}/${dataset}/bm25-lucene/run.trec'"
)

FIXTURES: dict[str, Fixture] = {
    "inputs": Fixture(None),  # built by write_inputs()
    "scifact": Fixture("inputs", ["data download scifact"]),
    # built first in every capture: it also warms the shared cache (rag-eval: the RAG examples' vectors)
    "results": Fixture(
        "scifact",
        [
            "eval --dataset scifact --model bm25 bm25-lucene --no-progress",
            f"eval --dataset tiny --model bm25 {MINILM} --runtime torch --no-progress",
            f"rag-eval {RAG_A}",
            f"rag-eval {RAG_B}",
        ],
    ),
    "own-cache": Fixture(
        "inputs",
        ["eval --dataset tiny --model bm25 --no-progress",
         f"eval --dataset tiny --model {MINILM} --runtime torch --no-progress"],
        own_cache=True,
    ),
    "own-cache-empty": Fixture("inputs", [], own_cache=True),
    "encode-shard0": Fixture("own-cache-empty", [f"{ENCODE} --shard 0/2"], own_cache=True),
    "encode-shards": Fixture("encode-shard0", [f"{ENCODE} --shard 1/2"], own_cache=True),
    "ran-scifact-lucene": Fixture(
        "scifact", [f"run configs/experiments/scifact-dense-vs-bm25.yaml {SCIFACT_LUCENE}"]
    ),
    "ran-trec-steps": Fixture("inputs", ["run inputs/experiment_trec.yaml"]),
}
for _stem in EXPERIMENTS:
    FIXTURES[f"ran-{_stem}"] = Fixture("inputs", [f"run configs/experiments/{_stem}.yaml"])


def c(name: str, args: str, fixture: str = "inputs") -> Case:
    """A case from a shell-like argument string (quoted with shlex)."""
    return Case(name, shlex.split(args), fixture)


def help_cases() -> list[Case]:
    commands = [
        "data", "data list", "data info", "data download", "data verify", "eval", "encode",
        "evaluate", "compare", "fuse", "qa-eval", "qa-compare", "rag-eval", "rag-compare", "cache",
        "cache list", "cache clear", "table", "report", "reproduce", "diff", "run",
    ]
    cases = [c("help", "--help"), c("help-short", "-h"), c("version", "--version"), c("no-args", "")]
    cases += [c(f"help-{cmd.replace(' ', '-')}", f"{cmd} --help") for cmd in commands]
    return cases


def data_cases() -> list[Case]:
    return [
        c("data-no-action", "data"),
        c("data-list", "data list"),
        c("data-info-scifact", "data info scifact"),
        c("data-info-msmarco", "data info msmarco"),
        c("data-info-cqadupstack-android", "data info cqadupstack/android"),
        c("data-download-scifact", "data download scifact"),
        c("data-download-scifact-again", "data download scifact", "scifact"),
        c("data-download-scifact-force", "data download scifact --force", "scifact"),
        c("data-download-mirror-option", f"data download scifact --mirror {MIRROR} --strict"),
        c("data-verify-scifact", "data verify scifact", "scifact"),
        c("data-verify-scifact-options", "data verify scifact --strict --qrels-duplicates last", "scifact"),
        c("data-verify-folder", "data verify tiny"),
        c("data-verify-missing", "data verify scifact"),
        c("err-data-info-unknown", "data info nosuchset"),
        c("err-data-download-unknown", "data download nosuchset"),
        c("err-data-download-timeout", "data download scifact --timeout -1"),
        c("err-data-download-retries", "data download scifact --retries 0"),
    ]


def evaluate_cases() -> list[Case]:
    e = f"evaluate {QRELS} {RUN_A}"
    te = f"evaluate {TE}/qrels.test.with-comments {TE}/results.comment.test"
    return [
        c("evaluate-default", e),
        c("evaluate-metrics-ks", f"{e} --metrics ndcg recall map mrr --ks 1 5 10 100"),
        c("evaluate-metrics-named", f"{e} --metrics ndcg@10 recall@100 P@5 MAP mrr@10 success@3"),
        c("evaluate-complete", f"{e} --complete --metrics ndcg@10 map"),
        c("evaluate-per-query", f"{e} --per-query --metrics ndcg@10 recall@5"),
        c("evaluate-output", f"{e} --output out/m.json --per-query --no-diagnostics"),
        c("evaluate-float32", f"{e} --metrics map p@1 --score-precision float32"),
        c("evaluate-relevance-2", f"{e} --relevance-level 2 --metrics ndcg@10 map recall@10"),
        c("evaluate-relevance-0", f"{e} --metrics dcg@5 ndcg@5 bpref --relevance-level 0"),
        c("evaluate-gz", f"evaluate {QRELS} inputs/run_a.trec.gz --metrics ndcg@10"),
        c("evaluate-trec-eval-fixture", f"{te} --metrics map gmap rprec bpref success@10 r_cap@100 dcg@10"),
        c("evaluate-trec-eval-trunc", f"evaluate {TE}/qrels.test.with-comments {TE}/results.trunc "
          "--complete --metrics map ndcg p@10 recall@100"),
        c("evaluate-beir-qrels-unjudged", f"evaluate {MIRROR}/scifact/qrels/test.tsv {RUN_A}"),
        c("evaluate-scifact-bm25", "evaluate data/scifact/qrels/test.tsv results/scifact/bm25/run.trec "
          "--metrics ndcg@10 recall@100 --per-query -o e.json", "results"),
        c("evaluate-duplicates-last", f"evaluate inputs/qrels_dup.txt {RUN_A} --qrels-duplicates last"),
        c("err-evaluate-duplicates", f"evaluate inputs/qrels_dup.txt {RUN_A}"),
        c("err-evaluate-bad-columns", f"evaluate inputs/qrels_badcols.txt {RUN_A}"),
        c("err-evaluate-bad-relevance", f"evaluate inputs/qrels_badrel.txt {RUN_A}"),
        c("err-evaluate-short-run", f"evaluate {QRELS} inputs/run_short.txt"),
        c("err-evaluate-missing-run", f"evaluate {QRELS} missing.trec"),
        c("err-evaluate-folder-run", "evaluate data/scifact/qrels/test.tsv results/scifact/bm25", "results"),
        c("err-evaluate-unknown-metric", f"{e} --metrics ndcg@10 nosuchmetric"),
        c("err-evaluate-ks-text", f"{e} --ks x"),
        c("err-evaluate-relevance-float", f"{e} --relevance-level 1.5"),
        c("err-evaluate-output-deep", f"{e} --output /nonexistent/x/y.json"),
        c("err-evaluate-output-folder", f"{e} --output configs"),
        c("err-evaluate-unknown-option", f"{e} --nosuch"),
        c("err-evaluate-bad-choice", f"{e} --score-precision float16"),
    ]


def compare_cases() -> list[Case]:
    cmp = f"compare {QRELS} {RUN_A} {RUN_B}"
    return [
        c("compare-default", cmp),
        c("compare-ttest-bonferroni", f"{cmp} --test ttest --correction bonferroni"),
        c("compare-wilcoxon-none", f"{cmp} --test wilcoxon --correction none --metrics ndcg@10 map"),
        c("compare-options-output", f"{cmp} --n-resamples 1000 --seed 7 --alpha 0.1 --output cmp.json"),
        c("compare-complete-ks", f"{cmp} --complete --metrics ndcg recall --ks 5 10"),
        c("compare-three-runs", f"{cmp} inputs/run_a.trec.gz --metrics ndcg@10 --score-precision float32"),
        c("err-compare-seed", f"{cmp} --seed -1"),
        c("err-compare-alpha", f"{cmp} --alpha 2"),
        c("err-compare-resamples", f"{cmp} --n-resamples 10"),
        c("err-compare-test", f"{cmp} --test nosuch"),
        c("err-compare-one-run", f"compare {QRELS} {RUN_A}"),
    ]


def fuse_cases() -> list[Case]:
    f = f"fuse {RUN_A} inputs/run_b_same_queries.txt"  # run_b.txt has a query run_a.txt lacks
    return [
        c("fuse-rrf", f"{f} --method rrf --output fused.trec"),
        c("fuse-rrf-k", f"{f} --method rrf --rrf-k 10 --top-k 5 --tag mine -o fused.trec"),
        c("fuse-combsum-zscore", f"{f} --method combsum --norm z-score -o fused.trec"),
        c("fuse-combmnz-depth", f"{f} --method combmnz --fuse-depth 5 --top-k 10 -o fused.trec"),
        c("fuse-interpolation", f"{f} --method interpolation --weights 0.3 0.7 --norm min-max -o f.trec"),
        c("err-fuse-method", f"{f} --method nosuch -o fused.trec"),
        c("err-fuse-weights", f"{f} --method interpolation --weights 0.3 -o fused.trec"),
        c("err-fuse-other-queries", f"fuse {RUN_A} {RUN_B} --method rrf -o fused.trec"),
        c("err-fuse-no-method", f"{f} -o fused.trec"),
        c("err-fuse-no-output", f),
    ]


def qa_cases() -> list[Case]:
    return [
        c("qa-eval-default", f"qa-eval {ANSWERS}"),
        c("qa-eval-per-question", f"qa-eval {ANSWERS} --per-question"),
        c("qa-eval-ultrarag", f"qa-eval {ANSWERS} --profile ultrarag --metrics em,acc,string_em,cover_em,f1,rouge"),
        c("qa-eval-flashrag-output", f"qa-eval {ANSWERS} --profile flashrag --per-question --output qa.json"),
        c("qa-eval-no-synonyms", f"qa-eval {ANSWERS} --no-synonyms --metrics meteor,bleu,diversity"),
        c("qa-eval-keys", "qa-eval inputs/answers_renamed.jsonl --gold-key gold --pred-key pred --id-key qid"),
        c("qa-compare-default", f"qa-compare {ANSWERS} inputs/answers_b.jsonl"),
        c("qa-compare-ttest-output", f"qa-compare {ANSWERS} inputs/answers_b.jsonl --test ttest --metrics all "
          "--output c.json"),
        c("qa-compare-ultrarag", f"qa-compare {ANSWERS} inputs/answers_b.jsonl --profile ultrarag "
          "--correction none --seed 1 --n-resamples 500"),
        c("err-qa-eval-missing", "qa-eval missing.jsonl"),
        c("err-qa-eval-bad-json", "qa-eval inputs/answers_bad.jsonl"),
        c("err-qa-eval-metric", f"qa-eval {ANSWERS} --metrics nosuch"),
    ]


def rag_cases() -> list[Case]:
    return [
        c("rag-eval-default", f"rag-eval {RAG_A}"),
        c("rag-eval-ids", f"rag-eval {RAG_A} --metrics ids"),
        c("rag-eval-per-question-output", f"rag-eval {RAG_A} --per-question --output rag.json"),
        c("rag-eval-qrels", f"rag-eval {RAG_A} --metrics ids --qrels inputs/rag_qrels.txt"),
        c("rag-compare-default", f"rag-compare {RAG_A} {RAG_B}"),
        c("rag-compare-ids-output", f"rag-compare {RAG_A} {RAG_B} --metrics ids --test wilcoxon --output rc.json"),
        c("err-rag-eval-judge-no-url", f"rag-eval {RAG_A} --judge --metrics judge"),
        c("err-rag-eval-metric", f"rag-eval {RAG_A} --metrics nosuch"),
        c("err-rag-eval-missing-field", "rag-eval inputs/rag_missing_field.jsonl --metrics ids"),
        c("err-rag-compare-alpha", f"rag-compare {RAG_A} {RAG_B} --alpha 2"),
    ]


def eval_cases() -> list[Case]:
    t = f"eval --dataset tiny --model {MINILM}"
    return [
        c("eval-scifact-bm25", "eval --dataset scifact --model bm25"),
        c("eval-scifact-bm25-options", "eval --dataset scifact --model bm25 bm25-lucene --top-k 100 "
          "--metrics ndcg recall --ks 10 100 --complete --no-progress"),
        c("eval-scifact-bm25-notes", "eval --dataset scifact --model bm25 --batch-size 64 --device cpu "
          "--score-precision float32 --drop-identical-ids --no-progress"),
        c("eval-scifact-reused", "eval --dataset scifact --model bm25 --no-progress", "results"),
        c("eval-tiny-minilm-torch", f"{t} --runtime torch"),
        c("eval-tiny-minilm-onnx", f"{t} --runtime onnx --no-progress"),
        c("eval-tiny-minilm-hnsw", f"{t} --runtime torch --index HNSW32 --no-progress"),
        c("eval-tiny-fuse-rrf", f"eval --dataset tiny --model bm25 {MINILM} --fuse rrf --runtime torch "
          "--no-progress"),
        c("eval-tiny-fuse-interpolation", f"eval --dataset tiny --model bm25 {MINILM} --fuse interpolation "
          "--norm z-score --weights 0.5 0.5 --runtime torch --no-progress"),
        c("eval-tiny-system-record", "eval --dataset tiny --model bm25+minilm-rrf --runtime torch --no-progress"),
        c("err-eval-top-k", "eval --dataset scifact --model bm25 --top-k 0"),
        c("err-eval-batch-size", "eval --dataset scifact --model bm25 --batch-size 0"),
        c("err-eval-workers", "eval --dataset scifact --model bm25 --workers 0"),
        c("err-eval-index-spec", f"{t} --index HNSW1 --runtime torch"),
        c("err-eval-unknown-dataset", "eval --dataset nosuchset --model bm25"),
        c("err-eval-unknown-model", "eval --dataset tiny --model nosuchmodel"),
        c("err-eval-unknown-hub-model", "eval --dataset tiny --model nosuchowner/nosuchmodel"),
        c("err-eval-dataset-file", f"eval --dataset {ANSWERS} --model bm25"),
        c("err-eval-spaces-qrels", "eval --dataset inputs/tiny_spaces --model bm25"),
        c("err-eval-precision", f"{t} --precision fp16"),
        c("err-eval-unknown-metric", "eval --dataset tiny --model bm25 --metrics nosuch"),
        c("err-eval-results-dir-file", f"eval --dataset tiny --model bm25 --results-dir {ANSWERS}"),
    ]


def encode_cases() -> list[Case]:
    return [
        c("encode-whole-cached", f"encode --dataset tiny --model {MINILM} --runtime torch"),
        c("encode-shard", f"{ENCODE} --shard 1/2", "encode-shard0"),
        c("encode-merge", f"{ENCODE} --merge", "encode-shards"),
        c("err-encode-merge-missing", f"{ENCODE} --merge", "encode-shard0"),
        c("err-encode-shard-range", f"{ENCODE} --shard 3/2", "own-cache-empty"),
        c("err-encode-shard-text", f"{ENCODE} --shard x", "own-cache-empty"),
    ]


def cache_cases() -> list[Case]:
    return [
        c("cache-no-action", "cache"),
        c("cache-list", "cache list", "own-cache"),
        c("cache-list-json", "cache list --json", "own-cache"),
        c("cache-list-kind", "cache list --kind bm25", "own-cache"),
        c("cache-list-empty", "cache list", "own-cache-empty"),
        c("cache-clear-key", "cache clear {key:bm25}", "own-cache"),
        c("cache-clear-kind", "cache clear --all --kind embeddings", "own-cache"),
        c("cache-clear-all", "cache clear --all", "own-cache"),
        c("cache-clear-leftovers", "cache clear --leftovers", "own-cache"),
        c("err-cache-clear-empty-key", "cache clear ''", "own-cache"),
        c("err-cache-clear-short-key", "cache clear ab", "own-cache"),
        c("err-cache-clear-not-hex", "cache clear zzzzzz", "own-cache"),
        c("err-cache-clear-nothing", "cache clear", "own-cache"),
    ]


def table_cases() -> list[Case]:
    return [
        c("table-default", "table", "results"),
        c("table-csv", "table results --metrics ndcg@10 recall@100 map --format csv", "results"),
        c("table-latex", "table results --format latex --digits 3", "results"),
        c("table-json", "table results --format json", "results"),
        c("table-baseline", "table results --baseline bm25 --n-resamples 1000", "results"),
        c("table-ci", "table results --ci --n-resamples 1000 --seed 3 --metrics ndcg@10", "results"),
        c("table-filter-output", "table results --datasets scifact --models bm25-lucene bm25 --output t.md",
          "results"),
        c("table-png", "table results --format png --output charts", "results"),
        c("table-empty", "table inputs"),
        c("err-table-digits", "table results --digits 0", "results"),
        c("err-table-missing-dir", "table nosuchdir"),
        c("report-default", "report results --output r.html", "results"),
        c("report-baseline", f"report results --baseline bm25 --title 'A title' --datasets {TINY} "
          "--n-resamples 1000 --output out/r.html", "results"),
        c("err-report-missing-dir", "report nosuchdir --output r.html"),
    ]


def diff_cases() -> list[Case]:
    return [
        c("diff-two-results", "diff results/scifact/bm25 results/scifact/bm25-lucene", "results"),
        c("diff-ref-source-model", "diff results/scifact/bm25 ref:pyserini-2cr:bm25-flat", "results"),
        c("diff-ref", "diff results/scifact/bm25-lucene ref", "results"),
        c("diff-options-output", f"diff results/{TINY}/bm25 results/{TINY}/sentence-transformers__all-MiniLM-L6-v2"
          " --metric recall@100 --top-queries 2 --top-docs 3 --output d.json", "results"),
        c("err-diff-missing", "diff nosuch/a nosuch/b"),
        c("err-diff-ref-unknown", "diff results/scifact/bm25 ref:nosuchsource", "results"),
    ]


def reproduce_cases() -> list[Case]:
    return [
        c("reproduce-suite-file", "reproduce inputs/suite_quick.yaml --no-progress", "scifact"),
        c("reproduce-suite-file-ok", "reproduce inputs/suite_ok.yaml --no-progress", "results"),
        c("err-reproduce-unknown", "reproduce nosuchsuite"),
    ]


def run_cases() -> list[Case]:
    cases = []
    for stem in EXPERIMENTS:
        path = f"configs/experiments/{stem}.yaml"
        cases += [
            c(f"run-{stem}", f"run {path}", "inputs"),
            c(f"run-{stem}-again", f"run {path}", f"ran-{stem}"),
        ]
    cases += [c(f"run-{stem}-dry-run", f"run configs/experiments/{stem}.yaml --dry-run")
              for stem in ("answers", "ultrarag-eval-trec")]
    sd = "configs/experiments/scifact-dense-vs-bm25.yaml"
    cases += [
        c("run-scifact-dense-vs-bm25-dry-run", f"run {sd} --dry-run"),
        c("run-scifact-lucene", f"run {sd} {SCIFACT_LUCENE}"),
        c("run-scifact-lucene-again", f"run {sd} {SCIFACT_LUCENE}", "ran-scifact-lucene"),
        c("run-scifact-lucene-set-step", f"run {sd} {SCIFACT_LUCENE} --set compare.test=ttest",
          "ran-scifact-lucene"),
        c("run-answers-set", "run configs/experiments/answers.yaml --set predictions=inputs/answers_b.jsonl "
          "--set output=exp/answers-b"),
        c("run-ultrarag-set-save-path", "run configs/experiments/ultrarag-eval-trec.yaml "
          "--set evaluation.save_path=out.json"),
        c("run-trec-steps", "run inputs/experiment_trec.yaml"),
        c("run-trec-steps-again", "run inputs/experiment_trec.yaml", "ran-trec-steps"),
        c("err-run-missing", "run nosuch.yaml"),
        c("err-run-bad-key", "run inputs/experiment_bad.yaml"),
        c("err-run-bad-set", "run configs/experiments/answers.yaml --set nosuchparam"),
    ]
    return cases


def all_cases() -> list[Case]:
    groups = [help_cases, data_cases, evaluate_cases, compare_cases, fuse_cases, qa_cases, rag_cases,
              eval_cases, encode_cases, cache_cases, table_cases, diff_cases, reproduce_cases, run_cases]
    cases = [case for group in groups for case in group()]
    names = [case.name for case in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    return cases


# --------------------------------------------------------------------------------------------
# The inputs fixture: the checkout's example files plus small hand-made ones
# --------------------------------------------------------------------------------------------


def write_inputs(repo: Path, work: Path) -> None:
    shutil.copytree(repo / "configs", work / "configs")
    shutil.copytree(repo / "tests" / "data", work / "tests" / "data")
    write_tiny(work / "tiny")
    inputs = work / "inputs"
    inputs.mkdir()
    write_trec_inputs(work, inputs)
    write_answer_inputs(work, inputs)
    write_spaces_dataset(work / "tiny", inputs / "tiny_spaces")
    for name, text in SMALL_FILES.items():
        (inputs / name).write_text(text)


def write_tiny(out: Path) -> None:
    """A BEIR folder: the first 8 judged test queries of scifact, their documents and 20 more (30)."""
    src = MIRROR / "scifact"
    rows = [line.rstrip("\n").split("\t") for line in (src / "qrels" / "test.tsv").open()][1:]
    qids: list[str] = []
    judged = []
    for qid, doc, score in rows:
        if qid not in qids:
            if len(qids) == 8:
                break
            qids.append(qid)
        judged.append((qid, doc, score))
    docs = {doc for _, doc, _ in judged}
    (out / "qrels").mkdir(parents=True)
    extra = 30 - len(docs)
    with (out / "corpus.jsonl").open("w") as f:
        for line in (src / "corpus.jsonl").open():
            doc_id = json.loads(line)["_id"]
            if doc_id in docs or extra > 0:
                extra -= doc_id not in docs
                f.write(line)
    with (out / "queries.jsonl").open("w") as f:
        f.writelines(line for line in (src / "queries.jsonl").open() if json.loads(line)["_id"] in qids)
    lines = ["query-id\tcorpus-id\tscore"] + ["\t".join(row) for row in judged]
    (out / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")


def write_spaces_dataset(tiny: Path, out: Path) -> None:
    """tiny/ with its qrels columns separated by spaces (a loading error)."""
    shutil.copytree(tiny, out)
    qrels = out / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text().replace("\t", " "))


def write_trec_inputs(work: Path, inputs: Path) -> None:
    qrels = (work / QRELS).read_text().splitlines()
    run_a = (work / RUN_A).read_text()
    first = qrels[0].split()
    dup = [*qrels, f"{first[0]} 0 {first[2]} {int(first[3]) + 1}"]
    (inputs / "qrels_dup.txt").write_text("\n".join(dup) + "\n")
    (inputs / "qrels_badcols.txt").write_text("\n".join([*qrels[:3], "q1 0 D099", *qrels[3:]]) + "\n")
    (inputs / "qrels_badrel.txt").write_text("\n".join([*qrels[:2], "q1 0 D099 x", *qrels[2:]]) + "\n")
    # The ranking lines only: a run the harness wrote starts with an ir_metadata header of # lines.
    run_lines = [line for line in run_a.splitlines() if not line.startswith("#")]
    short = " ".join(run_lines[2].split()[:5])
    (inputs / "run_short.txt").write_text("\n".join([*run_lines[:2], short, *run_lines[3:]]) + "\n")
    queries_a = {line.split()[0] for line in run_lines if line.strip()}
    run_b = [line for line in (work / RUN_B).read_text().splitlines() if not line.startswith("#")]
    same = [line for line in run_b if line.strip() and line.split()[0] in queries_a]
    (inputs / "run_b_same_queries.txt").write_text("\n".join(same) + "\n")
    with gzip.GzipFile(inputs / "run_a.trec.gz", "wb", mtime=0) as f:
        f.write(run_a.encode())


def first_gold(gold):
    while isinstance(gold, list):
        gold = gold[0]
    return str(gold)


def write_answer_inputs(work: Path, inputs: Path) -> None:
    rows = [json.loads(line) for line in (work / ANSWERS).read_text().splitlines() if line.strip()]
    b_rows, renamed = [], []
    for i, row in enumerate(rows):
        b = dict(row)
        b["pred_answer"] = first_gold(row["golden_answers"]) if i % 2 == 0 else "I do not know"
        b_rows.append(b)
        renamed.append({"qid": row["id"], "gold": row["golden_answers"], "pred": row["pred_answer"]})
    (inputs / "answers_b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in b_rows))
    (inputs / "answers_renamed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in renamed))
    (inputs / "answers_bad.jsonl").write_text(json.dumps(rows[0]) + "\n{not json\n")
    rag = [json.loads(line) for line in (work / RAG_A).read_text().splitlines() if line.strip()]
    missing = [dict(rag[0]), {k: v for k, v in rag[1].items() if k != "context_ids"}]
    (inputs / "rag_missing_field.jsonl").write_text("".join(json.dumps(r) + "\n" for r in missing))
    qrels = [f"{r['id']} 0 {doc} 1" for r in rag for doc in r.get("reference_context_ids", [])[:1]]
    (inputs / "rag_qrels.txt").write_text("\n".join(qrels) + "\n")


SMALL_FILES = {
    "experiment_trec.yaml": """\
name: trec-steps
params:
  qrels: configs/examples/trec/qrels.txt
  run_a: configs/examples/trec/run_a.txt
  run_b: configs/examples/trec/run_b.txt
steps:
  - kind: evaluate
    qrels: ${qrels}
    run: ${run_a}
    metrics: [ndcg@10, map]
    per_query: true
  - kind: compare
    qrels: ${qrels}
    baseline: ${run_a}
    others: ["${run_b}"]
    test: ttest
  - kind: qa-eval
    predictions: configs/examples/answers.jsonl
    profile: flashrag
""",
    "experiment_bad.yaml": """\
name: bad
steps:
  - kind: evaluate
    qrels: configs/examples/trec/qrels.txt
    run: configs/examples/trec/run_a.txt
    metrcs: [ndcg@10]
""",
    "suite_quick.yaml": """\
name: quick-bm25
description: bm25-flat on scifact against pyserini's 2CR numbers, and a model that does not exist.
tolerance: 0.0005
options: {complete: true, drop_identical_ids: true}
conditions:
  - {model: bm25-flat, dataset: scifact, reference: pyserini-2cr}
  - {model: bm25-multifield, dataset: scifact, reference: pyserini-2cr}
""",
    "suite_ok.yaml": """\
name: quick-ok
description: bm25-flat on scifact with a tolerance it meets.
tolerance: 0.002
options: {complete: true, drop_identical_ids: true}
conditions:
  - {model: bm25-flat, dataset: scifact, reference: pyserini-2cr, metrics: [ndcg@10, recall@100]}
""",
}

# --------------------------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------------------------

DATETIME_RE = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?")
PROGRESS_RE = re.compile(r"\s*\d{1,3}%\|[^|\r\n]*\|\s*[\d.]+[kMGT]?/[\d.?]+[kMGT]?\s*\[[^\]\r\n]*\]")
DURATION_RE = re.compile(r"(\bin|\btook|\bafter|\() ?\d+(\.\d+)?(e-?\d+)? ?(s|ms|sec|seconds)\b")
STAGING_RE = re.compile(r"@[A-Za-z0-9_.-]+@\d+@")
TIMING_KEY_RE = re.compile(
    r"(timings?|.*seconds|.*_secs?|elapsed.*|.*_at|duration.*|time|time_s|wall_time|started|finished)$",
    re.IGNORECASE,
)
# JSON shown inside text (stdout of --json, an HTML report's provenance): quotes may be &quot;
Q = r'(?:"|&quot;)'
TIMINGS_BLOCK_RE = re.compile(Q + r"timings" + Q + r":\s*\{[^{}]*\}")
TIMINGS_HTML_RE = re.compile(r"(<dt>timings[^<]*</dt><dd>)[^<]*")
JSON_SCALAR_RE = re.compile(r"(" + Q + r"([\w ()@.-]+)" + Q + r":\s*)(-?[\d.]+(?:[eE][+-]?\d+)?)")
VOLATILE_KEYS = {"stamp": "<STAMP>", "pid": "<PID>", "hostname": "<HOST>", "host": "<HOST>"}


class Normaliser:
    """Replaces what legitimately changes between two runs of the same command."""

    def __init__(self, paths: dict[str, str]):
        pairs = []
        for path, token in paths.items():
            for variant in {path, os.path.realpath(path)}:
                pairs.append((variant.rstrip("/"), token))
        self.paths = sorted(pairs, key=lambda p: -len(p[0]))

    def text(self, s: str) -> str:
        for path, token in self.paths:
            s = s.replace(path, token)
        s = self.progress(s)
        s = DATETIME_RE.sub("<DATETIME>", s)
        s = DURATION_RE.sub(lambda m: f"{m.group(1)}{' ' if m.group(1) != '(' else ''}<T> s", s)
        s = STAGING_RE.sub("@<HOST>@<PID>@", s)
        return time_column(json_in_text(s))

    @staticmethod
    def progress(s: str) -> str:
        """Progress bars are dropped and their labels listed once at the end: how often a bar is
        redrawn, where it lands among the log lines and how many spaces erase it depend on speed.
        (Captured text has universal newlines, so each redraw is a line of its own.)"""
        if "%|" not in s:
            return s
        labels, lines = [], []
        for line in s.split("\n"):
            m = PROGRESS_RE.search(line)
            if m:
                labels.append(line[: m.start()].strip().rstrip(":"))
                line = line[m.end():]
            elif not line.isspace():
                lines.append(line)
                continue
            if line.strip():  # a log line written right after a bar, before its newline
                lines.append(line.strip())
        return "\n".join(lines) + f"\n<progress bars: {'; '.join(sorted(set(labels)))}>"

    def json(self, obj, key: str = ""):
        if key in VOLATILE_KEYS:
            return VOLATILE_KEYS[key]
        if key and TIMING_KEY_RE.fullmatch(key):
            return "<T>"
        if key == "environment" and isinstance(obj, dict):
            return {k: self.environment(v) for k, v in obj.items()}
        if isinstance(obj, dict):
            return {self.text(k): self.json(v, k) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.json(v) for v in obj]
        if isinstance(obj, str):
            return self.text(obj)
        return obj

    def environment(self, value):
        """Keys of an environment block are kept, its values (versions, hardware, host) are not."""
        if isinstance(value, dict):
            return {k: self.environment(v) for k, v in value.items()}
        return "<ENV>"


def json_in_text(s: str) -> str:
    """Timings inside JSON printed as text: the `timings` object and numbers under timing keys."""
    if "timings" in s:
        s = TIMINGS_BLOCK_RE.sub('"timings": "<T>"', s)
        s = TIMINGS_HTML_RE.sub(r"\1<T>", s)

    def scalar(m: re.Match) -> str:
        return m.group(1) + "<T>" if TIMING_KEY_RE.fullmatch(m.group(2)) else m.group(0)

    return JSON_SCALAR_RE.sub(scalar, s)


def time_column(s: str) -> str:
    """In tables with a `time (s)` column (always the last), the seconds and that column's width."""
    if "time (s)" not in s:
        return s
    out, col = [], None
    for line in s.split("\n"):
        if "time (s)" in line:
            col = line.index("time (s)")
        elif col is not None and len(line) > col and line[:col].strip():
            tail = line[col:]
            if set(tail.strip()) == {"-"}:
                tail = "-" * 8
            else:
                tail = re.sub(r"^\s*\d+(\.\d+)?", "<T>", tail)
            line = line[:col] + tail
        else:
            col = None
        out.append(line)
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# Running cases
# --------------------------------------------------------------------------------------------


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    files = {}
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            st = path.stat()
            files[str(path.relative_to(folder))] = (st.st_size, st.st_mtime_ns)
    return files


class FixtureError(Exception):
    pass


class Capture:
    """Runs cases of one checkout in <root>/work, building fixtures on demand."""

    def __init__(self, python: str, repo: Path, root: Path):
        self.python, self.repo, self.root = python, repo, root
        self.work = root / "work"
        self.cache = root / "cache"
        self.built: set[str] = set()
        self.failed: dict[str, str] = {}
        venv = str(Path(python).absolute().parent.parent)
        self.norm = Normaliser(
            {str(self.work): "<TMP>", str(self.cache): "<CACHE>", str(root): "<ROOT>",
             str(repo): "<REPO>", venv: "<VENV>"}
        )
        # configs/experiments/scifact-dense-vs-bm25.yaml names the mirror ../shared/data/beir
        (root / "shared" / "data").mkdir(parents=True)
        (root / "shared" / "data" / "beir").symlink_to(MIRROR)

    def env(self, own_cache: bool) -> dict[str, str]:
        keep = {k: os.environ[k] for k in ("PATH", "HOME", "TMPDIR") if k in os.environ}
        return {
            **keep, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "COLUMNS": "80", "LINES": "50", "TERM": "dumb",
            "PYTHONPATH": str(self.repo), "PYTHONUNBUFFERED": "1",
            "HARNESS_CACHE_DIR": str(self.work / "cache" if own_cache else self.cache),
            "HARNESS_DATA_DIR": str(self.work / "data"),
            "HARNESS_RESULTS_DIR": str(self.work / "results"),
            "HARNESS_BEIR_MIRROR": str(MIRROR),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        }

    def harness(self, args: list[str], own_cache: bool) -> subprocess.CompletedProcess:
        cmd = [self.python, "-m", "harness", *args]
        try:
            return subprocess.run(cmd, cwd=self.work, env=self.env(own_cache), capture_output=True,
                                  text=True, errors="replace", timeout=CASE_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
            err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
            return subprocess.CompletedProcess(cmd, "timeout", out, err)

    def check_import(self) -> str:
        self.work.mkdir(parents=True, exist_ok=True)
        code = "import harness; print(harness.__file__)"
        proc = subprocess.run([self.python, "-c", code], cwd=self.work, env=self.env(False),
                              capture_output=True, text=True, check=True)
        location = proc.stdout.strip()
        print(f"harness imported from {location}", flush=True)
        if not Path(location).resolve().is_relative_to(self.repo.resolve()):
            sys.exit(f"error: harness is imported from {location}, not from {self.repo}")
        return location

    # fixtures ------------------------------------------------------------------------------

    def fixture_dir(self, name: str) -> Path:
        return self.root / "fixtures" / name

    def build(self, name: str) -> None:
        """Build fixture NAME (and its parents) once; a failure is raised again for every case using it."""
        if name in self.failed:
            raise FixtureError(self.failed[name])
        if name in self.built:
            return
        fx = FIXTURES[name]
        if fx.parent is None:
            self.reset()
            write_inputs(self.repo, self.work)
        else:
            self.build(fx.parent)
            self.restore(fx.parent)
            for command in fx.commands:
                proc = self.harness(shlex.split(command), fx.own_cache)
                if proc.returncode != 0:
                    self.failed[name] = (f"fixture {name}: `harness {command}` exited {proc.returncode}:\n"
                                         f"{self.norm.text(proc.stderr)[-3000:]}")
                    raise FixtureError(self.failed[name])
        shutil.copytree(self.work, self.fixture_dir(name), symlinks=True)
        self.built.add(name)

    def reset(self) -> None:
        if self.work.exists():
            shutil.rmtree(self.work)

    def restore(self, name: str) -> None:
        self.reset()
        shutil.copytree(self.fixture_dir(name), self.work, symlinks=True)

    # one case ------------------------------------------------------------------------------

    def run_case(self, case: Case) -> dict:
        fx = FIXTURES[case.fixture]
        try:
            self.build(case.fixture)
        except FixtureError as exc:
            return {"argv": ["harness", *case.args], "fixture": case.fixture, "exit_code": "fixture failed",
                    "stdout": "", "stderr": str(exc), "files": {}, "seconds": 0}
        self.restore(case.fixture)
        args = [self.fill(arg, fx.own_cache) for arg in case.args]
        before = snapshot(self.work)
        start = time.monotonic()
        proc = self.harness(args, fx.own_cache)
        seconds = time.monotonic() - start
        stdout, stderr = self.norm.text(proc.stdout), self.norm.text(proc.stderr)
        if case.args[:1] == ["cache"]:
            stdout, stderr = cache_sizes(stdout), cache_sizes(stderr)
        return {
            "argv": ["harness", *case.args],
            "fixture": case.fixture,
            "exit_code": proc.returncode,
            "stdout": stdout,
            "stderr": stderr,
            "files": self.written_files(before),
            "seconds": round(seconds, 1),  # not compared
        }

    def fill(self, arg: str, own_cache: bool) -> str:
        """`{key:KIND}` becomes the 8-character key prefix of the first cache entry of that kind."""
        m = re.fullmatch(r"\{key:(\w+)\}", arg)
        if not m:
            return arg
        cache = self.work / "cache" if own_cache else self.cache
        names = sorted(p.name for p in (cache / m.group(1)).iterdir())
        return names[0].rsplit("__", 1)[-1][:8]

    def written_files(self, before: dict[str, tuple[int, int]]) -> dict:
        after = snapshot(self.work)
        files = {}
        for rel in sorted(set(before) | set(after)):
            if rel not in after:
                files[rel] = {"deleted": True}
            elif before.get(rel) != after[rel]:
                files[rel] = self.file_record(self.work / rel)
        return files

    def file_record(self, path: Path) -> dict:
        data = path.read_bytes()
        if path.suffix == ".json":
            try:
                return {"json": step_key(path, self.norm.json(json.loads(data)))}
            except ValueError:
                pass
        try:
            text = data.decode()
        except UnicodeDecodeError:
            return {"sha256": sha256(data), "bytes": len(data)}
        if "\0" in text:
            return {"sha256": sha256(data), "bytes": len(data)}
        text = self.norm.text(text)
        if len(data) <= MAX_TEXT:
            return {"text": text}
        lines = text.split("\n")
        head = "\n".join(line[:HEAD_WIDTH] for line in lines[:HEAD_LINES])
        return {"sha256": sha256(text.encode()), "lines": len(lines), "head": head}


def step_key(path: Path, obj):
    """A table or report step's key hashes every result's provenance, timings included."""
    if path.name == "step.json" and isinstance(obj, dict) and obj.get("kind") in ("table", "report"):
        obj["key"] = "<KEY>"
    return obj


def cache_sizes(text: str) -> str:
    """Cache entry sizes: a manifest holds its encoding seconds, so its size moves by a few bytes."""
    text = re.sub(r"\b\d+(\.\d+)? ?(B|KB|MB|GB|KiB|MiB|GiB)\b", "<SIZE>", text)
    return re.sub(r'("bytes":\s*)\d+', r"\1<SIZE>", text)


def select(cases: list[Case], only: list[str] | None) -> list[Case]:
    if not only:
        return cases
    chosen = [case for case in cases if any(fnmatch.fnmatch(case.name, pat) for pat in only)]
    if not chosen:
        sys.exit(f"error: --only {' '.join(only)} matches no case (see `list`)")
    return chosen


def make_root(root: Path) -> Path:
    """Empty ROOT for this capture; refuses a folder it did not make or one a running capture uses."""
    marker = root / ".capture-root"
    if root.exists():
        if not marker.exists():
            sys.exit(f"error: {root} exists and was not made by this script; remove it or pass --root")
        pid = int(marker.read_text() or 0)
        if pid and Path(f"/proc/{pid}").exists():
            sys.exit(f"error: capture process {pid} is using {root}; wait for it (or pass another --root)")
        shutil.rmtree(root)
    root.mkdir(parents=True)
    marker.write_text(str(os.getpid()))
    return root


def capture(args: argparse.Namespace) -> int:
    repo = Path(args.repo).resolve()
    cases = select(all_cases(), args.only)
    root = make_root(Path(args.root))
    start = time.monotonic()
    try:
        cap = Capture(args.python, repo, root)
        location = cap.check_import()
        print("warming the shared cache ...", flush=True)
        try:
            cap.build("results")
        except FixtureError as exc:
            print(f"warning: {exc}", flush=True)
        results = {}
        for i, case in enumerate(cases, 1):
            results[case.name] = cap.run_case(case)
            rec = results[case.name]
            print(f"[{i}/{len(cases)}] {case.name}: exit {rec['exit_code']} ({rec['seconds']} s)", flush=True)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    total = time.monotonic() - start
    meta = {"repo": str(repo), "python": args.python, "harness_file": location, "cases": len(cases),
            "seconds": round(total, 1), "shared_cache": True, "only": args.only}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "cases": results}, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(cases)} cases captured in {total:.0f} s -> {out}")
    return 0


# --------------------------------------------------------------------------------------------
# Comparing two captures
# --------------------------------------------------------------------------------------------


def as_text(value) -> str:
    """Stdout/stderr as they are; a file record as its text, its JSON pretty-printed, or its hash."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"text"}:
        return value["text"]
    if isinstance(value, dict) and set(value) == {"json"}:
        value = value["json"]
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False)


def short_diff(a, b, label: str) -> list[str]:
    lines = list(difflib.unified_diff(as_text(a).splitlines(), as_text(b).splitlines(),
                                      f"A {label}", f"B {label}", n=2, lineterm=""))
    if len(lines) > MAX_DIFF_LINES:
        lines = lines[:MAX_DIFF_LINES] + [f"... ({len(lines) - MAX_DIFF_LINES} more diff lines)"]
    return lines


def case_differences(a: dict | None, b: dict | None) -> list[str]:
    if a is None or b is None:
        return ["  only in " + ("B" if a is None else "A")]
    out = []
    if a["exit_code"] != b["exit_code"]:
        out.append(f"  exit code: A {a['exit_code']}, B {b['exit_code']}")
    for stream in ("stdout", "stderr"):
        if a[stream] != b[stream]:
            out += short_diff(a[stream], b[stream], stream)
    files_a, files_b = a["files"], b["files"]
    for rel in sorted(set(files_a) | set(files_b)):
        if files_a.get(rel) != files_b.get(rel):
            if rel not in files_a or rel not in files_b:
                out.append(f"  file {rel}: written only by " + ("B" if rel not in files_a else "A"))
            else:
                out += short_diff(files_a[rel], files_b[rel], rel)
    return out


def compare(args: argparse.Namespace) -> int:
    cap_a = json.loads(Path(args.a).read_text())["cases"]
    cap_b = json.loads(Path(args.b).read_text())["cases"]
    names = list(cap_a) + [name for name in cap_b if name not in cap_a]
    differ = 0
    for name in names:
        lines = case_differences(cap_a.get(name), cap_b.get(name))
        if lines:
            differ += 1
            argv = (cap_a.get(name) or cap_b.get(name))["argv"]
            print(f"== {name}: {shlex.join(argv)}")
            print("\n".join(lines))
    print(f"{len(names)} cases, {differ} differ")
    return 1 if differ else 0


def list_cases(_args: argparse.Namespace) -> int:
    for case in all_cases():
        print(f"{case.name:40} [{case.fixture}] harness {shlex.join(case.args)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    cap = sub.add_parser("capture", help="run every case against one checkout")
    cap.add_argument("--python", required=True, help="interpreter with the harness's dependencies")
    cap.add_argument("--repo", required=True, help="checkout whose `harness` package is captured")
    cap.add_argument("--out", required=True, help="JSON file to write")
    cap.add_argument("--only", nargs="+", metavar="NAME", help="case names (shell patterns allowed)")
    cap.add_argument("--root", default=str(ROOT), help=f"temporary folder of the capture (default {ROOT}; "
                     "compare only captures made in the same root)")
    cap.add_argument("--keep", action="store_true", help="keep the temporary root (work, fixtures, cache)")
    cap.set_defaults(func=capture)
    cmp = sub.add_parser("compare", help="show the cases whose output differs")
    cmp.add_argument("a")
    cmp.add_argument("b")
    cmp.set_defaults(func=compare)
    sub.add_parser("list", help="list the cases").set_defaults(func=list_cases)
    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

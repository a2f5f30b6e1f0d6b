"""``harness reproduce``: suites of conditions checked against published numbers, OK / MISS / SKIPPED."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT
from report_fixtures import every_other, make_result, real_fingerprint, real_qrels, synthetic_run

from harness.cli import main
from harness.core.errors import HarnessError
from harness.pipeline import EvalOptions
from harness.reproduction.references import load_references
from harness.reproduction.suites import MISS, OK, SKIPPED, load_suite, run_suite, write_markdown
from harness.results.result_store import load_result, result_dir

BASE_NDCG = 0.5  # half of the scifact queries are pushed below rank 10 in base-model's run


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory: pytest.TempPathFactory, beir_mirror: Path) -> Path:
    root = tmp_path_factory.mktemp("results")
    qrels = real_qrels(beir_mirror, "scifact")
    assert len(every_other(qrels, 1)) / len(qrels) == BASE_NDCG
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    make_result(
        root, "scifact", "base-model", synthetic_run(qrels, every_other(qrels, 0), 10), qrels, fingerprint
    )
    make_result(root, "scifact", "finetuned-model", synthetic_run(qrels), qrels, fingerprint)
    return root


def options(results_dir: Path) -> EvalOptions:
    return EvalOptions(results_dir=results_dir, metrics=["map@10"])


class StoredRuns:
    """Stands in for the pipeline: returns the result folders made above, and cannot get any other model."""

    def __init__(self, root: Path):
        self.root = root
        self.calls: list[tuple[str, str, EvalOptions]] = []

    def __call__(self, dataset: str, model: str, options: EvalOptions):
        self.calls.append((dataset, model, options))
        folder = result_dir(self.root, dataset, model)
        if not (folder / "metrics.json").exists():
            raise HarnessError(f"cannot fetch model {model} (HF_HUB_OFFLINE is set)")
        return load_result(folder)


def write_suite(path: Path, conditions: list[dict], **fields) -> Path:
    path.write_text(yaml.safe_dump({"name": path.stem, "conditions": conditions, **fields}, sort_keys=False))
    return path


MIXED = [
    {
        "model": "finetuned-model",
        "dataset": "scifact",
        "expected": {"ndcg@10": 1.0, "recall@100": 1.0},
        "source": "analytic: judged documents ranked first",
    },
    {
        "model": "base-model",
        "dataset": "scifact",
        "expected": {"ndcg@10": 0.55, "recall@100": 1.0},
        "source": "deliberately off by 0.05",
        "options": {"complete": True},
    },
    {"model": "facebook/contriever", "dataset": "scifact", "reference": "pyserini-2cr"},
]


def test_suite_reports_ok_miss_and_skipped(results_dir, tmp_path):
    suite = load_suite(str(write_suite(tmp_path / "mixed.yaml", MIXED)))
    runs = StoredRuns(results_dir)
    report = run_suite(suite, options(results_dir), run_eval=runs)
    statuses = [(c.condition.model, c.metric, c.status) for c in report.checks]
    assert statuses == [
        ("finetuned-model", "ndcg@10", OK),
        ("finetuned-model", "recall@100", OK),
        ("base-model", "ndcg@10", MISS),
        ("base-model", "recall@100", OK),
        ("facebook/contriever", "ndcg@10", SKIPPED),
        ("facebook/contriever", "recall@100", SKIPPED),
    ]
    miss = report.checks[2]
    assert miss.ours == pytest.approx(BASE_NDCG) and miss.diff == pytest.approx(BASE_NDCG - 0.55)
    skipped = report.checks[4]
    assert skipped.ours is None and "HF_HUB_OFFLINE" in skipped.reason
    # The published number for contriever comes from references.yaml, and its source is named.
    contriever = suite.conditions[2]
    assert contriever.expected["ndcg@10"] == pytest.approx(0.6493) and contriever.source.startswith(
        "pyserini-2cr: castorini/pyserini"
    )
    assert report.exit_code == 1
    # Per-condition options reach the pipeline, and the checked metrics are always computed.
    passed = {model: opts for _, model, opts in runs.calls}
    assert passed["base-model"].complete is True and passed["finetuned-model"].complete is False
    assert passed["base-model"].metrics == ["map@10", "ndcg@10", "recall@100"]


def test_markdown_lists_ours_published_diff_and_status(results_dir, tmp_path):
    suite = load_suite(str(write_suite(tmp_path / "mixed.yaml", MIXED)))
    report = run_suite(suite, options(results_dir), run_eval=StoredRuns(results_dir))
    path = write_markdown(report, tmp_path / "out")
    assert path == tmp_path / "out" / "reproduce-mixed.md"
    text = path.read_text()
    assert (
        "| scifact | base-model | nDCG@10 | 0.50000 | 0.55000 | -0.05000 | ±0.0005 | MISS | deliberately off by 0.05 |"
        in text
    )
    assert "| scifact | finetuned-model | nDCG@10 | 1.00000 | 1.00000 | +0.00000 | ±0.0005 | OK |" in text
    assert (
        "| scifact | facebook/contriever | nDCG@10 |  | 0.64930 |  | ±0.0005 | SKIPPED (cannot fetch model"
        in text
    )
    assert "**suite mixed: FAILED (3 OK, 1 MISS, 2 SKIPPED)" in text


@pytest.mark.parametrize(("expected", "status"), [(0.5004, OK), (0.4996, OK), (0.5006, MISS), (0.4994, MISS)])
def test_tolerance_is_absolute_and_inclusive(results_dir, tmp_path, expected, status):
    conditions = [
        {"model": "base-model", "dataset": "scifact", "expected": {"ndcg@10": expected}, "source": "x"}
    ]
    suite = load_suite(str(write_suite(tmp_path / "edge.yaml", conditions, tolerance=0.0005)))
    report = run_suite(suite, options(results_dir), run_eval=StoredRuns(results_dir))
    assert [check.status for check in report.checks] == [status]


def test_skipped_is_never_ok_and_fails_the_suite_only_when_asked(results_dir, tmp_path):
    conditions = [MIXED[0], MIXED[2]]
    relaxed = load_suite(str(write_suite(tmp_path / "relaxed.yaml", conditions)))
    report = run_suite(relaxed, options(results_dir), run_eval=StoredRuns(results_dir))
    assert (report.count(OK), report.count(MISS), report.count(SKIPPED)) == (2, 0, 2)
    assert report.exit_code == 0
    strict = load_suite(str(write_suite(tmp_path / "strict.yaml", conditions, fail_on_skip=True)))
    assert run_suite(strict, options(results_dir), run_eval=StoredRuns(results_dir)).exit_code == 1


def test_cli_prints_table_writes_markdown_and_exits_1_on_miss(results_dir, tmp_path, monkeypatch, capsys):
    import harness.pipeline

    monkeypatch.setattr(harness.pipeline, "run_eval", StoredRuns(results_dir))
    suite = write_suite(tmp_path / "cli-suite.yaml", MIXED)
    code = main(["reproduce", str(suite), "--results-dir", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 1
    assert (
        "MISS" in out
        and "skipped: facebook/contriever on scifact: cannot fetch model facebook/contriever" in out
    )
    assert "suite cli-suite: FAILED (3 OK, 1 MISS, 2 SKIPPED)" in out
    assert f"wrote {tmp_path / 'out' / 'reproduce-cli-suite.md'}" in out


def test_unreachable_model_is_skipped_by_the_real_pipeline(tmp_path, beir_mirror, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    suite = write_suite(
        tmp_path / "offline.yaml",
        [{"model": "facebook/contriever", "dataset": "scifact", "reference": "pyserini-2cr"}],
    )
    code = main(
        [
            "reproduce",
            str(suite),
            "--results-dir",
            str(tmp_path / "results"),
            "--data-dir",
            str(tmp_path / "data"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--mirror",
            str(beir_mirror),
            "--no-progress",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1  # nothing was reproduced: not a pass
    assert sum(line.startswith("scifact") and " SKIPPED " in line for line in out.splitlines()) == 2
    assert "skipped: facebook/contriever on scifact: cannot fetch model facebook/contriever" in out
    assert "suite offline: NOTHING REPRODUCED (0 OK, 0 MISS, 2 SKIPPED)" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("conditions: [", "not valid YAML"),
        ("conditions: []", "a suite needs a non-empty 'conditions' list"),
        ("conditions:\n  - {model: m, dataset: scifact, expected: {ndcg@10: 0.5}}", "need a 'source'"),
        (
            "conditions:\n  - {model: m, dataset: scifact, expected: {ndcg@10: 0.5}, source: s, options: {topk: 5}}",
            "unknown option(s) topk",
        ),
        (
            "conditions:\n  - {model: nobody/nothing, dataset: scifact}",
            "references.yaml has no entry for nobody/nothing",
        ),
        (
            "tolerance: -1\nconditions:\n  - {model: m, dataset: scifact, expected: {ndcg@10: 0.5}, source: s}",
            "tolerance must be a non-negative number",
        ),
    ],
)
def test_bad_suites_fail_with_one_line_naming_the_file(tmp_path, capsys, content, message):
    suite = tmp_path / "bad.yaml"
    suite.write_text(content)
    code = main(["reproduce", str(suite), "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"error: {suite}") and message in err and err.count("\n") == 1


def test_unknown_suite_name_lists_the_known_ones(capsys):
    assert main(["reproduce", "no-such-suite"]) == 2
    err = capsys.readouterr().err
    assert "unknown suite 'no-such-suite'" in err and "offline-smoke" in err


def test_references_name_a_source_for_every_number():
    references = load_references()
    assert references
    for ref in references:
        where = ref.describe()
        assert ref.source.location and ref.source.conditions.get("split") == "test", where
        assert ref.verified or ref.note, f"unverified number without a note: {where}"
        assert all(0.0 <= value <= 1.0 for value in ref.metrics.values()), where
    cells = {(ref.model, ref.dataset) for ref in references}
    seven = ["scifact", "nfcorpus", "arguana", "scidocs", "fiqa", "trec-covid", "quora"]
    for model in ("bm25-flat", "bm25-multifield", "facebook/contriever", "facebook/contriever-msmarco"):
        assert all((model, dataset) in cells for dataset in seven), model
    for model in ("sentence-transformers/all-MiniLM-L6-v2", "BAAI/bge-small-en-v1.5", "intfloat/e5-small-v2"):
        assert any(cell[0] == model for cell in cells), model
    # Exactly one preferred entry per cell, so a comparison always knows what it compares against.
    for cell in cells:
        assert sum(ref.preferred for ref in references if (ref.model, ref.dataset) == cell) == 1, cell


def test_shipped_suites_load():
    for path in sorted((REPO_ROOT / "harness" / "records" / "suites").glob("*.yaml")):
        suite = load_suite(str(path))
        assert suite.conditions and all(c.expected and c.source for c in suite.conditions), path
    smoke = load_suite("offline-smoke")
    assert smoke.fail_on_skip and [(c.model, c.dataset) for c in smoke.conditions] == [
        ("sentence-transformers/all-MiniLM-L6-v2", "scifact")
    ]
    assert smoke.conditions[0].expected == {"ndcg@10": 0.64508, "recall@100": 0.925}


@pytest.mark.slow
def test_offline_smoke_passes_end_to_end(e2e_env, e2e_workdir):
    """What `make reproduce SUITE=offline-smoke` runs in CI: real model, real scifact, published numbers."""
    command = [
        "make",
        "--no-print-directory",
        "-C",
        str(REPO_ROOT),
        "reproduce",
        "SUITE=offline-smoke",
        f"RESULTS={e2e_env['HARNESS_RESULTS_DIR']}",
        "ARGS=--no-progress",
    ]
    completed = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=e2e_env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "suite offline-smoke: passed (2 OK, 0 MISS, 0 SKIPPED)" in completed.stdout
    report = Path(e2e_env["HARNESS_RESULTS_DIR"]) / "reproduce-offline-smoke.md"
    assert "| scifact | sentence-transformers/all-MiniLM-L6-v2 | nDCG@10 |" in report.read_text()


def test_user_folder_adds_and_overrides_references_and_suites(tmp_path, monkeypatch):
    user = tmp_path / "user"
    (user / "suites").mkdir(parents=True)
    (user / "references.yaml").write_text(
        yaml.safe_dump(
            {
                "sources": {
                    "my-paper": {
                        "title": "My paper",
                        "paper": "Me et al. 2025",
                        "table": "table 2",
                        "conditions": {"split": "test"},
                    }
                },
                "entries": [
                    # Replaces the shipped cell (same model, dataset and source) ...
                    {
                        "model": "bm25-flat",
                        "dataset": "scifact",
                        "source": "pyserini-2cr",
                        "preferred": True,
                        "metrics": {"ndcg@10": 0.5},
                    },
                    # ... and adds a new one from a source only the user file defines.
                    {
                        "model": "my-model",
                        "dataset": "scifact",
                        "source": "my-paper",
                        "preferred": True,
                        "metrics": {"ndcg@10": 0.7},
                    },
                ],
            }
        )
    )
    write_suite(
        user / "suites" / "offline-smoke.yaml",
        [{"model": "my-model", "dataset": "scifact"}, {"model": "bm25-flat", "dataset": "scifact"}],
    )
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(user))
    references = load_references()
    flat = [ref for ref in references if (ref.model, ref.dataset) == ("bm25-flat", "scifact")]
    assert [ref.metrics["ndcg@10"] for ref in flat] == [0.5]
    assert any(ref.model == "bm25-flat" and ref.dataset == "nfcorpus" for ref in references)  # shipped, kept
    smoke = load_suite("offline-smoke")
    assert smoke.path == user / "suites" / "offline-smoke.yaml"
    assert [(c.model, c.expected) for c in smoke.conditions] == [
        ("my-model", {"ndcg@10": 0.7}),
        ("bm25-flat", {"ndcg@10": 0.5}),
    ]
    assert smoke.conditions[0].source == "my-paper: Me et al. 2025, table 2"
    assert load_suite("pyserini-bm25").conditions  # shipped suites are still found


def test_unknown_key_in_a_suite_or_references_file_names_file_and_key(tmp_path, capsys):
    suite = write_suite(tmp_path / "typo.yaml", [{"model": "m", "dataset": "scifact"}], tolerence=0.1)
    assert main(["reproduce", str(suite), "--results-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: {suite}: unknown key 'tolerence' (check its spelling)\n"
    references = tmp_path / "references.yaml"
    references.write_text(
        "entries:\n  - {model: m, dataset: d, source: s, metrics: {x: 1}, prefered: true}\n"
    )
    with pytest.raises(HarnessError, match=r"references.yaml: unknown key 'entries.0.prefered'"):
        load_references(references)

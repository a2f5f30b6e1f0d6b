"""``harness table`` over result folders made here: marks, averages and best cells in md, csv, latex, json, png."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import every_other, make_result, real_fingerprint, real_qrels, synthetic_run

from harness.cli import main
from harness.core.errors import HarnessError
from harness.results.collect import collect_results, display_labels, select_models

MODELS = ["base-model", "finetuned-model", "mixed-model", "broken-model"]


@pytest.fixture(scope="module")
def truth(beir_mirror: Path) -> dict[str, float]:
    """Scores known from how the runs are built (see tests/report_fixtures.py), not from harness code."""
    scifact = real_qrels(beir_mirror, "scifact")
    nfcorpus = real_qrels(beir_mirror, "nfcorpus")
    return {
        "scifact_queries": len(scifact),
        "base_scifact": len(every_other(scifact, 1)) / len(scifact),  # half the queries pushed below rank 10
        "mixed_scifact": (len(every_other(scifact, 1)) + 2) / len(scifact),  # two of those fixed
        "base_nfcorpus": len(every_other(nfcorpus, 1)) / len(nfcorpus),
    }


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory: pytest.TempPathFactory, beir_mirror: Path) -> Path:
    root = tmp_path_factory.mktemp("results")
    qrels = real_qrels(beir_mirror, "scifact")
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    pushed = every_other(qrels, 0)
    make_result(root, "scifact", "base-model", synthetic_run(qrels, pushed, 10), qrels, fingerprint)
    make_result(root, "scifact", "finetuned-model", synthetic_run(qrels), qrels, fingerprint)
    fixed = set(sorted(pushed)[:2])
    make_result(root, "scifact", "mixed-model", synthetic_run(qrels, pushed - fixed, 10), qrels, fingerprint)
    make_result(root, "scifact", "broken-model", synthetic_run(qrels, set(qrels), 100), qrels, fingerprint)
    # A second dataset only two of the models have (the mirror holds nfcorpus qrels but no corpus).
    nf_qrels = real_qrels(beir_mirror, "nfcorpus")
    nf_fingerprint = real_fingerprint(beir_mirror, "nfcorpus", files=("qrels/test.tsv",))
    make_result(
        root,
        "nfcorpus",
        "base-model",
        synthetic_run(nf_qrels, every_other(nf_qrels, 0), 10),
        nf_qrels,
        nf_fingerprint,
    )
    make_result(root, "nfcorpus", "finetuned-model", synthetic_run(nf_qrels), nf_qrels, nf_fingerprint)
    return root


def md_section(text: str, title: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(f"### {title}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("### ")), len(lines))
    return lines[start:end]


def md_row(section: list[str], label: str) -> list[str]:
    line = next(line for line in section if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


def table(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["table", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_markdown_marks_significance_bold_best_and_average(results_dir, truth, capsys):
    code, out, err = table(capsys, str(results_dir), "--baseline", "base-model", "--models", *MODELS)
    assert code == 0, err
    ndcg = md_section(out, "nDCG@10")
    assert md_row(ndcg, "dataset") == MODELS
    # finetuned is better on half of the queries -> significant; mixed differs on 2 of 300 -> not;
    # broken is worse everywhere -> significant the other way.
    assert md_row(ndcg, "scifact") == [
        f"{truth['base_scifact']:.4f}",
        "**1.0000** ↑",
        f"{truth['mixed_scifact']:.4f}",
        "0.0000 ↓",
    ]
    assert md_row(ndcg, "nfcorpus") == [f"{truth['base_nfcorpus']:.4f}", "**1.0000** ↑", "–", "–"]
    # Only scifact has every model: an average over it alone would repeat its row, so there is none.
    assert not any(line.startswith("| *average") for line in ndcg)
    legend = "\n".join(ndcg)
    assert "No average row: nfcorpus lack(s) a result of some model, so only scifact has them all." in legend
    assert "significantly better / worse than base-model" in legend
    assert "permutation" in legend and "alpha = 0.05" in legend and "holm correction" in legend
    assert "over the 4 comparisons in this table" in legend  # 3 on scifact + 1 on nfcorpus

    recall = md_section(out, "Recall@100")
    # Pushing 10 unjudged docs in front keeps every scifact relevant doc in the top 100: a three-way tie.
    assert md_row(recall, "scifact") == ["**1.0000**", "**1.0000**", "**1.0000**", "0.0000 ↓"]


def test_average_spans_every_dataset_all_shown_models_have(results_dir, truth, capsys):
    code, out, err = table(
        capsys, str(results_dir), "--models", "base-model", "finetuned-model", "--metrics", "ndcg@10"
    )
    assert code == 0, err
    section = md_section(out, "nDCG@10")
    expected_base = (truth["base_scifact"] + truth["base_nfcorpus"]) / 2
    assert md_row(section, "*average (2)*") == [f"{expected_base:.4f}", "**1.0000**"]
    assert "↑" not in out and "↓" not in out  # no baseline, no marks
    assert "Recall@100" not in out


def test_csv_has_one_tidy_line_per_cell_with_marks(results_dir, truth, capsys):
    code, out, err = table(capsys, str(results_dir), "--format", "csv", "--baseline", "base-model")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    cell = {(r["metric"], r["dataset"], r["model"]): r for r in rows}
    finetuned = cell[("ndcg@10", "scifact", "finetuned-model")]
    assert float(finetuned["value"]) == pytest.approx(1.0)
    assert (
        finetuned["best"] == "true"
        and finetuned["significant"] == "true"
        and finetuned["direction"] == "better"
    )
    assert float(finetuned["p_value_adjusted"]) < 0.05 and finetuned["baseline"] == "base-model"
    assert float(finetuned["difference"]) == pytest.approx(1.0 - truth["base_scifact"])
    assert int(finetuned["paired_queries"]) == truth["scifact_queries"]
    mixed = cell[("ndcg@10", "scifact", "mixed-model")]
    assert (
        mixed["significant"] == "false"
        and mixed["best"] == "false"
        and float(mixed["p_value_adjusted"]) > 0.05
    )
    broken = cell[("ndcg@10", "scifact", "broken-model")]
    assert broken["direction"] == "worse"
    base = cell[("ndcg@10", "scifact", "base-model")]
    assert base["p_value"] == "" and base["significant"] == "false"
    assert int(base["n_queries"]) == truth["scifact_queries"]
    average = cell[("ndcg@10", "average", "base-model")]
    assert float(average["value"]) == pytest.approx(truth["base_scifact"])
    assert cell[("ndcg@10", "nfcorpus", "mixed-model")]["value"] == ""
    assert all(cell[("recall@100", "scifact", m)]["best"] == "true" for m in MODELS[:3])


def test_correction_is_applied_across_the_table(results_dir, capsys):
    def p_values(*extra: str) -> dict[tuple[str, str, str], tuple[float, float]]:
        code, out, err = table(
            capsys, str(results_dir), "--format", "csv", "--baseline", "base-model", *extra
        )
        assert code == 0, err
        rows = csv.DictReader(io.StringIO(out))
        return {
            (r["metric"], r["dataset"], r["model"]): (float(r["p_value"]), float(r["p_value_adjusted"]))
            for r in rows
            if r["p_value"]
        }

    plain = p_values("--correction", "none")
    assert all(raw == adjusted for raw, adjusted in plain.values())
    bonferroni = p_values("--correction", "bonferroni")
    # Four comparisons per metric table (three on scifact, one on nfcorpus), so each p is multiplied by 4.
    for key, (raw, adjusted) in bonferroni.items():
        assert adjusted == pytest.approx(min(1.0, 4 * raw)), key
        assert raw == plain[key][0]


def test_latex_uses_booktabs_bold_and_arrows(results_dir, truth, capsys):
    code, out, err = table(
        capsys, str(results_dir), "--format", "latex", "--baseline", "base-model", "--models", *MODELS
    )
    assert code == 0, err
    assert out.count(r"\begin{tabular}{lrrrr}") == 2 and r"\toprule" in out and r"\bottomrule" in out
    scifact = next(line for line in out.splitlines() if line.startswith("scifact &"))
    assert scifact == (
        rf"scifact & {truth['base_scifact']:.4f} & \textbf{{1.0000}}$^{{\uparrow}}$ & "
        rf"{truth['mixed_scifact']:.4f} & 0.0000$^{{\downarrow}}$ \\"
    )
    assert "Average (" not in out  # one dataset has every model: no average row
    assert "nfcorpus & " in out and " & -- & -- \\\\" in out
    # A one-sentence caption; the explanations in one block of notes under the tabular.
    assert r"\caption{nDCG@10 per dataset, against base-model.}" in out
    notes = out[out.index(r"\end{tabular}") : out.index(r"\end{table}")]
    assert r"\begin{minipage}{\linewidth}\footnotesize" in notes
    assert "significantly better / worse than base-model" in notes and r"$\uparrow$" in notes


def test_json_carries_cells_legend_and_settings(results_dir, capsys):
    code, out, err = table(
        capsys, str(results_dir), "--format", "json", "--baseline", "finetuned-model", "--alpha", "0.01"
    )
    assert code == 0, err
    document = json.loads(out)
    assert document["significance"]["alpha"] == 0.01
    ndcg = document["tables"][0]
    assert ndcg["metric"] == "ndcg@10" and ndcg["models"][0] == "finetuned-model"
    scifact = next(row for row in ndcg["rows"] if row["dataset"] == "scifact")
    assert scifact["cells"]["base-model"]["direction"] == "worse"
    assert scifact["cells"]["finetuned-model"]["best"] is True
    assert any("alpha = 0.01" in line for line in ndcg["legend"])


def test_png_charts_are_readable_bar_charts(results_dir, tmp_path, capsys):
    import matplotlib.image

    out_dir = tmp_path / "charts"
    code, out, err = table(
        capsys, str(results_dir), "--format", "png", "--output", str(out_dir), "--models", *MODELS
    )
    assert code == 0, err
    paths = sorted(Path(line) for line in out.split())
    assert [p.name for p in paths] == ["chart-ndcg_at_10.png", "chart-recall_at_100.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        pixels = matplotlib.image.imread(path)
        height, width = pixels.shape[:2]
        assert width >= 600 and height >= 400
        # Several distinct colours: bars of four models, text and axes on a white background.
        colours = np.unique((pixels[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
        assert len(colours) > 20


def _copy_results(source: Path, target: Path, datasets_models: list[tuple[str, str]]) -> None:
    for dataset, model in datasets_models:
        shutil.copytree(source / dataset / model, target / dataset / model)


def test_corrupt_and_other_version_results_are_reported_and_left_out(
    results_dir, beir_mirror, tmp_path, truth, capsys
):
    root = tmp_path / "results"
    _copy_results(results_dir, root, [("scifact", "base-model"), ("scifact", "finetuned-model")])
    qrels = real_qrels(beir_mirror, "scifact")
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    # 1. A metrics file cut off mid-write.
    corrupt = make_result(root, "scifact", "corrupt-model", synthetic_run(qrels), qrels, fingerprint)
    text = (corrupt / "metrics.json").read_text()
    (corrupt / "metrics.json").write_text(text[: len(text) // 2])
    # 2. A run on another version of the corpus (one document edited -> another sha256).
    edited = tmp_path / "corpus.jsonl"
    edited.write_bytes((beir_mirror / "scifact" / "corpus.jsonl").read_bytes().replace(b"a", b"b", 1))
    from harness.core.fileio import file_digest

    old = make_result(
        root,
        "scifact",
        "old-data-model",
        synthetic_run(qrels, set(qrels), 100),
        qrels,
        {**fingerprint, "corpus.jsonl": file_digest(edited, "sha256")},
    )
    # 3. Per-query values that are not numbers.
    malformed = make_result(root, "scifact", "malformed-model", synthetic_run(qrels), qrels, fingerprint)
    payload = json.loads((malformed / "metrics.json").read_text())
    payload["per_query"][sorted(payload["per_query"])[0]]["ndcg@10"] = "high"
    (malformed / "metrics.json").write_text(json.dumps(payload))

    code, out, err = table(capsys, str(root), "--metrics", "ndcg@10")
    assert code == 0, err
    assert f"warning: skipped {corrupt}: {corrupt / 'metrics.json'}" in err and "not valid JSON" in err
    assert f"warning: skipped {old}: computed on another version of scifact: corpus.jsonl differ" in err
    assert f"warning: skipped {malformed}:" in err and "per_query" in err
    section = md_section(out, "nDCG@10")
    assert md_row(section, "dataset") == ["base-model", "finetuned-model"]
    assert md_row(section, "scifact") == [f"{truth['base_scifact']:.4f}", "**1.0000**"]
    assert not any(line.startswith("| *average") for line in section)  # one dataset: no average row
    assert str(corrupt) in out and str(old) in out  # listed under the tables too


def test_results_disagreeing_on_an_unregistered_dataset_keep_the_majority(beir_mirror, tmp_path, capsys):
    root = tmp_path / "results"
    qrels = real_qrels(beir_mirror, "scifact")
    agreed = {"corpus.jsonl": "a" * 64, "qrels/test.tsv": "b" * 64}
    make_result(root, "my-collection", "model-a", synthetic_run(qrels), qrels, agreed)
    make_result(root, "my-collection", "model-b", synthetic_run(qrels), qrels, agreed)
    odd = make_result(
        root, "my-collection", "model-c", synthetic_run(qrels), qrels, {**agreed, "qrels/test.tsv": "c" * 64}
    )
    code, out, err = table(capsys, str(root), "--metrics", "ndcg@10")
    assert code == 0, err
    assert (
        f"skipped {odd}: computed on another version of my-collection: qrels/test.tsv differ from the other results"
        in err
    )
    assert md_row(md_section(out, "nDCG@10"), "dataset") == ["model-a", "model-b"]


def test_two_results_on_different_unpinned_data_are_both_left_out(beir_mirror, tmp_path, capsys):
    root = tmp_path / "results"
    qrels = real_qrels(beir_mirror, "scifact")
    first = make_result(
        root, "my-collection", "model-a", synthetic_run(qrels), qrels, {"corpus.jsonl": "a" * 64}
    )
    second = make_result(
        root, "my-collection", "model-b", synthetic_run(qrels), qrels, {"corpus.jsonl": "b" * 64}
    )
    code, out, err = table(capsys, str(root))
    assert code == 2 and "no usable results" in err
    for folder in (first, second):
        assert f"skipped {folder}: computed on another version of my-collection: corpus.jsonl differ" in err
    assert "no version is in the majority" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--baseline", "no-such-model"], "no results for model 'no-such-model'"),
        (["--metrics", "map@7"], "metric(s) map@7 not in any result"),
        (["--datasets", "fiqa"], "no results for dataset(s) fiqa"),
        (["--baseline", "base-model", "--test", "magic"], "invalid choice: 'magic'"),
        (["--baseline", "base-model", "--correction", "fdr"], "invalid choice: 'fdr'"),
    ],
)
def test_bad_options_fail_with_one_line(results_dir, capsys, args, message):
    code, out, err = table(capsys, str(results_dir), *args)
    assert code == 2
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_missing_results_folder_fails_with_one_line(tmp_path, capsys):
    code, out, err = table(capsys, str(tmp_path / "nowhere"))
    assert code == 2 and "does not exist" in err and "Traceback" not in err


def test_collection_and_model_selection_live_in_results(results_dir):
    collection = collect_results(results_dir)
    assert {(r.dataset, r.model) for r in collection.results} >= {("scifact", m) for m in MODELS}
    assert select_models(collection.results, ["finetuned-model", "base-model"]) == [
        "finetuned-model",
        "base-model",
    ]
    assert display_labels(collection.results, ["base-model"]) == {"base-model": "base-model"}
    with pytest.raises(HarnessError, match="no results for model 'nope'"):
        select_models(collection.results, ["nope"])

"""Systems: fusion (against a hand computation and ranx), cross-encoder re-ranking and its cache, bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.cache import cache_entries
from harness.core.ranking import sorted_ranking, top_k_ranking
from harness.evaluation.trec import read_run, write_run
from harness.pipeline import EvalOptions, run_eval
from harness.retrieval.fusion import FusionSettings, fuse
from harness.retrieval.rerank import CrossEncoderReranker, RerankSettings, resolve_cross_encoder
from harness.retrieval.systems import find_system, load_system, system_registry

# Two tiny runs: run A ties d2 and d3 (trec_eval puts d3 first: docid descending).
RUN_A = {"q1": {"d1": 3.0, "d2": 2.0, "d3": 2.0}, "q2": {"d1": 1.0, "d4": 0.5}}
RUN_B = {"q1": {"d3": 0.9, "d4": 0.5}, "q2": {"d4": 1.0}}


def test_rrf_equals_a_hand_computed_example():
    fused = fuse([RUN_A, RUN_B], FusionSettings("rrf", k=60))
    # q1: A ranks d1, d3, d2 (tie on 2.0 broken by docid descending); B ranks d3, d4.
    assert fused["q1"] == {
        "d1": 1 / 61,
        "d3": 1 / 62 + 1 / 61,
        "d2": 1 / 63,
        "d4": 1 / 62,
    }
    assert fused["q2"] == {"d1": 1 / 61, "d4": 1 / 62 + 1 / 61}
    assert [docid for docid, _ in sorted_ranking(fused["q1"])] == ["d3", "d1", "d4", "d2"]


def test_depth_limits_each_member_and_k_is_a_parameter():
    fused = fuse([RUN_A, RUN_B], FusionSettings("rrf", k=0, depth=1))
    assert fused["q1"] == {"d1": 1.0, "d3": 1.0}


def test_score_fusions_hand_computed():
    minmax = fuse([RUN_A, RUN_B], FusionSettings("combsum"))
    # A min-max: d1 1, d2 0, d3 0; B: d3 1, d4 0.
    assert minmax["q1"] == {"d1": 1.0, "d3": 1.0, "d2": 0.0, "d4": 0.0}
    mnz = fuse([RUN_A, RUN_B], FusionSettings("combmnz", normalization="none"))
    assert mnz["q1"] == {"d1": 3.0, "d3": (2.0 + 0.9) * 2, "d2": 2.0, "d4": 0.5}
    interpolated = fuse([RUN_A, RUN_B], FusionSettings("interpolation", weights=(0.25, 0.75)))
    assert interpolated["q2"] == {"d1": 0.25, "d4": 0.25 * 0.5 + 0.75 * 1.0}


def _ranx_fused(ranx_runs: list, method: str, norm: str | None, params: dict):
    from ranx import fuse as ranx_fuse

    fused = ranx_fuse(ranx_runs, norm=norm, method=method, params=params)
    return {qid: dict(docs) for qid, docs in fused.to_dict().items()}


def _tie_free(run):
    """``run`` with scores replaced by distinct ones in trec_eval order: ranx orders ties arbitrarily."""
    return {
        qid: {docid: float(-rank) for rank, (docid, _) in enumerate(sorted_ranking(docs))}
        for qid, docs in run.items()
    }


# (our method, our normalisation, weights) -> (ranx method, ranx norm, ranx params)
RANX_EQUIVALENTS = [
    (("rrf", None, None), ("rrf", None, {"k": 60})),
    (("combsum", "min-max", None), ("sum", "min-max", {})),
    (("combsum", "z-score", None), ("sum", "zmuv", {})),
    (("combsum", "sum", None), ("sum", "sum", {})),
    (("combmnz", "min-max", None), ("mnz", "min-max", {})),
    (("combmnz", "z-score", None), ("mnz", "zmuv", {})),
    (("combmnz", "sum", None), ("mnz", "sum", {})),
    (("interpolation", "none", (0.3, 0.7)), ("wsum", None, {"weights": [0.3, 0.7]})),
    (("interpolation", "min-max", (0.6, 0.4)), ("wsum", "min-max", {"weights": [0.6, 0.4]})),
]


def assert_equals_ranx(runs: list[dict]) -> None:
    """Every method and normalisation: scores within 1e-9 and equal trec_eval rankings."""
    from ranx import Run

    # Built once: converting a 300k-line run to ranx's numba dicts is the slow part.
    as_given, tie_free = [Run(run) for run in runs], [Run(_tie_free(run)) for run in runs]
    for (method, norm, weights), (ranx_method, ranx_norm, params) in RANX_EQUIVALENTS:
        ours = fuse(runs, FusionSettings(method, normalization=norm, weights=weights))
        theirs = _ranx_fused(tie_free if method == "rrf" else as_given, ranx_method, ranx_norm, params)
        assert set(ours) == set(theirs), method
        for qid in ours:
            assert set(ours[qid]) == set(theirs[qid]), (method, norm, qid)
            worst = max(abs(ours[qid][d] - theirs[qid][d]) for d in ours[qid])
            assert worst <= 1e-9, (method, norm, qid, worst)
            ranked = [d for d, _ in sorted_ranking(ours[qid])]
            assert ranked == [d for d, _ in sorted_ranking(theirs[qid])], (method, norm, qid)


@pytest.mark.slow  # ranx compiles its numba kernels on first use (minutes on a busy CPU)
def test_fusion_equals_ranx_on_small_runs_with_ties():
    assert_equals_ranx([RUN_A, RUN_B])


def _write(path: Path, run: dict) -> Path:
    write_run(path, run, "t")
    return path


def test_fuse_command_writes_the_fused_run(tmp_path, capsys):
    a, b = _write(tmp_path / "a.trec", RUN_A), _write(tmp_path / "b.trec", RUN_B)
    out = tmp_path / "fused.trec"
    assert main(["fuse", str(a), str(b), "--method", "rrf", "--output", str(out)]) == 0
    assert read_run(out) == fuse([RUN_A, RUN_B], FusionSettings("rrf"))
    assert "2 queries" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--method", "borda"], "unknown fusion method 'borda'"),
        (["--method", "rrf", "--fuse-depth", "0"], "fusion depth must be at least 1"),
        (["--method", "rrf", "--fuse-depth", "-3"], "fusion depth must be at least 1"),
        (["--method", "combsum", "--norm", "l2"], "unknown normalisation 'l2'"),
        (["--method", "interpolation", "--weights", "1"], "1 weights for 2 runs"),
    ],
)
def test_fuse_bad_options_are_one_line(tmp_path, capsys, extra, expected):
    a, b = _write(tmp_path / "a.trec", RUN_A), _write(tmp_path / "b.trec", RUN_B)
    assert main(["fuse", str(a), str(b), *extra, "--output", str(tmp_path / "o.trec")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and err.count("\n") == 1, err
    assert not (tmp_path / "o.trec").exists()


def test_fusing_runs_over_different_queries_is_stated(tmp_path, capsys):
    a = _write(tmp_path / "a.trec", RUN_A)
    b = _write(tmp_path / "b.trec", {"q1": RUN_B["q1"], "q9": {"d1": 1.0}})
    assert main(["fuse", str(a), str(b), "--method", "rrf", "--output", str(tmp_path / "o.trec")]) == 2
    err = capsys.readouterr().err
    assert "cannot fuse runs over different queries" in err and "'q2'" in err and "'q9'" in err
    assert err.count("\n") == 1


def test_shipped_system_record_and_bad_records(tmp_path, monkeypatch):
    record = find_system("bm25+minilm-rrf")
    assert record is not None and record.members == ("bm25", "minilm") and record.fusion.method == "rrf"
    assert find_system("hybrid-rrf") == record
    bad = tmp_path / "systems"
    bad.mkdir()
    (bad / "x.yaml").write_text("name: x\nmembers: [bm25, minilm]\nfusion: {method: rrf, depht: 10}\n")
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(tmp_path))
    with pytest.raises(Exception, match=r"x.yaml: unknown key 'fusion.depht'"):
        system_registry()
    (bad / "x.yaml").write_text("name: x\nmembers: [bm25, minilm]\nfusion: {method: rrf, depth: 0}\n")
    with pytest.raises(Exception, match=r"x.yaml: .*greater than 0"):
        load_system(bad / "x.yaml")
    (bad / "x.yaml").write_text("name: minilm\nmembers: [bm25]\nrerank: {model: x}\n")
    with pytest.raises(Exception, match=r"x.yaml: name or alias 'minilm' is already a model's"):
        system_registry()


# ---- re-ranking ------------------------------------------------------------------------------------


QUERIES = {"q1": "what cells increase cancer risk", "q2": "protein levels in mouse brain"}
PASSAGES = {
    f"d{i}": text
    for i, text in enumerate(
        [
            "immune cells and tumor growth",
            "gene expression in human blood",
            "mouse brain protein study",
            "cancer risk increase in patients",
            "rna virus analysis method",
            "dna data from studies",
        ]
    )
}


def test_rerank_equals_cross_encoder_predict_and_caches(tmp_path, tiny_cross_encoder, predict_calls):
    from sentence_transformers import CrossEncoder

    first_stage = {
        "q1": {f"d{i}": 10.0 - i for i in range(6)},
        "q2": {"d5": 3.0, "d4": 3.0, "d3": 2.0, "d2": 1.0, "d1": 0.5},  # d5/d4 tie: d5 first (docid desc)
    }
    depth = 3
    model = resolve_cross_encoder(str(tiny_cross_encoder))
    reranker = CrossEncoderReranker(model, RerankSettings(depth=depth, device="cpu"), tmp_path / "cache")
    reranked = reranker.rerank(first_stage, QUERIES, PASSAGES)

    reference = CrossEncoder(str(tiny_cross_encoder), device="cpu", max_length=reranker.max_length)
    for qid, docs in first_stage.items():
        order = sorted_ranking(docs)
        head, tail = [d for d, _ in order[:depth]], [d for d, _ in order[depth:]]
        expected = reference.predict([(QUERIES[qid], PASSAGES[d]) for d in head])
        expected_head = sorted_ranking({d: float(s) for d, s in zip(head, expected, strict=True)})
        ranking = sorted_ranking(reranked[qid])
        assert ranking[:depth] == expected_head  # CrossEncoder.predict scores, trec_eval order
        assert [d for d, _ in ranking[depth:]] == tail  # below the depth: first-stage order
        assert max(s for _, s in ranking[depth:]) < min(s for _, s in ranking[:depth])
    calls_before = len(predict_calls)
    assert sum(predict_calls[:1]) == 2 * depth  # one call scored every new pair

    again = CrossEncoderReranker(model, RerankSettings(depth=depth, device="cpu"), tmp_path / "cache")
    assert again.rerank(first_stage, QUERIES, PASSAGES) == reranked
    assert len(predict_calls) == calls_before  # cache hit: no model call
    assert again.pairs_scored == 0 and again.pairs_cached == 2 * depth
    deeper = CrossEncoderReranker(model, RerankSettings(depth=depth + 1, device="cpu"), tmp_path / "cache")
    deeper.rerank(first_stage, QUERIES, PASSAGES)
    assert predict_calls[calls_before:] == [2]  # only the two pairs never scored before


def test_rerank_cache_is_keyed_by_max_length(tmp_path, tiny_cross_encoder, predict_calls):
    model = resolve_cross_encoder(str(tiny_cross_encoder))
    run = {"q1": {"d0": 2.0, "d1": 1.0}}
    for max_length in (16, 32, 16):
        settings = RerankSettings(depth=2, device="cpu", max_length=max_length)
        CrossEncoderReranker(model, settings, tmp_path / "cache").rerank(run, QUERIES, PASSAGES)
    assert predict_calls == [2, 2]
    entries = cache_entries(tmp_path / "cache", "rerank")  # one entry per max length, listed by `cache list`
    assert sorted(entry.details["max_length"] for entry in entries) == [16, 32]
    assert all(entry.complete and entry.model == model.slug for entry in entries)


def test_eval_with_a_reranked_bm25_system(tmp_path, beir_mirror, tiny_cross_encoder, predict_calls, capsys):
    scifact = str(beir_mirror / "scifact")
    args = ["eval", "--dataset", scifact, "--model", "bm25", "--rerank", str(tiny_cross_encoder)]
    args += ["--rerank-depth", "5", "--top-k", "20", "--results-dir", str(tmp_path / "results")]
    args += ["--cache-dir", str(tmp_path / "cache"), "--no-progress", "--device", "cpu"]
    assert main(args) == 0, capsys.readouterr().err
    folders = list((tmp_path / "results" / "scifact").iterdir())
    assert [f.name for f in folders] == ["bm25__rerank-tiny-ce-d5@top_k=20"]  # top 20: not the default
    provenance = json.loads((folders[0] / "provenance.json").read_text())
    rerank = provenance["config"]["system"]["rerank"]
    assert rerank["depth"] == 5 and rerank["identity"]["weights_hash"]
    assert provenance["retrieval"]["rerank"]["pairs_scored"] == 300 * 5
    run = read_run(folders[0] / "run.trec")
    assert len(run) == 300 and all(len(docs) == 20 for docs in run.values())
    scored = len(predict_calls)

    assert main([*args, "--force"]) == 0  # recomputed, but every pair comes from the cache
    assert len(predict_calls) == scored
    provenance = json.loads((folders[0] / "provenance.json").read_text())
    assert provenance["retrieval"]["rerank"]["pairs_cached"] == 300 * 5
    assert read_run(folders[0] / "run.trec") == run
    assert main(args) == 0 and "(reused)" in capsys.readouterr().out


def test_a_reranker_that_is_not_a_cross_encoder_is_one_line(tmp_path, tiny_st_dir, capsys):
    args = ["eval", "--dataset", "scifact", "--model", "bm25", "--results-dir", str(tmp_path)]
    for reranker in (str(tiny_st_dir), "minilm"):
        assert main([*args, "--rerank", reranker]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "not a cross-encoder" in err and err.count("\n") == 1, err
    assert main([*args, "--rerank", str(tiny_st_dir), "--rerank-depth", "0"]) == 2
    assert "--rerank-depth must be at least 1" in capsys.readouterr().err
    assert main([*args, "--fuse", "nope"]) == 2
    assert "unknown fusion method 'nope'" in capsys.readouterr().err


# ---- scifact ------------------------------------------------------------------------------------------

# A cache or data folder the user already has (e.g. HARNESS_CACHE_DIR=/path/to/cache pytest ...), read at
# import, before the autouse fixture points HARNESS_CACHE_DIR at a temporary folder.
_USER_CACHE = os.environ.get("HARNESS_CACHE_DIR")
_USER_DATA = os.environ.get("HARNESS_DATA_DIR")


@pytest.mark.slow
def test_fusion_equals_ranx_on_scifact_bm25_and_minilm(e2e_workdir: Path, beir_mirror: Path):
    """The real runs (MiniLM's encode shared with the e2e tests' session cache): ranx agrees on every method."""
    options = EvalOptions(
        results_dir=e2e_workdir / "results-systems",
        data_dir=Path(_USER_DATA) if _USER_DATA else e2e_workdir / "data",
        cache_dir=Path(_USER_CACHE) if _USER_CACHE else e2e_workdir / "cache",
        mirror=str(beir_mirror),
        no_progress=True,
    )
    runs = [read_run(run_eval("scifact", model, options).run_path) for model in ("bm25", "minilm")]
    assert all(len(run) == 300 for run in runs)
    assert_equals_ranx(runs)

    fused = run_eval("scifact", "bm25+minilm-rrf", options)
    assert read_run(fused.run_path) == {
        qid: dict(top_k_ranking(docs, 1000)) for qid, docs in fuse(runs, FusionSettings("rrf")).items()
    }
    assert fused.provenance["config"]["system"]["fusion"] == {"method": "rrf", "depth": None, "k": 60}
    assert fused.metrics["ndcg@10"] > max(read_metric(options, m) for m in ("bm25", "minilm"))


def read_metric(options: EvalOptions, model: str) -> float:
    return run_eval("scifact", model, options).metrics["ndcg@10"]

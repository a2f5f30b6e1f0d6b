"""The onnx runtime and the ``exact`` default: same vectors as torch fp32, exported once, checked once."""

from __future__ import annotations

import dataclasses
import json
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from tiny_bert import tiny_record

from harness.cli import main
from harness.core.errors import HarnessError
from harness.datasets.beir import Document
from harness.encoding import exact_runtime, onnx_export, onnx_quantize, runtime_checks
from harness.encoding.encoder import Encoder
from harness.encoding.runtime_choice import build_encoder
from harness.models.resolve import resolve_model, resolve_record

TEXTS = [
    "what is the role of the immune cells in cancer ?",
    "dna",
    "a study of protein levels in human blood and the effect of treatment on patients with high risk "
    "of disease , with results for mouse models and human data analysis methods " * 3,
    "gene",
    "virus and bacteria",
]


# The record these tests run the tiny BERT with (call arguments override these).
_tiny_record = partial(tiny_record, max_length=24)


def _encoder(model, cache: Path, **options) -> Encoder:
    return build_encoder(model, device="cpu", batch_size=2, cache_dir=cache, **options)


@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
def test_onnx_equals_torch_on_the_tiny_bert(tiny_bert_dir: Path, tmp_path: Path, pooling: str):
    model = resolve_record(_tiny_record(tiny_bert_dir, pooling=pooling, query_prefix="query: "))
    torch_vectors = _encoder(model, tmp_path, runtime="torch").encode_queries(TEXTS)
    onnx_vectors = _encoder(model, tmp_path, runtime="onnx").encode_queries(TEXTS)
    assert onnx_vectors.dtype == np.float32 and onnx_vectors.shape == torch_vectors.shape == (5, 32)
    np.testing.assert_allclose(onnx_vectors, torch_vectors, rtol=1e-5, atol=1e-6)
    assert runtime_checks.relative_error(onnx_vectors, torch_vectors) < exact_runtime.TOLERANCE


def test_onnx_equals_sentence_transformers_folder(tiny_st_dir: Path, tmp_path: Path):
    from sentence_transformers import SentenceTransformer

    model = resolve_model(str(tiny_st_dir))
    encoder = _encoder(model, tmp_path, runtime="onnx")
    reference = SentenceTransformer(str(tiny_st_dir), device="cpu").encode(TEXTS, batch_size=2)
    np.testing.assert_allclose(encoder.encode_queries(TEXTS), reference, atol=1e-6)
    described = encoder.describe()
    assert described["label"] == "onnx fp32" and described["resolved_runtime"] == "onnx"
    assert described["onnx_export"]["attention"] == "eager"
    assert described["onnx_export"]["input_names"] == ["input_ids", "token_type_ids", "attention_mask"]


def test_export_is_kept_in_the_cache_and_reused(tiny_st_dir: Path, tmp_path: Path, monkeypatch):
    model = resolve_model(str(tiny_st_dir))
    first = _encoder(model, tmp_path, runtime="onnx").encode_queries(TEXTS)
    folder, key, _ = onnx_export.export_folder(tmp_path, model)
    assert folder.parent == tmp_path / "onnx" and folder.name.startswith(model.slug)
    assert (folder / "model.onnx").is_file()
    assert json.loads((folder / "export.json").read_text())["key"] == key
    assert sorted(path.name for path in folder.iterdir()) == ["export.json", "model.onnx"]  # no temp files

    def no_export(*args, **kwargs):
        raise AssertionError("exported twice")

    monkeypatch.setattr(onnx_export, "_export", no_export)
    np.testing.assert_array_equal(_encoder(model, tmp_path, runtime="onnx").encode_queries(TEXTS), first)
    # Another max length or prefix does not change the graph: the same export serves it.
    shorter = dataclasses.replace(
        model, record=model.record.model_copy(update={"max_length": 8, "query_prefix": "q "})
    )
    assert onnx_export.export_folder(tmp_path, shorter)[0] == folder
    _encoder(shorter, tmp_path, runtime="onnx").encode_queries(TEXTS)


def test_int8_is_quantized_once_close_to_fp32_and_recorded(tiny_st_dir: Path, tmp_path: Path, monkeypatch):
    model = resolve_model(str(tiny_st_dir))
    fp32 = _encoder(model, tmp_path, runtime="torch").encode_queries(TEXTS)
    first = _encoder(model, tmp_path, precision="int8")
    int8 = first.encode_queries(TEXTS)
    described = first.describe()
    variant = first.quantization["variant"]  # the one for this CPU
    assert described["label"] == f"onnx int8 {variant}" and first.settings()["precision"] == "int8"
    quantization = described["onnx_export"]["quantization"]
    assert quantization["settings"]["method"] == "matmul_nbits" and quantization["settings"]["bits"] == 8
    # Approximate, not exact: the int8 weights move the vectors, but not far.
    cosines = (int8 * fp32).sum(axis=1) / np.linalg.norm(int8, axis=1) / np.linalg.norm(fp32, axis=1)
    assert runtime_checks.relative_error(int8, fp32) > exact_runtime.TOLERANCE
    assert cosines.min() > 0.95
    quantized = next((tmp_path / "onnx").glob("*/model-int8-*.onnx"))
    stamp = quantized.stat().st_mtime_ns

    def no_quantizing(*args, **kwargs):
        raise AssertionError("quantized twice")

    import onnxruntime.quantization

    monkeypatch.setattr(onnxruntime.quantization, "quantize_dynamic", no_quantizing)
    again = _encoder(model, tmp_path, precision="int8").encode_queries(TEXTS)
    np.testing.assert_array_equal(again, int8)  # same graph, same kernels
    assert quantized.stat().st_mtime_ns == stamp
    assert not list(quantized.parent.glob(".*.tmp"))


def test_new_weights_get_their_own_export(tiny_bert_dir: Path, tmp_path: Path):
    from tiny_bert import build_tiny_bert

    other = build_tiny_bert(tmp_path / "other-bert", seed=1)
    first = resolve_record(_tiny_record(tiny_bert_dir))
    second = resolve_record(_tiny_record(other))
    assert onnx_export.export_folder(tmp_path, first)[0] != onnx_export.export_folder(tmp_path, second)[0]


def test_failed_export_is_one_line_and_leaves_nothing(tiny_bert_dir: Path, tmp_path: Path, monkeypatch):
    import torch

    def broken_export(*args, **kwargs):
        Path(args[2]).write_bytes(b"half a graph")  # what a crash mid-export leaves behind
        raise RuntimeError("Unsupported: ONNX export of operator foo\nlong details")

    monkeypatch.setattr(torch.onnx, "export", broken_export)
    model = resolve_record(_tiny_record(tiny_bert_dir))
    with pytest.raises(HarnessError) as error:
        _encoder(model, tmp_path, runtime="onnx").encode_queries(["dna"])
    assert str(error.value) == "could not export tiny to ONNX: Unsupported: ONNX export of operator foo"
    folder = onnx_export.export_folder(tmp_path, model)[0]
    assert list(folder.iterdir()) == []


def test_exact_check_runs_once_and_is_recorded(tiny_st_dir: Path, tmp_path: Path, monkeypatch):
    model = resolve_model(str(tiny_st_dir))
    encoder = _encoder(model, tmp_path)
    assert encoder.settings()["runtime"] == "exact" and encoder.settings()["precision"] == "float32"
    exact = encoder.encode_queries(TEXTS)
    reference = _encoder(model, tmp_path, runtime="torch").encode_queries(TEXTS)
    assert runtime_checks.relative_error(exact, reference) < exact_runtime.TOLERANCE

    record = json.loads(exact_runtime.choice_path(tmp_path, model, "cpu").read_text())
    candidates = record["candidates"]
    assert set(candidates) == {"torch", "onnx", "onnx-fused"}
    for name in ("onnx", "onnx-fused"):  # the fused graph keeps the exact GELU: still fp32-equal
        assert candidates[name]["equal"] is True
        assert candidates[name]["relative_error"] < exact_runtime.TOLERANCE
    # Interleaved rounds, at least the minimum, every candidate timed in each until one drops out.
    assert exact_runtime.MIN_ROUNDS <= record["rounds"] <= exact_runtime.MAX_ROUNDS
    assert len(candidates["torch"]["rounds"]) == record["rounds"]
    chosen = exact_runtime.choose(candidates)
    assert record["runtime"] == chosen == encoder.describe()["resolved_runtime"]
    assert encoder.describe()["label"] == f"exact ({chosen}) fp32"
    assert record["sample_size"] == len(runtime_checks.exact_sample_texts())
    assert record["key_inputs"]["architecture"]["hidden_size"] == 32  # keyed by shapes, not weights

    def no_check(*args, **kwargs):
        raise AssertionError("checked twice")

    monkeypatch.setattr(exact_runtime, "run_exact_check", no_check)
    again = _encoder(model, tmp_path)
    assert again.describe()["resolved_runtime"] == chosen  # read from the record, model not loaded
    np.testing.assert_allclose(again.encode_queries(TEXTS), exact, atol=1e-6)


class FakeClock:
    """A clock that runners advance by their pretend duration, so choices do not depend on the machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def runner(self, vectors: np.ndarray, seconds: float):
        def run() -> np.ndarray:
            self.now += seconds
            return vectors

        return run


def test_run_exact_check_records_errors_and_compares_every_candidate_with_torch():
    reference = np.eye(3, dtype=np.float32)
    nearly = reference + 1e-7
    approximate = reference + 1e-2  # what bf16 looks like: fast, but not exact

    def broken() -> np.ndarray:
        raise HarnessError("could not export x to ONNX: nope")

    clock = FakeClock()
    outcome = exact_runtime.run_exact_check(
        {
            "torch": clock.runner(reference, 2.0),
            "onnx": clock.runner(nearly, 1.0),
            "bf16": clock.runner(approximate, 0.5),
            "broken": broken,
        },
        clock=clock,
    )
    assert outcome["runtime"] == "onnx"  # the fastest equal one (bf16 is faster, but not equal)
    onnx = outcome["candidates"]["onnx"]
    # Rows of the identity have norm 1: the relative error is the largest row distance.
    assert onnx["relative_error"] == pytest.approx(
        float(np.sqrt(((nearly - reference) ** 2).sum(axis=1)).max())
    )
    assert onnx["equal"] is True and onnx["seconds"] == 1.0 and onnx["rounds"] == [1.0] * outcome["rounds"]
    assert onnx["gain"] == {"median": 0.5, "spread": 0.0}
    assert outcome["candidates"]["bf16"]["equal"] is False and outcome["candidates"]["bf16"]["rounds"] == []
    assert outcome["candidates"]["broken"]["error"] == "could not export x to ONNX: nope"
    assert outcome["candidates"]["broken"]["equal"] is False
    # Slower, or faster by less than the least win: the reference itself stays.
    for onnx_seconds in (3.0, 2.0 * (1 - exact_runtime.MIN_WIN / 2)):
        clock = FakeClock()
        runners = {"torch": clock.runner(reference, 2.0), "onnx": clock.runner(nearly, onnx_seconds)}
        assert exact_runtime.run_exact_check(runners, clock=clock)["runtime"] == "torch"


def test_exact_without_onnxruntime_falls_back_to_torch(tiny_bert_dir: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    model = resolve_record(_tiny_record(tiny_bert_dir))
    encoder = _encoder(model, tmp_path)
    vectors = encoder.encode_queries(TEXTS)
    np.testing.assert_array_equal(vectors, _encoder(model, tmp_path, runtime="torch").encode_queries(TEXTS))
    assert encoder.describe()["exact_check"] == {"runtime": "torch", "reason": "onnxruntime is not installed"}
    with pytest.raises(HarnessError, match=r"pip install 'beir-harness\[onnx\]'"):
        _encoder(model, tmp_path, runtime="onnx")


def test_documents_encode_the_same_on_both_runtimes(tiny_bert_dir: Path, tmp_path: Path):
    model = resolve_record(_tiny_record(tiny_bert_dir, doc_prefix="passage: ", max_length=48))
    docs = [Document(f"d{i}", f"title {i}", text) for i, text in enumerate(TEXTS)]
    np.testing.assert_allclose(
        _encoder(model, tmp_path, runtime="onnx").encode_documents(docs),
        _encoder(model, tmp_path, runtime="torch").encode_documents(docs),
        rtol=1e-5,
        atol=1e-6,
    )


def _beir_folder(root: Path) -> Path:
    folder = root / "tinyset"
    (folder / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": f"title {i}", "text": text} for i, text in enumerate(TEXTS)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    queries = [{"_id": "q1", "text": "immune cells"}, {"_id": "q2", "text": "virus"}]
    (folder / "queries.jsonl").write_text("".join(json.dumps(query) + "\n" for query in queries))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\nq2\td4\t1\n")
    return folder


def test_cli_runtime_is_recorded_and_keys_the_result(tiny_st_dir: Path, tmp_path: Path, capsys):
    dataset = _beir_folder(tmp_path)
    common = ["eval", "--dataset", str(dataset), "--model", str(tiny_st_dir), "--no-progress"]
    common += ["--results-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache")]
    assert main([*common, "--runtime", "onnx"]) == 0
    provenance_path = next((tmp_path / "results").rglob("provenance.json"))
    provenance = json.loads(provenance_path.read_text())
    assert provenance["config"]["encoder_options"] == {"runtime": "onnx"}
    assert provenance["retrieval"]["encoder_settings"]["runtime"] == "onnx"
    assert provenance["retrieval"]["encoder"]["label"] == "onnx fp32"
    onnx_metrics = json.loads((provenance_path.parent / "metrics.json").read_text())
    summary = capsys.readouterr().out.splitlines()
    assert summary[0].split() == [
        "dataset",
        "model",
        "runtime",
        "nDCG@10",
        "Judged@10",
        "Recall@100",
        "time",
        "(s)",
    ]
    assert " onnx fp32 " in summary[-1]  # the result table says how the vectors were computed

    assert main([*common, "--runtime", "torch"]) == 0  # another runtime: not the stored result
    onnx_folder = provenance_path.parent
    assert onnx_folder.name.endswith("@runtime=onnx")  # each runtime keeps its own result
    provenance_path = onnx_folder.with_name(onnx_folder.name.replace("@runtime=onnx", "@runtime=torch"))
    provenance_path = provenance_path / "provenance.json"
    assert (onnx_folder / "provenance.json").is_file()
    provenance = json.loads(provenance_path.read_text())
    assert provenance["retrieval"]["encoder"]["label"] == "torch fp32"
    out = capsys.readouterr().out
    assert "(reused)" not in out and " torch fp32 " in out.splitlines()[-1]
    torch_metrics = json.loads((provenance_path.parent / "metrics.json").read_text())
    assert onnx_metrics["metrics"] == pytest.approx(torch_metrics["metrics"], abs=1e-9)


def test_real_minilm_onnx_equals_torch_and_sentence_transformers(tmp_path: Path):
    from sentence_transformers import SentenceTransformer

    model = resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    sentences = [
        "Vitamin D deficiency is associated with increased risk of tuberculosis.",
        "What causes the immune system to attack healthy cells?",
        "0-dimensional biomaterials show inductive properties.",
        "A short one.",
        " ".join(["Long documents are truncated at 256 word pieces by this model."] * 40),
    ]
    onnx_encoder = build_encoder(model, device="cpu", batch_size=4, runtime="onnx", cache_dir=tmp_path)
    got = onnx_encoder.encode_queries(sentences)
    torch_vectors = build_encoder(model, device="cpu", batch_size=4, runtime="torch").encode_queries(
        sentences
    )
    reference = SentenceTransformer(model.source, device="cpu").encode(sentences)
    assert runtime_checks.relative_error(got, torch_vectors) < exact_runtime.TOLERANCE
    np.testing.assert_allclose(got, reference, atol=1e-6)
    assert onnx_encoder.describe()["onnx_export"]["model_type"] == "bert"


def test_fusion_infers_shapes_without_the_weights_and_makes_the_optimizers_graph(
    tiny_st_dir: Path, tmp_path: Path, monkeypatch
):
    import onnx
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    model = resolve_model(str(tiny_st_dir))
    encoder = _encoder(model, tmp_path, runtime="onnx")
    encoder.encode_queries(TEXTS)
    graph = onnx_export.export_folder(tmp_path, model)[0] / "model.onnx"
    # The tiny model's weights are small: lower the bound so that shape inference runs without them.
    monkeypatch.setattr(onnx_quantize, "SHAPES_ONLY_ABOVE_BYTES", 1024)
    full = onnx.load(str(graph))
    lean = onnx_quantize._shapes_only(full)
    shapes = {tensor.name: list(tensor.dims) for tensor in full.graph.initializer if tensor.ByteSize() > 1024}
    stubs = {tensor.name: tensor for tensor in lean.graph.initializer}
    assert shapes and all(
        not stubs[name].raw_data and list(stubs[name].dims) == shapes[name] for name in shapes
    )

    fused = onnx_quantize._fused_model(graph, num_heads=2, hidden_size=32)
    assert fused.enable_shape_infer  # shape inference worked on the copies without weights
    assert fused.get_fused_operator_statistics()["Attention"] == 2  # one per layer
    options = FusionOptions("bert")
    options.enable_gelu_approximation = False
    reference = optimizer.optimize_model(
        str(graph), model_type="bert", num_heads=2, hidden_size=32, optimization_options=options, opt_level=0
    )
    assert fused.model.graph.SerializeToString() == reference.model.graph.SerializeToString()

"""Precision and runtime choices: what each device supports, one-line refusals, and the cache key."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from tiny_bert import tiny_record

from harness.cli import main
from harness.core.errors import HarnessError, InputError
from harness.datasets.beir import load_dataset
from harness.encoding import runtime as encode
from harness.encoding.encoder import Encoder, token_batches
from harness.encoding.runtime import resolve_runtime
from harness.encoding.store import EmbeddingCache
from harness.models.registry import ModelRecord, load_record
from harness.models.resolve import resolve_record

TEXTS = [
    "what is the role of the immune cells in cancer ?",
    "dna",
    "a study of protein levels in human blood and the effect of treatment on patients with high risk",
    "gene and virus",
]


# The record these tests run the tiny BERT with (call arguments override these).
_tiny_record = partial(tiny_record, normalize=True, similarity="cosine", max_length=32)


@pytest.fixture
def tiny(tiny_bert_dir: Path):
    return resolve_record(_tiny_record(tiny_bert_dir))


def _beir_folder(root: Path) -> Path:
    folder = root / "tinyset"
    (folder / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": "", "text": text} for i, text in enumerate(TEXTS)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "immune cells"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")
    return folder


# ---- refusals --------------------------------------------------------------------------------


def test_fp16_on_cpu_is_refused_in_one_line(tiny):
    with pytest.raises(HarnessError) as error:
        Encoder(tiny, device="cpu", precision="fp16")
    message = str(error.value)
    assert "precision fp16 runs on a GPU only" in message and "--precision fp32" in message
    assert "\n" not in message


def test_bf16_on_a_cpu_without_native_bf16_is_refused(tiny, monkeypatch):
    monkeypatch.setattr(encode, "cpu_has_native_bf16", lambda: False)
    with pytest.raises(HarnessError) as error:
        Encoder(tiny, device="cpu", precision="bf16")
    assert "native bf16" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("runtime", "precision", "needle"),
    [
        ("onnx", "bf16", "--runtime onnx runs fp32 or int8"),
        ("exact", "bf16", "--runtime exact means vectors equal to torch fp32"),
        ("exact", "int8", "for int8 use --runtime onnx --precision int8"),
        ("torch", "int8", "--runtime torch has no int8"),
        ("fast", None, "unknown runtime 'fast'"),
        (None, "int4", "unknown precision 'int4'"),
    ],
)
def test_contradictory_or_unknown_choices_are_refused(tiny, monkeypatch, runtime, precision, needle):
    monkeypatch.setattr(encode, "cpu_has_native_bf16", lambda: True)
    with pytest.raises(HarnessError, match=needle.replace("(", r"\(")):
        Encoder(tiny, device="cpu", runtime=runtime, precision=precision)


def test_cli_unsupported_precision_is_one_line_and_writes_nothing(tiny_st_dir: Path, tmp_path: Path, capsys):
    dataset = _beir_folder(tmp_path)
    code = main(
        [
            "eval",
            "--dataset",
            str(dataset),
            "--model",
            str(tiny_st_dir),
            "--device",
            "cpu",
            "--precision",
            "fp16",
            "--results-dir",
            str(tmp_path / "results"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-progress",
        ]
    )
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.strip().splitlines()[-1].startswith("error: precision fp16 runs on a GPU only")
    assert len([line for line in captured.err.splitlines() if "error:" in line]) == 1
    assert "Traceback" not in captured.err
    assert not (tmp_path / "results").exists()


# ---- defaults --------------------------------------------------------------------------------


def test_defaults_and_what_a_bare_precision_implies(tiny, monkeypatch):
    monkeypatch.setattr(encode, "cpu_has_native_bf16", lambda: True)
    assert resolve_runtime(tiny, "cpu", None, None) == ("exact", "float32")
    assert resolve_runtime(tiny, "cpu", None, "bf16") == ("torch", "bfloat16")  # bf16 is torch's
    assert resolve_runtime(tiny, "cpu", "onnx", "fp32") == ("onnx", "float32")
    assert resolve_runtime(tiny, "cpu", None, "int8") == ("onnx", "int8")  # int8 is onnx's


def test_record_defaults_apply_and_arguments_override_them(tiny_bert_dir: Path, tmp_path: Path):
    path = tmp_path / "tiny.yaml"
    path.write_text(
        "name: tiny\nmodel_id: x\nkind: transformers\npooling: mean\nnormalize: true\n"
        "similarity: cosine\nmax_length: 32\nruntime: onnx\nprecision: fp32\n"
    )
    record = load_record(path)
    assert (record.runtime, record.precision) == ("onnx", "fp32")
    assert record.vector_settings()["runtime"] == "onnx"  # a record's default is part of its settings
    model = resolve_record(_tiny_record(tiny_bert_dir, runtime="onnx"))
    assert Encoder(model, device="cpu", cache_dir=tmp_path).settings()["runtime"] == "onnx"
    assert Encoder(model, device="cpu", runtime="torch", cache_dir=tmp_path).settings()["runtime"] == "torch"
    # Records without the fields keep the settings (and cache keys) they had before the fields existed.
    assert "runtime" not in ModelRecord(name="plain").vector_settings()

    path.write_text(path.read_text().replace("precision: fp32", "precision: half"))
    with pytest.raises(InputError, match="precision 'half' is not one of fp32, bf16, fp16, int8"):
        load_record(path)


# ---- bf16 where the CPU has it ---------------------------------------------------------------


def test_bf16_is_close_to_fp32_but_not_equal(tiny, tmp_path: Path, monkeypatch):
    # torch runs bf16 autocast on any CPU (emulated when not native); the probe is what gates it.
    monkeypatch.setattr(encode, "cpu_has_native_bf16", lambda: True)
    fp32 = Encoder(tiny, device="cpu", runtime="torch", cache_dir=tmp_path).encode_queries(TEXTS)
    bf16_encoder = Encoder(tiny, device="cpu", precision="bf16", cache_dir=tmp_path)
    bf16 = bf16_encoder.encode_queries(TEXTS)
    assert bf16.dtype == np.float32
    difference = np.abs(bf16 - fp32).max()
    assert 1e-5 < difference < 5e-2
    assert bf16_encoder.describe()["label"] == "torch bf16"
    assert bf16_encoder.settings()["precision"] == "bfloat16"


def test_cpu_bf16_probe_reads_torch_and_cpuinfo(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    assert encode.cpu_has_native_bf16() is True
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    words = {
        word
        for line in flags.splitlines()
        if line.lower().startswith(("flags", "features"))
        for word in line.split()
    }
    assert encode.cpu_has_native_bf16() is bool(words & {"avx512_bf16", "amx_bf16", "bf16"})


# ---- the cache key ---------------------------------------------------------------------------


def test_changing_backend_or_precision_misses_the_cache(tiny, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(encode, "cpu_has_native_bf16", lambda: True)
    dataset = load_dataset(_beir_folder(tmp_path), "test")
    cache = EmbeddingCache(tmp_path / "cache")
    calls: list[str] = []

    def encoder(**options) -> Encoder:
        built = Encoder(tiny, device="cpu", batch_size=2, cache_dir=tmp_path / "cache", **options)
        original = built.encode_documents

        def counted(docs, progress=None):
            calls.append(built.label())
            return original(docs, progress=progress)

        built.encode_documents = counted
        return built

    choices = [{"runtime": "torch"}, {"runtime": "onnx"}, {}, {"precision": "bf16"}, {"precision": "int8"}]
    entries = [cache.corpus(dataset, encoder(**choice), shard_size=3, progress=False) for choice in choices]
    assert len({entry.key for entry in entries}) == len(choices)
    assert len({entry.directory for entry in entries}) == len(choices)
    assert len(calls) == 2 * len(choices)  # 4 docs in shards of 3: two encodes per setting
    assert "onnx int8" in calls
    calls.clear()
    again = [cache.corpus(dataset, encoder(**choice), shard_size=3, progress=False) for choice in choices]
    assert [entry.key for entry in again] == [entry.key for entry in entries]
    assert calls == []  # every setting hits its own entry


# ---- token-aware batches ---------------------------------------------------------------------


def test_token_batches_cap_texts_and_padded_tokens():
    lengths = np.array([5, 300, 20, 20, 256, 7, 256, 3])
    batches = token_batches(lengths, batch_size=3, max_tokens=600)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(lengths)))  # every text exactly once
    assert lengths[flat].tolist() == sorted(lengths.tolist(), reverse=True)  # longest first
    for batch in batches:
        assert len(batch) <= 3
        assert len(batch) == 1 or len(batch) * lengths[batch].max() <= 600
    assert [len(batch) for batch in token_batches(lengths, batch_size=3)] == [3, 3, 2]


def test_token_capped_batches_give_the_same_vectors(tiny, monkeypatch):
    unbounded = Encoder(tiny, device="cpu", batch_size=4, runtime="torch")
    unbounded.max_batch_tokens = None
    capped = Encoder(tiny, device="cpu", batch_size=4, runtime="torch")
    capped.max_batch_tokens = 8  # down to one text per batch for the long ones
    np.testing.assert_allclose(capped.encode_queries(TEXTS), unbounded.encode_queries(TEXTS), atol=1e-6)
    assert capped.settings() == unbounded.settings()  # batching never changes the key


def test_parallel_streams_give_the_same_vectors_and_restore_threads(tiny):
    import torch

    previous = torch.get_num_threads()
    texts = [f"{text} {index}" for index in range(12) for text in TEXTS]  # many batches
    try:
        torch.set_num_threads(1)  # one stream: batches one after the other
        sequential = Encoder(tiny, device="cpu", batch_size=3, runtime="torch").encode_queries(texts)
        torch.set_num_threads(3)  # three single-threaded streams at once
        streamed = Encoder(tiny, device="cpu", batch_size=3, runtime="torch").encode_queries(texts)
        assert torch.get_num_threads() == 3  # given back after encoding
    finally:
        torch.set_num_threads(previous)
    np.testing.assert_allclose(streamed, sequential, atol=1e-6)

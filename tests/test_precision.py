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
from harness.encoding import cpu, onnx_quantize, runtime_checks
from harness.encoding import runtime as encode
from harness.encoding.embedding_cache import EmbeddingCache
from harness.encoding.encoder import Encoder, token_batches
from harness.encoding.runtime import resolve_runtime
from harness.encoding.runtime_choice import build_encoder
from harness.models.model_registry import ModelRecord, load_record
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
        build_encoder(tiny, device="cpu", precision="fp16")
    message = str(error.value)
    assert "precision fp16 runs on a GPU only" in message and "--precision fp32" in message
    assert "\n" not in message


def test_bf16_on_a_cpu_without_native_bf16_is_refused(tiny, monkeypatch):
    monkeypatch.setattr(encode, "cpu_has_native_bf16", lambda: False)
    with pytest.raises(HarnessError) as error:
        build_encoder(tiny, device="cpu", precision="bf16")
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
        build_encoder(tiny, device="cpu", runtime=runtime, precision=precision)


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
    assert build_encoder(model, device="cpu", cache_dir=tmp_path).settings()["runtime"] == "onnx"
    assert (
        build_encoder(model, device="cpu", runtime="torch", cache_dir=tmp_path).settings()["runtime"]
        == "torch"
    )
    # Records without the fields keep the settings (and cache keys) they had before the fields existed.
    assert "runtime" not in ModelRecord(name="plain").vector_settings()

    path.write_text(path.read_text().replace("precision: fp32", "precision: half"))
    with pytest.raises(InputError, match="precision 'half' is not one of fp32, bf16, fp16, int8"):
        load_record(path)


# ---- bf16 where the CPU has it ---------------------------------------------------------------


def test_bf16_is_close_to_fp32_but_not_equal(tiny, tmp_path: Path, monkeypatch):
    # torch runs bf16 autocast on any CPU (emulated when not native); the probe is what gates it.
    monkeypatch.setattr(encode, "cpu_has_native_bf16", lambda: True)
    fp32 = build_encoder(tiny, device="cpu", runtime="torch", cache_dir=tmp_path).encode_queries(TEXTS)
    bf16_encoder = build_encoder(tiny, device="cpu", precision="bf16", cache_dir=tmp_path)
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
        built = build_encoder(tiny, device="cpu", batch_size=2, cache_dir=tmp_path / "cache", **options)
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
    assert any(call.startswith("onnx int8 nbits8") for call in calls)  # the variant is in the label
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
    unbounded = build_encoder(tiny, device="cpu", batch_size=4, runtime="torch")
    unbounded.max_batch_tokens = None
    capped = build_encoder(tiny, device="cpu", batch_size=4, runtime="torch")
    capped.max_batch_tokens = 8  # down to one text per batch for the long ones
    np.testing.assert_allclose(capped.encode_queries(TEXTS), unbounded.encode_queries(TEXTS), atol=1e-6)
    assert capped.settings() == unbounded.settings()  # batching never changes the key


def test_parallel_streams_give_the_same_vectors_and_restore_threads(tiny):
    import torch

    previous = torch.get_num_threads()
    texts = [f"{text} {index}" for index in range(12) for text in TEXTS]  # many batches
    try:
        torch.set_num_threads(1)  # one stream: batches one after the other
        sequential = build_encoder(tiny, device="cpu", batch_size=3, runtime="torch").encode_queries(texts)
        torch.set_num_threads(3)  # three single-threaded streams at once
        streamed = build_encoder(tiny, device="cpu", batch_size=3, runtime="torch").encode_queries(texts)
        assert torch.get_num_threads() == 3  # given back after encoding
    finally:
        torch.set_num_threads(previous)
    np.testing.assert_allclose(streamed, sequential, atol=1e-6)


# ---- approximate settings: per-CPU int8, the precision check, --precision fast ------------------


@pytest.fixture(scope="module")
def skewed_bert_dir(tmp_path_factory: pytest.TempPathFactory, tiny_bert_dir: Path) -> Path:
    """The tiny BERT with dense weights whose output channels differ in scale by up to 10^5 (as
    trained models have outlier channels): one int8 scale per weight matrix then rounds the small
    channels away, one per channel does not. Seeded: the same weights on every run.
    """
    import shutil

    import torch
    from transformers import BertModel

    folder = tmp_path_factory.mktemp("models") / "skewed-bert"
    shutil.copytree(tiny_bert_dir, folder)
    model = BertModel.from_pretrained(str(tiny_bert_dir))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0, 0.02, generator=generator)
                exponents = (torch.rand(module.weight.shape[0], 1, generator=generator) * 2 - 1) * 2.5
                module.weight.mul_(10**exponents)
    model.save_pretrained(str(folder))
    return folder


def _int8(model, cache: Path, variant: str, **options) -> Encoder:
    return build_encoder(model, device="cpu", precision="int8", int8=variant, cache_dir=cache, **options)


def test_int8_settings_follow_the_cpu_class():
    vnni = frozenset({"avx2", "avx512f", "avx512_vnni"})
    avx2 = frozenset({"avx2", "fma"})
    assert cpu.int8_cpu_class(vnni) == "vnni" and cpu.int8_cpu_class(frozenset({"avx_vnni"})) == "vnni"
    assert cpu.int8_cpu_class(avx2) == "no-vnni" and cpu.int8_cpu_class(frozenset()) == "no-vnni"
    for cpu_class in ("vnni", "no-vnni"):  # blockwise s8 x s8 cannot saturate: no 7-bit weights needed
        assert onnx_quantize.int8_settings("auto", cpu_class)["variant"] == "nbits8"
    assert onnx_quantize.int8_settings("dynamic", "vnni")["reduce_range"] is False  # 8-bit weights
    assert onnx_quantize.int8_settings("dynamic-7bit", "no-vnni")["reduce_range"] is True  # 7 bits
    assert cpu.relevant_cpu_flags(vnni | {"sse2"}) == ["avx2", "avx512f", "avx512_vnni"]
    with pytest.raises(HarnessError, match="unknown int8 variant 'int4'"):
        onnx_quantize.int8_settings("int4", "vnni")


def test_the_check_flags_a_poor_quantization(skewed_bert_dir: Path, tmp_path: Path, caplog, monkeypatch):
    model = resolve_record(_tiny_record(skewed_bert_dir))
    # A bound between the two settings' errors on this tiny model: the check tells them apart. (Under
    # the shipped bound, 0.005, every int8 setting fails; the next test checks that verdict.)
    monkeypatch.setattr(runtime_checks, "APPROXIMATE_TOLERANCE", 0.06)
    with caplog.at_level("WARNING"):  # the checks run (and warn) when the encoders are built
        good, poor = _int8(model, tmp_path, "auto"), _int8(model, tmp_path, "per-tensor")  # auto: this CPU's
        good_check, poor_check = good.precision_check(), poor.precision_check()
    assert good_check["passed"] is True and poor_check["passed"] is False
    assert good_check["relative_error"] < 0.06 < poor_check["relative_error"]
    assert poor_check["relative_error"] > 3 * good_check["relative_error"]  # per-tensor is far worse
    assert poor_check["tolerance"] == 0.06
    assert poor_check["lowest_cosine"] < good_check["lowest_cosine"] <= 1.0
    assert poor_check["reference"] == "torch fp32" and poor_check["sample_size"] == 32
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert len(warnings) == 1 and "onnx int8 per-tensor" in warnings[0]
    assert f"up to {poor_check['relative_error']}" in warnings[0]  # names the measured error
    assert good.quantization["variant"] == "nbits8"
    # The verdict is recorded and read back, not measured again.
    path = runtime_checks.approximate_check_path(tmp_path, model, poor.check_setting())
    assert json.loads(path.read_text())["passed"] is False
    monkeypatch.setattr(runtime_checks, "run_approximate_check", None)  # would fail if called
    again = _int8(model, tmp_path, "per-tensor")
    assert again.precision_check()["relative_error"] == poor_check["relative_error"]


def test_quantization_and_verdict_key_the_cache_and_reach_provenance(skewed_bert_dir: Path, tmp_path: Path):
    model = resolve_record(_tiny_record(skewed_bert_dir))
    dataset = load_dataset(_beir_folder(tmp_path), "test")
    cache = EmbeddingCache(tmp_path / "cache")
    variants = ("dynamic", "dynamic-7bit", "nbits8", "per-tensor")
    encoders = {variant: _int8(model, tmp_path / "cache", variant) for variant in variants}
    entries = {
        name: cache.corpus(dataset, encoder, shard_size=8, progress=False)
        for name, encoder in encoders.items()
    }
    assert len({entry.key for entry in entries.values()}) == len(variants)
    for name, encoder in encoders.items():
        settings = encoder.settings()
        assert settings["quantization"]["variant"] == name
        check = encoder.precision_check()
        assert settings["check"] == (
            "pass" if check["relative_error"] <= runtime_checks.APPROXIMATE_TOLERANCE else "fail"
        )
        described = encoder.describe()
        assert described["quantization"] == settings["quantization"]
        assert described["precision_check"]["passed"] is (settings["check"] == "pass")
        assert described["cpu"]["int8_class"] == cpu.int8_cpu_class()
        assert described["label"] == f"onnx int8 {name}"
    manifest = json.loads((entries["dynamic-7bit"].directory / "manifest.json").read_text())
    assert manifest["key_inputs"]["settings"]["quantization"]["reduce_range"] is True
    assert (
        encoders["per-tensor"].settings()["check"] == "fail"
        and encoders["nbits8"].settings()["check"] == "fail"
    )
    # Another bound changes the verdict: the check runs again and the vectors get a new key.
    before = entries["nbits8"].key
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runtime_checks, "APPROXIMATE_TOLERANCE", 0.06)
        looser = _int8(model, tmp_path / "cache", "nbits8")
        assert looser.settings()["check"] == "pass"
        assert cache.corpus(dataset, looser, shard_size=8, progress=False).key != before


def test_choose_fast_takes_the_fastest_passing_setting():
    exact = {"runtime": "onnx", "candidates": {"torch": {"seconds": 2.0}, "onnx": {"seconds": 1.0}}}
    assert runtime_checks.exact_speedup(exact) == 2.0
    checks = {
        "onnx int8 per-tensor": {"speedup": 9.0, "passed": False},  # fastest, but fails its check
        "onnx int8 dynamic": {"speedup": 4.0, "passed": True},
        "torch bf16": {"speedup": 3.0, "passed": True},
    }
    assert runtime_checks.choose_fast(exact, checks)["chosen"] == "onnx int8 dynamic"
    # An approximate setting must beat exact by the margin: on a near-tie exact vectors win.
    assert (
        runtime_checks.choose_fast(exact, {"torch bf16": {"speedup": 2.1, "passed": True}})["chosen"]
        == "exact"
    )
    assert runtime_checks.choose_fast(exact, {})["chosen"] == "exact"


def test_precision_fast_becomes_the_chosen_setting(tiny, tmp_path: Path, monkeypatch, caplog):
    monkeypatch.setattr(encode, "cpu_has_native_bf16", lambda: False)
    with caplog.at_level("INFO"):  # fast chooses (and says so) when it is built
        fast = build_encoder(tiny, device="cpu", precision="fast", cache_dir=tmp_path)
        vectors = fast.encode_queries(TEXTS)
    choice = fast.describe()["fast"]
    assert set(choice["candidates"]) == {"exact", f"onnx int8 {fast_variant()}"}
    chosen = choice["chosen"]
    # A candidate that fails its check is weighed, not used: no warning, its verdict in the choice line.
    assert not [record for record in caplog.records if record.levelname == "WARNING"]
    said = [record.getMessage() for record in caplog.records if "--precision fast for" in record.getMessage()]
    assert len(said) == 1 and f"onnx int8 {fast_variant()}: " in said[0]
    same = (
        build_encoder(tiny, device="cpu", cache_dir=tmp_path)
        if chosen == "exact"
        else build_encoder(tiny, device="cpu", precision="int8", cache_dir=tmp_path)
    )
    assert fast.settings() == same.settings()  # fast shares the chosen setting's cache entries
    assert fast.label() == f"fast: {same.label(same.resolve_runtime())}"
    np.testing.assert_allclose(vectors, same.encode_queries(TEXTS), atol=1e-6)
    with pytest.raises(HarnessError, match="--precision fast chooses the runtime too"):
        build_encoder(tiny, device="cpu", runtime="onnx", precision="fast")


def fast_variant() -> str:
    return onnx_quantize.int8_settings("auto", cpu.int8_cpu_class())["variant"]


def test_cli_int8_variant_is_recorded_and_needs_int8(tiny_st_dir: Path, tmp_path: Path, capsys):
    dataset = _beir_folder(tmp_path)
    common = [
        "eval",
        "--dataset",
        str(dataset),
        "--model",
        str(tiny_st_dir),
        "--device",
        "cpu",
        "--no-progress",
    ]
    folders = ["--results-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache")]
    assert main([*common, *folders, "--int8", "dynamic"]) == 2
    assert "error: --int8 dynamic needs --precision int8" in capsys.readouterr().err
    assert main([*common, *folders, "--precision", "int8", "--int8", "per-tensor"]) == 0
    provenance = json.loads(next((tmp_path / "results").rglob("provenance.json")).read_text())
    encoder = provenance["retrieval"]["encoder"]
    assert encoder["label"] == "onnx int8 per-tensor" and encoder["quantization"]["per_channel"] is False
    check = encoder["precision_check"]
    assert check["setting"]["quantization"]["variant"] == "per-tensor" and isinstance(check["passed"], bool)
    assert check["relative_error"] > 0 and check["reference"] == "torch fp32"
    assert encoder["cpu"]["int8_class"] in ("vnni", "no-vnni")

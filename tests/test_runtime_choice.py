"""The runtime choice is a value made before the encoder exists: ``settings`` and ``describe`` only read it.

The checks (and their files) belong to ``harness.encoding.runtime_choice``; an encoder built from a
choice reads no file, times nothing and loads no model to say what it computes and how.
"""

from __future__ import annotations

import builtins
import dataclasses
import io
import time
from pathlib import Path

import numpy as np
import pytest
from tiny_bert import tiny_record

from harness.encoding import exact_runtime, runtime_checks, runtime_choice
from harness.encoding.encoder import Encoder
from harness.encoding.onnx_quantize import int8_settings
from harness.encoding.runtime import RuntimeChoice
from harness.encoding.runtime_choice import build_encoder
from harness.models.resolve import resolve_record

TEXTS = ["what is the role of the immune cells in cancer ?", "dna", "gene and virus"]

EXACT_CHECK = {"runtime": "onnx", "candidates": {"torch": {"seconds": 2.0}, "onnx": {"seconds": 1.0}}}
INT8_CHECK = {"passed": False, "relative_error": 0.03, "speedup": 3.0, "tolerance": 0.005}
CHOICES = {
    "torch fp32": RuntimeChoice("torch", "float32", "torch"),
    "exact (onnx) fp32": RuntimeChoice("exact", "float32", "onnx", exact_check=EXACT_CHECK),
    "exact fp32": RuntimeChoice("exact", "float32"),  # pending: no check recorded or run yet
    "onnx int8 nbits8": RuntimeChoice(
        "onnx", "int8", "onnx", int8_settings("nbits8", "vnni"), precision_check=INT8_CHECK
    ),
    "fast: exact (onnx) fp32": RuntimeChoice(
        "exact", "float32", "onnx", exact_check=EXACT_CHECK, fast={"chosen": "exact", "candidates": {}}
    ),
}


def _refuse(*args, **kwargs):
    raise AssertionError("settings/describe must not read, write or time anything")


@pytest.fixture
def tiny(tiny_bert_dir: Path):
    return resolve_record(tiny_record(tiny_bert_dir))


@pytest.mark.parametrize("label", list(CHOICES))
def test_settings_and_describe_do_no_io_and_no_timing(tiny, tmp_path: Path, label: str):
    missing = tmp_path / "no-such-cache"  # nothing can be read from it, nor written to it
    encoder = Encoder(tiny, CHOICES[label], device="cpu", batch_size=2, cache_dir=missing, threads=1)
    with pytest.MonkeyPatch.context() as patch:
        for module, name in [(builtins, "open"), (io, "open"), (time, "perf_counter"), (time, "time")]:
            patch.setattr(module, name, _refuse)
        for name in ("load_approximate_check", "run_approximate_check"):
            patch.setattr(runtime_checks, name, _refuse)
        for name in ("load_choice", "load_verification", "run_exact_check"):
            patch.setattr(exact_runtime, name, _refuse)
        patch.setattr(runtime_choice, "settle_exact", _refuse)
        settings, described = encoder.settings(), encoder.describe()
        assert (encoder.settings(), encoder.describe()) == (settings, described)  # same state, same answer
    choice = CHOICES[label]
    assert described["label"] == label == encoder.label()
    assert described["resolved_runtime"] == choice.active
    assert described["exact_check"] == choice.exact_check and described["fast"] == choice.fast
    assert (settings["runtime"], settings["precision"]) == (choice.runtime, choice.dtype)
    assert settings.get("check") == ("fail" if choice.approximate else None)
    assert described["precision_check"] == (INT8_CHECK if choice.approximate else None)
    assert not missing.exists() and encoder.loaded.weights.st_model is None  # nothing loaded either


def test_the_choice_is_an_immutable_value_the_encoder_is_given(tiny, tmp_path: Path):
    encoder = build_encoder(tiny, device="cpu", runtime="torch", cache_dir=tmp_path)
    assert encoder.choice == RuntimeChoice("torch", "float32", "torch")
    with pytest.raises(dataclasses.FrozenInstanceError):
        encoder.choice.runtime = "onnx"  # type: ignore[misc]
    same = Encoder(tiny, encoder.choice, device="cpu", cache_dir=tmp_path)
    assert same.settings() == encoder.settings() and same.describe() == encoder.describe()


def test_an_approximate_check_runs_when_the_encoder_is_built_then_is_read(tiny, tmp_path: Path, monkeypatch):
    first = build_encoder(tiny, device="cpu", precision="int8", cache_dir=tmp_path)
    check = first.choice.precision_check
    assert check is not None and check["reference"] == "torch fp32"  # run (and recorded) by the build
    monkeypatch.setattr(runtime_checks, "run_approximate_check", _refuse)
    again = build_encoder(tiny, device="cpu", precision="int8", cache_dir=tmp_path)
    assert again.choice == first.choice and again.settings() == first.settings()
    assert again.loaded.weights.st_model is None  # read from the record: no model loaded


def test_a_pending_exact_choice_is_settled_by_the_first_batch_only(tiny, tmp_path: Path, monkeypatch):
    encoder = build_encoder(tiny, device="cpu", cache_dir=tmp_path)
    settings = encoder.settings()
    assert not encoder.choice.settled and encoder.describe()["label"] == "exact fp32"
    assert encoder.loaded.weights.st_model is None  # the key needs no model and no check
    vectors = encoder.encode_queries(TEXTS)
    chosen = encoder.choice.active
    assert (
        chosen in ("torch", "onnx", "onnx-fused") and encoder.describe()["label"] == f"exact ({chosen}) fp32"
    )
    assert encoder.settings() == settings  # exact vectors equal torch fp32: the key is the same
    monkeypatch.setattr(exact_runtime, "run_exact_check", _refuse)
    recorded = build_encoder(tiny, device="cpu", cache_dir=tmp_path)  # the recorded check, at build time
    assert recorded.choice.settled and recorded.choice.active == chosen
    np.testing.assert_allclose(recorded.encode_queries(TEXTS), vectors, atol=1e-6)

"""Shared fixtures: where the real BEIR data lives (``../shared`` beside the checkout)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _shared_dir() -> Path:
    return Path(os.environ.get("HARNESS_SHARED_DIR", REPO_ROOT.parent / "shared")).resolve()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    path = _shared_dir()
    # A missing shared folder is a broken checkout, not a reason to skip: fail loudly.
    assert (path / "data" / "beir" / "scifact" / "corpus.jsonl").is_file(), f"shared data not found at {path}"
    return path


@pytest.fixture(scope="session")
def beir_mirror(shared_dir: Path) -> Path:
    """The complete datasets, laid out as an offline mirror."""
    return shared_dir / "data" / "beir"


@pytest.fixture(scope="session")
def beir_partial(shared_dir: Path) -> Path:
    """Datasets with queries and qrels but no corpus."""
    return shared_dir / "data" / "beir-partial"


@pytest.fixture(scope="session")
def e2e_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data/cache/results folder shared by the slow end-to-end tests, so scifact is encoded once per session."""
    root = tmp_path_factory.mktemp("e2e")
    for name in ("data", "cache", "results"):
        (root / name).mkdir()
    return root


@pytest.fixture(scope="session")
def e2e_env(e2e_workdir: Path, beir_mirror: Path) -> dict[str, str]:
    """Environment for running ``make``/``harness`` end to end against the shared mirror and the session folders."""
    env = dict(os.environ)
    env.update(
        HARNESS_BEIR_MIRROR=str(beir_mirror),
        HARNESS_DATA_DIR=str(e2e_workdir / "data"),
        HARNESS_CACHE_DIR=str(e2e_workdir / "cache"),
        HARNESS_RESULTS_DIR=str(e2e_workdir / "results"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    return env


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT checkpoint (plain transformers folder), built offline once per session."""
    from tiny_bert import build_tiny_bert

    return build_tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert")


@pytest.fixture(scope="session")
def tiny_st_dir(tmp_path_factory: pytest.TempPathFactory, tiny_bert_dir: Path) -> Path:
    """The tiny BERT saved as a sentence-transformers folder (mean pooling + Normalize, max length 48)."""
    from tiny_bert import build_tiny_sentence_transformer

    return build_tiny_sentence_transformer(tmp_path_factory.mktemp("models") / "tiny-st", tiny_bert_dir)


@pytest.fixture(scope="session")
def scifact_reference(tmp_path_factory, beir_mirror: Path, tiny_st_dir: Path):
    """``(result, root)`` of one single-worker run of the tiny model on scifact, shared by the scale tests."""
    from scale_fixtures import reference_run

    return reference_run(tmp_path_factory, beir_mirror, tiny_st_dir)


@pytest.fixture(autouse=True)
def _no_cache_in_the_checkout(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test that relies on the default cache folder writes into a temporary one, never ./cache."""
    if "HARNESS_CACHE_DIR" not in os.environ:
        monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "default-cache"))


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory, tiny_bert_dir: Path) -> Path:
    """A tiny random cross-encoder with MiniLM's tokenizer, built once."""
    from tiny_bert import build_tiny_cross_encoder

    return build_tiny_cross_encoder(tmp_path_factory.mktemp("models") / "tiny-ce", tiny_bert_dir)


@pytest.fixture()
def predict_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many pairs each ``CrossEncoder.predict`` call scored while the test ran."""
    from sentence_transformers import CrossEncoder

    calls: list[int] = []
    original = CrossEncoder.predict

    def counting(self, inputs, *args, **kwargs):
        calls.append(len(inputs))
        return original(self, inputs, *args, **kwargs)

    monkeypatch.setattr(CrossEncoder, "predict", counting)
    return calls

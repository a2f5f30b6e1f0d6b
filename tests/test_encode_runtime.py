"""The encoding stage's seams: ``--runtime`` (and the deprecated ``--backend``), thread context
managers that give torch's and the tokenizers' settings back, and the import rules of cli/ and encoding/."""

from __future__ import annotations

import ast
import os
from functools import partial
from pathlib import Path

import pytest

from harness.cli import build_parser
from harness.core.options import record_from_namespace
from harness.encoding.runtime import TOKENIZER_THREADS_VARIABLE, tokenizer_threads, torch_threads
from harness.pipeline import EvalOptions

options_from_args = partial(record_from_namespace, EvalOptions)  # the pipeline's options a command line gives

PACKAGE = Path(__file__).resolve().parent.parent / "harness"
SHARED_CLI_MODULES = {"common.py", "__init__.py"}


@pytest.mark.parametrize("command", ["eval", "encode"])
def test_backend_still_works_with_one_deprecation_line(command: str, capsys) -> None:
    parser = build_parser()
    required = ["--dataset", "d", "--model", "m"]
    new = parser.parse_args([command, *required, "--runtime", "onnx"])
    assert capsys.readouterr().err == ""
    old = parser.parse_args([command, *required, "--backend", "onnx"])
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["note: --backend is deprecated, use --runtime"]
    assert old.runtime == new.runtime == "onnx"
    assert (
        options_from_args(old).encoder_options
        == options_from_args(new).encoder_options
        == {"runtime": "onnx"}
    )


def test_backend_keeps_its_choices(capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "--dataset", "d", "--model", "m", "--backend", "fast"])
    assert "invalid choice: 'fast'" in capsys.readouterr().err


def test_no_runtime_flag_leaves_the_encoder_options_empty() -> None:
    args = build_parser().parse_args(["eval", "--dataset", "d", "--model", "m"])
    assert args.runtime is None and options_from_args(args).encoder_options == {}


def test_torch_threads_restores_the_previous_count_even_when_the_body_raises() -> None:
    import torch

    previous = torch.get_num_threads()
    other = 1 if previous != 1 else 2
    with torch_threads(other) as count:
        assert count == other and torch.get_num_threads() == other
    assert torch.get_num_threads() == previous
    with pytest.raises(RuntimeError, match="inside"), torch_threads(other):
        assert torch.get_num_threads() == other
        raise RuntimeError("inside")
    assert torch.get_num_threads() == previous
    with pytest.raises(ValueError), torch_threads(0):
        pass
    assert torch.get_num_threads() == previous


def test_tokenizer_threads_sets_and_restores_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKENIZER_THREADS_VARIABLE, raising=False)
    with pytest.raises(RuntimeError), tokenizer_threads(3) as count:
        assert count == 3 and os.environ[TOKENIZER_THREADS_VARIABLE] == "3"
        raise RuntimeError("inside")
    assert TOKENIZER_THREADS_VARIABLE not in os.environ
    monkeypatch.setenv(TOKENIZER_THREADS_VARIABLE, "5")  # the user's choice wins and stays
    with tokenizer_threads(3) as count:
        assert count == 5 and os.environ[TOKENIZER_THREADS_VARIABLE] == "5"
    assert os.environ[TOKENIZER_THREADS_VARIABLE] == "5"


def _imported_modules(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node, node.module))
            found += [(node, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_encoding_is_split_by_concern() -> None:
    # Issue 26 split onnx.py by job and renamed store.py to say what it holds.
    expected = {
        *("runtime", "runtime_choice", "runtime_checks", "encoder", "loaded_model"),
        *("onnx_export", "onnx_quantize", "onnx_session", "embedding_cache"),
        *("shards", "workers", "pool", "ray_pool", "plan"),
    }
    assert expected <= {path.stem for path in (PACKAGE / "encoding").glob("*.py")}
    pool_imports = {
        name for _, name in _imported_modules(ast.parse((PACKAGE / "encoding/pool.py").read_text()))
    }
    assert not any(name.startswith("harness.encoding.ray_pool") for name in pool_imports)  # one way only


def test_describe_reports_the_thread_count_the_encoder_uses(tiny_st_dir: Path) -> None:
    import torch

    from harness.encoding.runtime_choice import build_encoder
    from harness.models.resolve import resolve_model

    model = resolve_model(str(tiny_st_dir))
    encoder = build_encoder(model, device="cpu", runtime="torch", threads=2)
    with torch_threads(1):  # what torch says now is not what the encoder computes with
        assert encoder.describe()["threads"] == 2 and encoder.streams() == 2
    before = torch.get_num_threads()
    encoder.encode_queries(["dna", "gene and virus", "a study of protein levels"] * 3)
    assert torch.get_num_threads() == before  # the streams' one-thread setting is given back
    assert encoder.describe()["threads"] == 2


def test_what_the_pipeline_passes_satisfies_the_protocols(tiny_st_dir: Path, tmp_path: Path) -> None:
    from harness.core.protocols import CorpusSource, DocumentEncoder, EvalDataset, ShardExecutor
    from harness.datasets.beir import load_dataset
    from harness.encoding.plan import plan_encoding
    from harness.encoding.pool import InProcess, LocalPool
    from harness.encoding.workers import EncoderSpec, WorkerSlot
    from harness.models.resolve import resolve_model

    folder = tmp_path / "set"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "dna"}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "dna"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    dataset = load_dataset(folder)
    assert isinstance(dataset, CorpusSource) and isinstance(dataset, EvalDataset)
    spec = EncoderSpec(resolve_model(str(tiny_st_dir)), 4, {"runtime": "torch"})
    encoder = spec.build("cpu")
    assert isinstance(encoder, DocumentEncoder)
    plan = plan_encoding(spec, encoder, workers=1)
    assert isinstance(plan.encode_shards, InProcess) and isinstance(plan.encode_shards, ShardExecutor)
    assert plan.describe()["workers"] == 1
    assert isinstance(LocalPool(spec, [WorkerSlot("cpu", 1)]), ShardExecutor)


def test_a_task_owns_every_nth_shard() -> None:
    from harness.core.errors import HarnessError
    from harness.encoding.shards import slice_shards

    assert slice_shards(10, 1, 4) == [1, 5, 9]
    assert sorted(s for index in range(3) for s in slice_shards(7, index, 3)) == list(range(7))
    with pytest.raises(HarnessError):
        slice_shards(10, 4, 4)


def test_a_released_encoder_frees_its_model_and_loads_it_again_when_asked(
    tiny_st_dir: Path, tmp_path: Path
) -> None:
    import numpy as np

    from harness.encoding.runtime_choice import build_encoder
    from harness.models.resolve import resolve_model

    encoder = build_encoder(resolve_model(str(tiny_st_dir)), device="cpu", runtime="onnx", cache_dir=tmp_path)
    first = encoder.encode_queries(["dna", "gene and virus"])
    assert encoder.loaded.sessions == ["onnx"] and encoder.loaded.weights.st_model is not None
    encoder.release()
    assert encoder.loaded.sessions == [] and encoder.loaded.weights.st_model is None
    np.testing.assert_array_equal(encoder.encode_queries(["dna", "gene and virus"]), first)

"""Every shipped model record against the installed mteb's ModelMeta: revision, similarity, prompts and
instruction template, max tokens. A difference fails unless the record explains it on that field's line
(or in its block) with a ``# mteb: ...`` comment saying why the record differs.

Records of the models the published-settings work covers must also say where their settings come from
(``sources``), and the ones needing remote code must refuse to run without ``--trust-remote-code``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.core.config import record_folder_files
from harness.core.errors import HarnessError
from harness.models.model_registry import load_record
from harness.models.preflight import mteb_loader_settings
from harness.models.resolve import resolve_record

mteb = pytest.importorskip("mteb", reason="mteb is not installed: records cannot be checked against it")

SHIPPED = Path(__file__).resolve().parents[1] / "harness" / "records" / "models"
# The records whose published settings and sources were written from the model cards, mteb and papers.
WITH_SOURCES = {
    "e5-small-v2", "e5-base-v2", "e5-large-v2", "multilingual-e5-small", "multilingual-e5-base",
    "multilingual-e5-large", "multilingual-e5-large-instruct", "bge-small-en-v1.5", "bge-base-en-v1.5",
    "bge-large-en-v1.5", "nomic-embed-text-v1.5", "snowflake-arctic-embed-m-v1.5",
    "snowflake-arctic-embed-m-v2.0", "mxbai-embed-large-v1", "qwen3-embedding-0.6b",
    "msmarco-distilbert-base-tas-b", "msmarco-roberta-base-ance-firstp",
}  # fmt: skip


def _shipped() -> dict[str, Path]:
    return {path.stem: path for path in sorted(SHIPPED.glob("*.yaml"))}


def _meta(model_id: str):
    try:
        return mteb.get_model_meta(model_id)
    except (KeyError, ValueError):
        return None


def _explained(path: Path, field: str) -> bool:
    """The field's line, or a line of its indented block, carries a ``# mteb:`` comment."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines):
        if re.match(rf"^{re.escape(field)}\s*:", line):
            block = [line]
            block += [following for following in _indented_after(lines, number)]
            return any("# mteb:" in text for text in block)
    return False


def _indented_after(lines: list[str], number: int) -> list[str]:
    block = []
    for line in lines[number + 1 :]:
        if line and not line.startswith((" ", "\t")):
            break
        block.append(line)
    return block


def _mteb_instruction_template(kwargs: dict) -> str | None:
    """mteb's query instruction template as text: a callable is asked for its query form."""
    from mteb.types import PromptType

    template = kwargs.get("instruction_template")
    if template is None or isinstance(template, str):
        return template
    return template("{instruction}", PromptType.query)


def _differences(record, meta) -> dict[str, tuple[object, object]]:
    """field -> (record's, mteb's) for every compared setting that differs."""
    kwargs = mteb_loader_settings(meta)
    similarity = getattr(meta.similarity_fn_name, "value", meta.similarity_fn_name)
    compared = {
        "revision": (record.revision, meta.revision),
        # A late-interaction record scores by MaxSim because of its kind; its similarity field is unused.
        "similarity": ("MaxSim" if record.is_multivector else record.similarity, similarity),
        "max_length": (record.max_length, int(meta.max_tokens) if meta.max_tokens else None),
        "instruction_template": (record.instruction_template, _mteb_instruction_template(kwargs)),
    }
    if kwargs.get("model_prompts") is not None or record.prompts:
        compared["prompts"] = (record.role_prompts(), dict(kwargs.get("model_prompts") or {}))
    return {field: pair for field, pair in compared.items() if pair[0] != pair[1]}


@pytest.mark.parametrize("stem", sorted(_shipped()))
def test_record_agrees_with_mteb_or_says_why(stem: str) -> None:
    path = _shipped()[stem]
    record = load_record(path)
    meta = None if record.is_lexical else _meta(record.model_id)
    if meta is None:
        # Nothing to compare with; the record still has to be complete and, for these, sourced.
        assert record.is_lexical or record.model_id
        return
    unexplained = {
        field: pair for field, pair in _differences(record, meta).items() if not _explained(path, field)
    }
    assert not unexplained, (
        f"{path.name}: record vs mteb {meta.name} differ without a '# mteb:' note: {unexplained}"
    )


@pytest.mark.parametrize("stem", sorted(WITH_SOURCES))
def test_published_settings_name_their_sources(stem: str) -> None:
    path = _shipped()[stem]
    record = load_record(path)
    assert record.sources, f"{path.name} has no sources"
    header = path.read_text(encoding="utf-8").splitlines()[0]
    assert header.startswith("#"), f"{path.name} lacks the comment header citing its sources"


def test_instruction_models_apply_the_template_to_queries_only() -> None:
    """Qwen3-Embedding and multilingual-e5-large-instruct: mteb applies the template to queries only."""
    for stem in ("qwen3-embedding-0.6b", "multilingual-e5-large-instruct"):
        record = load_record(_shipped()[stem])
        kwargs = mteb_loader_settings(_meta(record.model_id))
        assert kwargs.get("apply_instruction_to_passages") is False
        assert record.instruction_template == _mteb_instruction_template(kwargs)
        assert "document" not in record.role_prompts()


def test_decoder_embedder_pools_the_last_token_with_left_padding() -> None:
    record = load_record(_shipped()["qwen3-embedding-0.6b"])
    assert (record.pooling, record.padding_side, record.normalize) == ("last", "left", True)
    assert 1024 in record.truncate_dims


def test_nomic_states_its_prefixes_and_matryoshka_dimensions() -> None:
    record = load_record(_shipped()["nomic-embed-text-v1.5"])
    assert record.role_prompts()["query"] == "search_query: "
    assert record.role_prompts()["document"] == "search_document: "
    assert record.truncate_dims == (768, 512, 256, 128, 64)


@pytest.mark.parametrize("stem", ["nomic-embed-text-v1.5", "snowflake-arctic-embed-m-v2.0"])
def test_remote_code_models_name_the_flag_when_refused(stem: str) -> None:
    record = load_record(_shipped()[stem])
    assert record.trust_remote_code
    with pytest.raises(HarnessError, match="--trust-remote-code"):
        resolve_record(record)


def test_beir_paper_dense_rows_score_by_dot_product() -> None:
    """TAS-B and ANCE were trained for (and BEIR evaluated them with) the unnormalised dot product."""
    for stem in ("msmarco-distilbert-base-tas-b", "msmarco-roberta-base-ance-firstp"):
        record = load_record(_shipped()[stem])
        assert (record.pooling, record.normalize, record.similarity) == ("cls", False, "dot")


def test_shipped_folder_is_the_registry_folder() -> None:
    assert set(record_folder_files("models")) >= set(_shipped())

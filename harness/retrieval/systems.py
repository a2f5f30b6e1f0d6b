"""Systems: one or more first-stage retrievers, an optional fusion, an optional cross-encoder re-ranker.

A system is data: a record in ``harness/records/systems/NAME.yaml`` (or ``HARNESS_CONFIG_DIR/systems/``,
which adds records and overrides shipped ones of the same file name), or one built from the command line
(``--model bm25 minilm --fuse rrf``, ``--rerank MODEL --rerank-depth 100``)::

    name: bm25+minilm-rrf
    members: [bm25, minilm]          # model records, hub ids or folders, as --model takes them
    fusion: {method: rrf, k: 60}     # needed with two or more members (harness.retrieval.fusion)
    rerank: {model: cross-encoder/ms-marco-MiniLM-L6-v2, depth: 100}   # optional

``harness eval --model NAME`` evaluates it like a model: its identity (each member's identity, the
fusion and its parameters, the re-ranker's identity and settings) keys its result folder and reuse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import PositiveInt, model_validator

from harness.core.config import Record, read_mapping, record_folder_files, validate
from harness.core.errors import HarnessError, InputError
from harness.models.identity import slugify
from harness.models.model_registry import find_record, model_registry
from harness.retrieval.fusion import DEFAULT_RRF_K, FusionSettings
from harness.retrieval.rerank import DEFAULT_RERANK_DEPTH


class FusionRecord(Record):
    """A system's fusion (see ``harness.retrieval.fusion`` for the methods)."""

    method: str
    k: int = DEFAULT_RRF_K
    normalization: str | None = None
    weights: tuple[float, ...] | None = None
    depth: PositiveInt | None = None

    @model_validator(mode="after")
    def _valid_settings(self) -> FusionRecord:
        try:
            self.settings()
        except HarnessError as error:
            raise ValueError(str(error)) from None
        return self

    def settings(self) -> FusionSettings:
        return FusionSettings(self.method, self.k, self.normalization, self.weights, self.depth)


class RerankRecord(Record):
    """A system's re-ranker: a cross-encoder (folder or hub id) on each query's top ``depth``."""

    model: str
    depth: PositiveInt = DEFAULT_RERANK_DEPTH
    max_length: PositiveInt | None = None
    batch_size: PositiveInt | None = None  # None: --batch-size


class SystemRecord(Record):
    """One retrieval system: members, then fusion (two or more members), then an optional re-ranker."""

    name: str
    aliases: tuple[str, ...] = ()
    description: str = ""
    members: tuple[str, ...]
    fusion: FusionRecord | None = None
    rerank: RerankRecord | None = None

    @model_validator(mode="after")
    def _shape(self) -> SystemRecord:
        if not self.name.strip():
            raise ValueError("name must not be empty")
        if not self.members:
            raise ValueError("members must name at least one model")
        if len(self.members) > 1 and self.fusion is None:
            raise ValueError(f"{len(self.members)} members need a fusion (e.g. fusion: {{method: rrf}})")
        if len(self.members) == 1 and self.fusion is not None:
            raise ValueError("fusion needs two or more members")
        if self.fusion is None and self.rerank is None:
            raise ValueError("a system fuses members or re-ranks one; give fusion or rerank")
        if self.fusion is not None and self.fusion.weights is not None:
            self.fusion.settings().member_weights(len(self.members))
        return self

    @property
    def slug(self) -> str:
        return slugify(self.name)


def load_system(path: str | Path) -> SystemRecord:
    """Read and validate one system YAML file; a bad key or value is one error naming the file."""
    return validate(SystemRecord, read_mapping(path), path)


def system_registry() -> dict[str, SystemRecord]:
    """All system records by name (shipped, then the user's overlay); names and aliases must be unique."""
    records: dict[str, SystemRecord] = {}
    claimed: dict[str, Path] = {}
    models = model_registry()
    for path in record_folder_files("systems").values():
        record = load_system(path)
        for label in (record.name, *record.aliases):
            other = claimed.get(label.lower())
            if other is not None:
                raise InputError(path, None, f"name or alias {label!r} is already used by {other.name}")
            if find_record(label, models) is not None:
                raise InputError(
                    path, None, f"name or alias {label!r} is already a model's", "rename the system"
                )
            claimed[label.lower()] = path
        records[record.name] = record
    return records


def find_system(spec: str | SystemRecord) -> SystemRecord | None:
    """The system ``spec`` is (a record, or a registry name or alias, case-insensitive), if any."""
    if isinstance(spec, SystemRecord):
        return spec
    wanted = spec.strip().lower()
    for record in system_registry().values():
        if wanted in (label.lower() for label in (record.name, *record.aliases)):
            return record
    return None


def member_name(spec: str) -> str:
    """A member's canonical name: its model record's name when it has one, else the spec as given."""
    record = find_record(spec)
    return record.name if record is not None else spec.strip()


def _definition(system: SystemRecord) -> dict[str, Any]:
    """What a system computes, names aside (two records with equal definitions are one system)."""
    fusion = system.fusion.settings().describe(len(system.members)) if system.fusion else None
    rerank = system.rerank.model_dump() if system.rerank else None
    return {"members": [member_name(m) for m in system.members], "fusion": fusion, "rerank": rerank}


def command_line_system(
    members: list[str], fusion: FusionSettings | None, rerank: RerankRecord | None
) -> SystemRecord:
    """The system ``--model A B --fuse M`` / ``--rerank X`` spells; a registry record when one is equal.

    An unnamed system is named by its parts (``bm25+...__rrf-k60__rerank-...-d100``), so equal
    command lines share one result folder and different parameters never do.
    """
    fusion_record = (
        FusionRecord(
            method=fusion.method,
            k=fusion.k,
            normalization=fusion.normalization,
            weights=fusion.weights,
            depth=fusion.depth,
        )
        if fusion is not None
        else None
    )
    names = [member_name(m) for m in members]
    parts = ["+".join(names)]
    if fusion is not None:
        parts.append(_fusion_tag(fusion, len(members)))
    if rerank is not None:
        parts.append(f"rerank-{Path(rerank.model).name}-d{rerank.depth}")
        if rerank.max_length:
            parts[-1] += f"-l{rerank.max_length}"
    if fusion is not None and len(members) < 2:
        raise HarnessError(f"fusing needs two or more models, got {len(members)} (give --model A B ...)")
    data = {"name": "__".join(parts), "members": list(members), "fusion": fusion_record, "rerank": rerank}
    system = validate(SystemRecord, data, "command line")
    wanted = _definition(system)
    for record in system_registry().values():
        if _definition(record) == wanted:
            return record
    return system


def _fusion_tag(fusion: FusionSettings, members: int) -> str:
    described = fusion.describe(members)
    tag = fusion.method
    if "k" in described:
        tag += f"-k{fusion.k}"
    if described.get("normalization", "none") != "none":
        tag += f"-{fusion.norm}"
    if "weights" in described:
        tag += "-w" + "-".join(f"{w:g}" for w in fusion.member_weights(members))
    if fusion.depth is not None:
        tag += f"-d{fusion.depth}"
    return tag


# ``harness eval``'s options that make systems of its models (argparse dests), read by systems_from_options.
SYSTEM_OPTIONS = (
    "fuse",
    "rrf_k",
    "norm",
    "weights",
    "fuse_depth",
    "rerank",
    "rerank_depth",
    "rerank_max_length",
)


def fusion_from_options(
    fuse: str | None,
    rrf_k: int = DEFAULT_RRF_K,
    norm: str | None = None,
    weights: list[float] | None = None,
    fuse_depth: int | None = None,
) -> FusionSettings | None:
    """The fusion the ``--fuse``/``--method`` options describe (None without a method)."""
    if fuse is None:
        if weights or norm or fuse_depth is not None:
            raise HarnessError("--fuse-weights, --norm and --fuse-depth need a fusion method")
        return None
    return FusionSettings(fuse, rrf_k, norm, tuple(weights) if weights else None, fuse_depth)


def systems_from_options(
    models: list[str],
    *,
    fuse: str | None = None,
    rrf_k: int = DEFAULT_RRF_K,
    norm: str | None = None,
    weights: list[float] | None = None,
    fuse_depth: int | None = None,
    rerank: str | None = None,
    rerank_depth: int = DEFAULT_RERANK_DEPTH,
    rerank_max_length: int | None = None,
) -> list[str | SystemRecord]:
    """The models as given, or the system(s) ``fuse``/``rerank`` make of them (``harness eval``'s options).

    With ``fuse`` every model is a member of one system; with only ``rerank`` each model is re-ranked on
    its own.
    """
    fusion = fusion_from_options(fuse, rrf_k, norm, weights, fuse_depth)
    if rerank is None:
        if rerank_max_length is not None or rerank_depth != DEFAULT_RERANK_DEPTH:
            raise HarnessError("--rerank-depth and --rerank-max-length need --rerank MODEL")
        if fusion is None:
            return list(models)
    if rerank_depth <= 0:
        raise HarnessError(f"--rerank-depth must be at least 1, got {rerank_depth}")
    if rerank_max_length is not None and rerank_max_length <= 0:
        raise HarnessError(f"--rerank-max-length must be at least 1, got {rerank_max_length}")
    reranker = (
        RerankRecord(model=rerank, depth=rerank_depth, max_length=rerank_max_length) if rerank else None
    )
    if fusion is not None:
        return [command_line_system(list(models), fusion, reranker)]
    return [command_line_system([model], None, reranker) for model in models]

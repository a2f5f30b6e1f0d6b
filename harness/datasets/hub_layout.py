"""Retrieval datasets in the MTEB layout (Hugging Face hub datasets): which files hold what, and reading them.

A hub dataset is a folder (or repo) of data files grouped into configs and splits, as the ``configs:``
block of its ``README.md`` front matter declares (``corpus/corpus-00000-of-00001.parquet``,
``qrels/test.jsonl``...); without that block the configs are inferred from the folder names. mteb's
``RetrievalDatasetLoader`` reads configs ``corpus``, ``queries`` and ``default`` (the qrels; ``qrels``
when there is no ``default``), each ``<config>-``-prefixed for a task's sub-config; a config's split is
the asked one, or its only split. Ids are ``_id`` or ``id``, qrels columns ``query-id``, ``corpus-id``,
``score``. BRIGHT's repo (``hub_layout: bright``) holds ``documents`` / ``long_documents`` and
``examples`` whose rows carry the judged ids and the ``excluded_ids``.

The rows are streamed (parquet a batch at a time, JSON lines a line at a time) into a BEIR folder, which
``datasets.beir.load_dataset`` then reads as any other: the corpus is never held in memory, and every
check and error of the BEIR path applies unchanged. The per-query excluded ids go to
``excluded_ids/<split>.jsonl`` beside the qrels.
"""

from __future__ import annotations

import csv
import fnmatch
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from harness.core.config import load_yaml
from harness.core.errors import HarnessError, InputError
from harness.core.fileio import atomic_write, iter_lines, json_kind, open_text, parse_json
from harness.datasets.dataset_registry import CORPUS_FILE, QRELS_DIR, QUERIES_FILE, DatasetRecord

HUB_SPEC_PREFIX = "hf:"
README_FILE = "README.md"
EXCLUDED_IDS_DIR = "excluded_ids"  # in a BEIR folder: excluded_ids/<split>.jsonl
DATA_SUFFIXES = (".parquet", ".jsonl", ".jsonl.gz", ".json", ".tsv", ".tsv.gz", ".csv")
PARQUET_BATCH_ROWS = 4096
_SHARD_SUFFIX = re.compile(r"-\d{5}-of-\d{5}$")
_NO_EXCLUSION = ["N/A"]  # BRIGHT's marker for "nothing excluded"


# ----------------------------------------------------------------------------------- what to read


@dataclass(frozen=True)
class HubSpec:
    """``hf:<repo>@<revision>``: a hub dataset at a pinned revision."""

    repo: str
    revision: str

    @classmethod
    def parse(cls, spec: str) -> HubSpec | None:
        """The spec's repo and revision; None when ``spec`` is not an ``hf:`` spec; one line when malformed."""
        if not spec.startswith(HUB_SPEC_PREFIX):
            return None
        repo, _, revision = spec.removeprefix(HUB_SPEC_PREFIX).partition("@")
        if repo.count("/") != 1 or not all(repo.split("/")):
            raise HarnessError(
                f"--dataset {spec!r}: expected hf:<owner>/<name>@<revision>, e.g. hf:mteb/scifact@<commit>"
            )
        if not revision:
            raise HarnessError(
                f"--dataset {spec!r} has no revision; pin one (hf:{repo}@<commit sha>) so the data cannot change"
            )
        return cls(repo, revision)

    @property
    def folder(self) -> str:
        """Where its converted copy lives inside the data directory."""
        return f"hf/{self.repo}@{self.revision}"


@dataclass(frozen=True)
class HubReading:
    """Which configs and split of a hub dataset make one evaluation split."""

    split: str  # the split name the loaded dataset gets (qrels/<split>.tsv)
    hub_split: str | None = None  # the hub's name for it, when it differs
    layout: str = "mteb"
    config: str | None = None  # mteb's sub-config prefix
    configs: dict[str, str] = field(default_factory=dict)  # explicit names per role

    @classmethod
    def from_record(cls, record: DatasetRecord, split: str | None = None) -> HubReading:
        return cls(
            split=split or record.eval_split,
            hub_split=record.hub_split,
            layout=record.hub_layout,
            config=record.hub_config,
            configs=dict(record.hub_configs),
        )

    def config_name(self, role: str) -> str:
        """The config holding ``role`` (corpus, queries, qrels), as mteb's loader names it."""
        if role in self.configs:
            return self.configs[role]
        if self.layout == "bright":
            return {"corpus": "documents", "queries": "examples", "qrels": "examples"}[role]
        if role == "qrels":
            return f"{self.config}-qrels" if self.config else "default"
        return f"{self.config}-{role}" if self.config else role


# ---------------------------------------------------------------------------- configs and splits

ConfigFiles = dict[str, dict[str, list[str]]]  # config -> split -> data files (repo paths)


def _front_matter(readme: str | None) -> dict[str, Any]:
    if not readme or not readme.startswith("---"):
        return {}
    end = readme.find("\n---", 3)
    if end < 0:
        return {}
    try:
        value = load_yaml(readme[3:end])
    except Exception as error:  # a broken card: infer the configs from the folders instead
        raise HarnessError(f"{README_FILE}: its front matter is not valid YAML ({error})") from None
    return value if isinstance(value, dict) else {}


def _declared_patterns(data_files: Any) -> dict[str, list[str]]:
    """``data_files`` of one config as split -> patterns (every form the datasets library accepts)."""
    if isinstance(data_files, str):
        return {"train": [data_files]}
    if isinstance(data_files, dict):
        return {str(split): [p] if isinstance(p, str) else list(p) for split, p in data_files.items()}
    patterns: dict[str, list[str]] = {}
    for entry in data_files or []:
        if isinstance(entry, str):
            patterns.setdefault("train", []).append(entry)
        elif isinstance(entry, dict):
            path = entry.get("path", [])
            patterns.setdefault(str(entry.get("split", "train")), []).extend(
                [path] if isinstance(path, str) else path
            )
    return patterns


def _inferred_configs(paths: list[str]) -> ConfigFiles:
    """Configs from folder names (``corpus/corpus-00000-of-00001.parquet``, ``qrels/test.jsonl``,
    top-level ``corpus.jsonl``): the config is the folder, the split the file name's stem."""
    configs: ConfigFiles = {}
    for path in paths:
        pure = PurePosixPath(path)
        if not path.endswith(DATA_SUFFIXES) or len(pure.parts) > 2:
            continue
        stem = _SHARD_SUFFIX.sub("", pure.name.split(".", 1)[0])
        if len(pure.parts) == 1:
            config, split = stem, stem  # corpus.jsonl: config corpus, split corpus
        else:
            config = "default" if pure.parts[0] == "data" else pure.parts[0]
            split = stem
        configs.setdefault(config, {}).setdefault(split, []).append(path)
    return configs


def config_files(paths: list[str], readme: str | None) -> ConfigFiles:
    """Every config's splits and their files: the card's ``configs:`` block, else inferred from folders."""
    declared = _front_matter(readme).get("configs")
    if not isinstance(declared, list) or not declared:
        return _inferred_configs(sorted(paths))
    configs: ConfigFiles = {}
    for entry in declared:
        if not isinstance(entry, dict):
            continue
        name = str(entry.get("config_name", "default"))
        for split, patterns in _declared_patterns(entry.get("data_files")).items():
            matched = sorted(
                {path for path in paths for pattern in patterns if fnmatch.fnmatchcase(path, pattern)}
            )
            configs.setdefault(name, {})[split] = matched
    return configs


def _split_of(config: str, splits: dict[str, list[str]], wanted: str, where: str) -> list[str]:
    """The files of ``wanted`` in ``config``, or of its only split (mteb's ``_get_split``)."""
    if wanted in splits:
        return splits[wanted]
    if len(splits) == 1:
        return next(iter(splits.values()))
    raise HarnessError(
        f"{where}: config {config!r} has no split {wanted!r}; its splits: {', '.join(sorted(splits))}"
    )


def plan_files(configs: ConfigFiles, reading: HubReading, where: str) -> dict[str, list[str]]:
    """The data files of the corpus, queries and qrels one evaluation split reads (repo paths)."""
    wanted = reading.hub_split or reading.split
    plan: dict[str, list[str]] = {}
    for role in ("corpus", "queries", "qrels"):
        config = reading.config_name(role)
        if (
            reading.layout == "mteb"
            and role == "queries"
            and "query" in configs
            and "queries" not in reading.configs
        ):
            config = "query"  # as mteb's loader prefers it
        if reading.layout == "mteb" and role == "qrels" and config == "default" and config not in configs:
            config = "qrels"
        if config not in configs:
            known = ", ".join(sorted(configs)) or "none"
            raise HarnessError(
                f"{where}: no {config!r} config for the {role} (its configs: {known}); not an MTEB-layout retrieval dataset"
            )
        files = _split_of(config, configs[config], wanted, where)
        if not files:
            raise HarnessError(f"{where}: config {config!r} split {wanted!r} names no file that exists")
        plan[role] = files
    return plan


def is_hub_layout(folder: Path) -> bool:
    """Whether ``folder`` looks like a local copy of a hub dataset (and not a BEIR folder)."""
    if (folder / CORPUS_FILE).is_file() or (folder / f"{CORPUS_FILE}.gz").is_file():
        return False
    if (folder / README_FILE).is_file() and _front_matter(_read_text(folder / README_FILE)).get("configs"):
        return True
    return any(
        path.name.endswith(DATA_SUFFIXES)
        for sub in ("corpus", "documents")
        for path in (folder / sub).glob("*")
    )


def local_files(folder: Path) -> list[str]:
    """The visible files of a local hub copy, as repo paths."""
    return sorted(
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    )


def _read_text(path: Path) -> str:
    with open_text(path) as handle:
        return handle.read()


def local_configs(folder: Path) -> ConfigFiles:
    readme = folder / README_FILE
    return config_files(local_files(folder), _read_text(readme) if readme.is_file() else None)


# ------------------------------------------------------------------------------------------ rows


def iter_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(row number, row)`` of a parquet, JSON-lines or TSV/CSV data file, streamed."""
    name = path.name
    if name.endswith(".parquet"):
        yield from _parquet_rows(path)
    elif name.endswith((".tsv", ".tsv.gz", ".csv")):
        delimiter = "," if name.endswith(".csv") else "\t"
        with open_text(path) as handle:
            for number, row in enumerate(csv.DictReader(handle, delimiter=delimiter), start=2):
                yield number, {key.strip(): value for key, value in row.items() if key is not None}
    else:
        for number, line in iter_lines(path):
            if line.strip():
                row = parse_json(line, path, number, invalid="malformed JSON")
                if not isinstance(row, dict):
                    raise InputError(path, number, f"expected a JSON object per row, got {json_kind(row)}")
                yield number, row


def _parquet_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except Exception as error:  # pyarrow raises ArrowInvalid, OSError...
        raise HarnessError(f"{path}: not a readable parquet file ({error})") from None
    number = 0
    for batch in table.iter_batches(batch_size=PARQUET_BATCH_ROWS):
        for row in batch.to_pylist():
            number += 1
            yield number, row


def _id(row: dict[str, Any], keys: tuple[str, ...], path: Path, number: int) -> str:
    for key in keys:
        value = row.get(key)
        if isinstance(value, bool):
            break
        if isinstance(value, int | str) and str(value) != "":
            return str(value)
    raise InputError(
        path, number, f"row has no {' or '.join(repr(key) for key in keys)}", "every row needs an id"
    )


def _text(row: dict[str, Any], key: str, path: Path, number: int) -> str:
    value = row.get(key)
    if not isinstance(value, str):
        raise InputError(path, number, f"row has no {key!r} string", f"every row needs a {key!r} text")
    return value


def _score(value: Any, path: Path, number: int) -> int:
    # mteb casts scores to int32: integral floats and digit strings are fine, anything else is an error.
    try:
        score = float(value)
    except (TypeError, ValueError):
        score = float("nan")
    if not score.is_integer():
        raise InputError(path, number, f"`score` {value!r} is not an integer relevance grade")
    return int(score)


# ------------------------------------------------------------------------------------ conversion


@dataclass
class ConversionCounts:
    docs: int = 0
    queries: int = 0
    qrels: int = 0
    excluded_queries: int = 0


def _write_jsonl(target: Path, rows: Iterator[dict[str, Any]]) -> int:
    count = 0
    with atomic_write(target) as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def _corpus_rows(files: list[Path], text_key: str) -> Iterator[dict[str, Any]]:
    for path in files:
        for number, row in iter_rows(path):
            title = row.get("title")
            yield {
                "_id": _id(row, ("_id", "id"), path, number),
                "title": title if isinstance(title, str) else "",
                "text": _text(row, text_key, path, number),
            }


def _excluded(value: Any) -> list[str]:
    if not isinstance(value, list) or value == _NO_EXCLUSION:
        return []
    return [str(doc_id) for doc_id in value]


def convert_to_beir(
    root: Path, plan: dict[str, list[str]], reading: HubReading, target: Path
) -> ConversionCounts:
    """Stream the planned hub files under ``root`` into a BEIR folder ``target`` (split ``reading.split``)."""
    files = {role: [root / path for path in paths] for role, paths in plan.items()}
    counts = ConversionCounts()
    bright = reading.layout == "bright"
    counts.docs = _write_jsonl(
        target / CORPUS_FILE, _corpus_rows(files["corpus"], "content" if bright else "text")
    )
    queries: list[dict[str, Any]] = []
    excluded: dict[str, list[str]] = {}
    judged: list[tuple[str, str, int]] = []
    for path in files["queries"]:
        for number, row in iter_rows(path):
            query_id = _id(row, ("_id", "id"), path, number)
            queries.append({"_id": query_id, "text": _text(row, "query" if bright else "text", path, number)})
            if _excluded(row.get("excluded_ids")):
                excluded[query_id] = _excluded(row.get("excluded_ids"))
            if bright:
                gold_field = reading.configs.get("qrels", "gold_ids")
                judged += [(query_id, str(doc_id), 1) for doc_id in row.get(gold_field) or []]
    if not bright:
        for path in files["qrels"]:
            for number, row in iter_rows(path):
                judged.append(
                    (
                        _id(row, ("query-id",), path, number),
                        _id(row, ("corpus-id",), path, number),
                        _score(row.get("score"), path, number),
                    )
                )
    counts.queries = _write_jsonl(target / QUERIES_FILE, iter(queries))
    with atomic_write(target / QRELS_DIR / f"{reading.split}.tsv") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        handle.writelines(f"{query_id}\t{doc_id}\t{score}\n" for query_id, doc_id, score in judged)
    counts.qrels = len(judged)
    if excluded:
        rows = ({"query-id": query_id, "corpus-ids": doc_ids} for query_id, doc_ids in excluded.items())
        counts.excluded_queries = _write_jsonl(target / EXCLUDED_IDS_DIR / f"{reading.split}.jsonl", rows)
    return counts


def read_excluded_ids(path: Path) -> dict[str, list[str]]:
    """``excluded_ids/<split>.jsonl`` as query id -> excluded document ids."""
    excluded: dict[str, list[str]] = {}
    for number, row in iter_rows(path):
        doc_ids = row.get("corpus-ids")
        if not isinstance(doc_ids, list):
            raise InputError(path, number, "`corpus-ids` must be a list of document ids")
        excluded.setdefault(_id(row, ("query-id",), path, number), []).extend(
            str(doc_id) for doc_id in doc_ids
        )
    return excluded

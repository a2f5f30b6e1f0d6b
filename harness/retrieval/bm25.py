"""BM25 baseline through ``bm25s``: a cached lexical index over a BEIR corpus, ranked like a dense model's run.

A model record with ``kind: bm25`` carries its scoring and text-analysis settings in ``params`` (see
``BM25Params``). The index is built by streaming the corpus through a ``bm25s`` tokenizer, saved with
``bm25s``'s own ``save`` (``.npy`` arrays without pickle plus JSON), and reused while the corpus checksum and
every setting, library versions included, stay the same.

Two choices differ from calling ``bm25s.BM25.retrieve`` naively, both so a ranking means what Lucene's does:
a document sharing no term with the query is never returned (``bm25s`` would pad the top-k with score-0
documents in arbitrary order), and a query left with no indexed term (empty, only stopwords, or only
unknown words) gets an empty ranking.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.artifacts import CorruptArtifact, check_files, record_files
from harness.core.cache import CacheLayout, digest_of
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write_json, output_error, read_json, read_json_object
from harness.core.staging import clean_stale, staged_folder
from harness.datasets.dataset_registry import CORPUS_FILE

log = logging.getLogger(__name__)

# Bump when the cache folder layout or what is stored in it changes, so old folders are not reused.
INDEX_FORMAT = 1

METHODS = ("robertson", "lucene", "atire", "bm25l", "bm25+")

# scikit-learn's CountVectorizer pattern, bm25s's default: runs of two or more word characters.
DEFAULT_TOKEN_PATTERN = r"(?u)\b\w\w+\b"

# Lucene's StandardTokenizer (Unicode UAX#29 word breaks), as far as a regex gets: word characters, joined
# across ``. : ' ’ ·`` between letters ("e.g", "o'brien") and ``, . ; ' ’`` between digits ("3.5", "1,000").
UAX29_TOKEN_PATTERN = r"(?u)\w+(?:(?:(?<=[^\W\d_])[:.'’·](?=[^\W\d_])|(?<=\d)[,.;'’](?=\d))\w+)*"
# Short names a record may give as ``token_pattern`` instead of a regex: the regexes live only here.
TOKEN_PATTERNS = {"words": DEFAULT_TOKEN_PATTERN, "uax29": UAX29_TOKEN_PATTERN}

_POSSESSIVE = re.compile(r"['’]s$")


@dataclass(frozen=True)
class BM25Params:
    """Everything that changes a BM25 score; the values come from a model record's ``params``."""

    method: str = "lucene"
    k1: float = 1.5
    b: float = 0.75
    delta: float = 0.5  # only BM25L and BM25+ use it
    stemmer: str | None = "english"  # a PyStemmer (Snowball) algorithm, or None
    stopwords: str | tuple[str, ...] | None = "en"  # a bm25s list name, explicit words, or None
    lower: bool = True
    token_pattern: str = DEFAULT_TOKEN_PATTERN
    possessive: bool = False  # strip a trailing 's like Lucene's EnglishPossessiveFilter
    title_join: str | None = " "  # separator between title and text; None indexes the text only

    @classmethod
    def from_record(cls, record: Any) -> BM25Params:
        """Read and check a record's ``params`` (and its ``title_join``); unknown keys are an error."""
        name = getattr(record, "name", "?")
        raw = dict(getattr(record, "params", None) or {})
        known = {field for field in cls.__dataclass_fields__}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise HarnessError(
                f"model {name!r}: unknown BM25 params {unknown} (known: {', '.join(sorted(known))})"
            )
        record_join = getattr(record, "title_join", None)
        if "title_join" not in raw and isinstance(record_join, str):
            raw["title_join"] = record_join
        if raw.get("token_pattern") in TOKEN_PATTERNS:
            raw["token_pattern"] = TOKEN_PATTERNS[raw["token_pattern"]]
        if isinstance(raw.get("stopwords"), list):
            raw["stopwords"] = tuple(str(word) for word in raw["stopwords"])
        try:
            params = cls(**raw)
        except TypeError as error:
            raise HarnessError(f"model {name!r}: bad BM25 params: {error}") from None
        params._check(name)
        return params

    def _check(self, name: str) -> None:
        import Stemmer
        from bm25s.tokenization import _infer_stopwords

        if self.method not in METHODS:
            raise HarnessError(
                f"model {name!r}: BM25 method {self.method!r} is not one of {', '.join(METHODS)}"
            )
        for label, value in (("k1", self.k1), ("b", self.b), ("delta", self.delta)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise HarnessError(
                    f"model {name!r}: BM25 {label} must be a non-negative number, got {value!r}"
                )
        if self.b > 1:
            raise HarnessError(f"model {name!r}: BM25 b must be between 0 and 1, got {self.b}")
        if self.stemmer is not None and self.stemmer not in Stemmer.algorithms():
            raise HarnessError(
                f"model {name!r}: unknown stemmer {self.stemmer!r} "
                f"(PyStemmer offers: {', '.join(Stemmer.algorithms())}; use null for none)"
            )
        try:
            _infer_stopwords(self.stopwords)
        except ValueError:
            raise HarnessError(
                f"model {name!r}: unknown stopword list {self.stopwords!r} (a bm25s name such as 'en', "
                "a list of words, or null)"
            ) from None
        try:
            re.compile(self.token_pattern)
        except re.error as error:
            raise HarnessError(f"model {name!r}: bad token_pattern {self.token_pattern!r}: {error}") from None

    def document_text(self, title: str, text: str) -> str:
        if self.title_join is None or not title:
            return text
        return f"{title}{self.title_join}{text}"

    def tokenizer(self):
        """A fresh ``bm25s`` tokenizer with these settings (it keeps a vocabulary, so one per corpus)."""
        import Stemmer
        from bm25s.tokenization import Tokenizer

        return Tokenizer(
            lower=self.lower,
            splitter=self._splitter(),
            stopwords=list(self.stopwords) if isinstance(self.stopwords, tuple) else self.stopwords,
            stemmer=Stemmer.Stemmer(self.stemmer) if self.stemmer else None,
        )

    def _splitter(self) -> Callable[[str], list[str]]:
        findall = re.compile(self.token_pattern).findall
        if not self.possessive:
            return findall
        return lambda text: [_POSSESSIVE.sub("", token) for token in findall(text)]


def library_versions() -> dict[str, str]:
    """The libraries whose behaviour is part of a BM25 score (the Snowball release changes English stems)."""
    import Stemmer

    return {
        "bm25s": metadata.version("bm25s"),
        "PyStemmer": metadata.version("PyStemmer"),
        "libstemmer": str(Stemmer.version()),
    }


class BM25Retriever:
    """Rank a dataset's queries against its corpus with BM25, caching the index under ``cache_dir/bm25``."""

    def __init__(self, record: Any, *, cache_dir: str | Path, progress: bool = True):
        _require_bm25s()
        self.record = record
        self.params = BM25Params.from_record(record)
        self.cache_dir = Path(cache_dir)
        self.progress = progress
        self.timings: dict[str, float] = {}

    def settings(self) -> dict[str, Any]:
        """Every setting that can change a score: provenance and (with the corpus checksum) the cache key."""
        params = asdict(self.params)
        if isinstance(params["stopwords"], tuple):
            params["stopwords"] = list(params["stopwords"])
        return {
            "kind": "bm25",
            "library": "bm25s",
            **params,
            "idf_method": self.params.method,
            "dtype": "float32",
            "unmatched_documents": "dropped",
            "index_format": INDEX_FORMAT,
            "versions": library_versions(),
        }

    def index_key(self, corpus_sha256: str) -> str:
        return digest_of({"corpus.jsonl": corpus_sha256, "settings": self.settings()})[:32]

    def load_or_build(self, dataset: Any) -> tuple[Any, list[str]]:
        """The ``bm25s`` index and the document ids in index order, from the cache when possible."""
        started = time.perf_counter()
        corpus_sha = _corpus_sha(dataset)
        key = self.index_key(corpus_sha)
        folder = CacheLayout(self.cache_dir).bm25_index(key)
        clean_stale(folder.parent, ".*.tmp")  # staging folders of killed index writers (of any key)
        loaded = _load_index(folder, self.settings(), corpus_sha)
        if loaded is not None:
            log.info("BM25 index loaded from %s", folder)
            self.timings.update(index_seconds=time.perf_counter() - started, cache_hit=1.0)
            return loaded
        retriever, doc_ids = self._build(dataset)
        labels = {"dataset": dataset.name, "model": self.record.name}
        _save_index(folder, retriever, doc_ids, self.settings(), corpus_sha, labels)
        log.info("BM25 index of %d documents saved to %s", len(doc_ids), folder)
        self.timings.update(index_seconds=time.perf_counter() - started, cache_hit=0.0)
        return retriever, doc_ids

    def _build(self, dataset: Any) -> tuple[Any, list[str]]:
        import bm25s
        from tqdm.auto import tqdm

        tokenizer = self.params.tokenizer()
        doc_ids: list[str] = []

        def texts() -> Iterator[str]:
            documents = tqdm(
                dataset.iter_documents(),
                total=getattr(dataset, "num_docs", None),
                desc="BM25 tokenize corpus",
                disable=not self.progress,
            )
            for document in documents:
                doc_ids.append(document.id)
                yield self.params.document_text(document.title, document.text)

        # allow_empty=False: a document with no token stays empty (length 0), as bm25s.tokenize leaves it.
        token_ids = list(tokenizer.streaming_tokenize(texts(), update_vocab=True, allow_empty=False))
        if not doc_ids:
            raise HarnessError(f"{dataset.corpus_path}: the corpus has no documents to index")
        vocab = tokenizer.get_vocab_dict()
        if not vocab:
            raise HarnessError(
                f"{dataset.corpus_path}: no document has an indexable token under the BM25 settings "
                f"of {self.record.name!r}"
            )
        retriever = bm25s.BM25(
            k1=self.params.k1,
            b=self.params.b,
            delta=self.params.delta,
            method=self.params.method,
            backend="numpy",
        )
        retriever.index((token_ids, vocab), create_empty_token=False, show_progress=self.progress)
        return retriever, doc_ids

    def retrieve(
        self, dataset: Any, top_k: int, *, drop_identical_ids: bool = False
    ) -> dict[str, dict[str, float]]:
        """``{qid: {docid: score}}`` for every query of ``dataset``, at most ``top_k`` documents each."""
        if top_k <= 0:
            raise HarnessError(f"top_k must be a positive number of documents, got {top_k}")
        retriever, doc_ids = self.load_or_build(dataset)
        started = time.perf_counter()
        query_ids = list(dataset.queries)
        tokens = self.params.tokenizer().tokenize(
            [dataset.queries[qid] for qid in query_ids],
            update_vocab=True,
            return_as="string",
            show_progress=False,
            allow_empty=False,
        )
        fetch = min(top_k + 1 if drop_identical_ids else top_k, len(doc_ids))
        run: dict[str, dict[str, float]] = {qid: {} for qid in query_ids}
        term_ids = [retriever.get_tokens_ids(query_tokens) for query_tokens in tokens]
        # A query with no indexed term matches nothing: it keeps its empty ranking and bm25s never sees it.
        answerable = [row for row, ids in enumerate(term_ids) if ids]
        if answerable:
            ranked, scores = retriever.retrieve(
                [term_ids[row] for row in answerable],
                k=fetch,
                show_progress=self.progress,
                backend_selection="numpy",
            )
            postings_indices = np.asarray(retriever.scores["indices"])
            postings_ptr = np.asarray(retriever.scores["indptr"])
            for position, row in enumerate(answerable):
                qid = query_ids[row]
                matched = _matching_documents(postings_indices, postings_ptr, term_ids[row])
                run[qid] = _ranking(
                    qid,
                    ranked[position],
                    scores[position],
                    matched,
                    doc_ids,
                    top_k,
                    drop_identical_ids=drop_identical_ids,
                )
        self.timings["query_seconds"] = time.perf_counter() - started
        return run


def _matching_documents(indices: np.ndarray, indptr: np.ndarray, term_ids: Iterable[int]) -> np.ndarray:
    """Row numbers of the documents containing at least one of the terms (their posting lists, merged)."""
    lists = [indices[indptr[term] : indptr[term + 1]] for term in term_ids]
    return np.unique(np.concatenate(lists)) if lists else np.empty(0, dtype=indices.dtype)


def _ranking(
    qid: str,
    rows: np.ndarray,
    scores: np.ndarray,
    matched: np.ndarray,
    doc_ids: list[str],
    top_k: int,
    *,
    drop_identical_ids: bool,
) -> dict[str, float]:
    keep = np.isin(rows, matched)
    hits: dict[str, float] = {}
    for row, score in zip(rows[keep].tolist(), scores[keep].tolist(), strict=True):
        doc_id = doc_ids[row]
        if drop_identical_ids and doc_id == qid:
            continue
        hits[doc_id] = float(score)
        if len(hits) == top_k:
            break
    return hits


# --- the index cache -------------------------------------------------------------------------------------

_MANIFEST = "manifest.json"
_DOC_IDS = "doc_ids.json"


def _corpus_sha(dataset: Any) -> str:
    """sha256 of the corpus file, plain or gzipped (the fingerprint names it as it is on disk)."""
    fingerprint = dataset.fingerprint()
    for name in (CORPUS_FILE, f"{CORPUS_FILE}.gz"):
        if name in fingerprint:
            return fingerprint[name]
    raise HarnessError(f"{dataset.corpus_path}: no checksum recorded for the corpus file")


def _save_index(
    folder: Path, retriever: Any, doc_ids: list[str], settings: dict, corpus_sha: str, labels: dict[str, str]
) -> None:
    """Build the index in an owner-tagged staging folder beside ``folder`` and rename it into place when
    complete; a failed or interrupted build removes its staging folder, a killed one is freed next time."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with staged_folder(folder) as staging:
            # allow_pickle=False: plain numeric .npy files; vocabulary and parameters are JSON.
            retriever.save(staging, allow_pickle=False, show_progress=False)
            atomic_write_json(staging / _DOC_IDS, doc_ids)
            # The manifest goes last: a folder without one is never trusted. It records every file's
            # size and sha256, checked before the index is used again.
            files = record_files(staging)
            atomic_write_json(
                staging / _MANIFEST,
                {
                    "corpus.jsonl": corpus_sha,
                    "num_docs": len(doc_ids),
                    "settings": settings,
                    **labels,
                    "files": files,
                },
            )
            try:
                os.rename(staging, folder)
            except OSError:
                if not (folder / _MANIFEST).is_file():
                    raise
                # Another process finished the same index first; its copy is equivalent (this one is freed).
    except OSError as error:  # bm25s writes its own files: a full disk there is named like any other write
        raise output_error(folder, error) from None


def _load_index(folder: Path, settings: dict, corpus_sha: str) -> tuple[Any, list[str]] | None:
    """The cached index when ``folder`` holds one for exactly these settings and corpus, else None."""
    import bm25s

    manifest_path = folder / _MANIFEST
    if not manifest_path.is_file():
        return None
    try:
        manifest = read_json_object(manifest_path)
        if manifest.get("settings") != settings or manifest.get("corpus.jsonl") != corpus_sha:
            log.warning("BM25 cache %s was written for other settings; rebuilding it", folder)
            return _discard(folder)
        check_files(folder, manifest.get("files") or {}, fix="rebuilding it")
        doc_ids = read_json(folder / _DOC_IDS)
        retriever = bm25s.BM25.load(folder, allow_pickle=False, show_progress=False)
    except CorruptArtifact as error:
        log.warning("BM25 cache: %s", error)
        return _discard(folder)
    except (HarnessError, OSError, ValueError, KeyError, EOFError) as error:
        log.warning("BM25 cache %s is unreadable (%s); rebuilding it", folder, error)
        return _discard(folder)
    if len(doc_ids) != manifest.get("num_docs") or retriever.scores["num_docs"] != len(doc_ids):
        log.warning("BM25 cache %s is inconsistent; rebuilding it", folder)
        return _discard(folder)
    return retriever, doc_ids


def _discard(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    return None


def _require_bm25s() -> None:
    try:
        import bm25s  # noqa: F401
        import Stemmer  # noqa: F401
    except ImportError:
        raise HarnessError(
            "BM25 needs the bm25 extra: pip install -e '.[bm25]' (bm25s and PyStemmer)"
        ) from None

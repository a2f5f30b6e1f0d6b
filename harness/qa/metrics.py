"""Generation metrics for RAG answers, per question and in aggregate.

Answer-matching metrics (EM, Acc, StringEM, CoverEM, token F1) compare SQuAD-normalised text and take the
best gold. ROUGE, BLEU and METEOR come from their reference libraries (``rouge-score``, ``sacrebleu``,
``nltk``) with the settings recorded by :meth:`QAScorer.settings`, so a report says exactly what ran.
An empty prediction scores 0 on every metric.
"""

from __future__ import annotations

import functools
import io
import logging
import os
import re
import string
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.qa.data import QARecord

NORMALISATION = (
    "SQuAD: lower-case, remove ASCII punctuation, remove the articles a/an/the, collapse whitespace "
    "(EM, Acc, StringEM, CoverEM, F1)"
)
# Metric group -> the per-question score keys it produces; order is the report's order.
METRIC_GROUPS: dict[str, tuple[str, ...]] = {
    "em": ("em",),
    "acc": ("acc",),
    "string_em": ("string_em",),
    "cover_em": ("cover_em",),
    "f1": ("f1",),
    "rouge": ("rouge_1", "rouge_2", "rouge_l"),
    "bleu": ("bleu_1", "bleu_2", "bleu_3", "bleu_4"),
    "meteor": ("meteor",),
    "diversity": ("distinct_1", "distinct_2"),
}
ALL_SCORE_KEYS: tuple[str, ...] = tuple(key for keys in METRIC_GROUPS.values() for key in keys)
BLEU_ORDERS = (1, 2, 3, 4)
DIVERSITY_ORDERS = (1, 2)
METEOR_PARAMETERS = {"alpha": 0.9, "beta": 3.0, "gamma": 0.5}

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


# ---------------------------------------------------------------------------------------------------------
# Normalisation and the answer-matching metrics
# ---------------------------------------------------------------------------------------------------------


def _strip_punctuation(text: str) -> str:
    return "".join(char for char in text if char not in _PUNCTUATION)


def normalize_answer(text: str) -> str:
    """The SQuAD v1.1 normalisation: lower-case, drop punctuation, drop a/an/the, collapse whitespace."""
    return " ".join(_ARTICLES.sub(" ", _strip_punctuation(text.lower())).split())


def _contains(prediction: str, gold: str) -> bool:
    """Whether normalised ``gold`` is a substring of normalised ``prediction``.

    Plain substring, as in the reference implementations (FlashRAG's acc, ALCE's str_em), so scores match
    published ones and work for text without spaces; it follows that gold "1" is contained in "1972". A gold
    that normalises to nothing (e.g. "The") never counts as contained.
    """
    return bool(gold) and gold in prediction


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals some normalised gold."""
    normalised = normalize_answer(prediction)
    return float(any(normalised == normalize_answer(gold) for gold in golds))


def accuracy(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when some normalised gold is a substring of the normalised prediction."""
    normalised = normalize_answer(prediction)
    return float(any(_contains(normalised, normalize_answer(gold)) for gold in golds))


def string_em(prediction: str, gold_groups: Sequence[Sequence[str]]) -> float:
    """ASQA's StringEM: the share of gold groups with at least one alias contained in the prediction.

    A flat list of aliases is one group, so there StringEM equals Acc.
    """
    if not gold_groups:
        return 0.0
    normalised = normalize_answer(prediction)
    hits = sum(
        any(_contains(normalised, normalize_answer(alias)) for alias in group) for group in gold_groups
    )
    return hits / len(gold_groups)


def cover_em(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when every token of some normalised gold appears somewhere in the normalised prediction."""
    predicted = set(normalize_answer(prediction).split())
    for gold in golds:
        tokens = normalize_answer(gold).split()
        if tokens and all(token in predicted for token in tokens):
            return 1.0
    return 0.0


def _f1_one(predicted: list[str], gold: list[str]) -> float:
    if not predicted or not gold:
        # SQuAD 2.0 convention: two empty answers agree, one empty answer scores 0.
        return float(predicted == gold)
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: Sequence[str]) -> float:
    """SQuAD token-level F1 between normalised texts (bag of tokens), the best over the golds."""
    predicted = normalize_answer(prediction).split()
    return max((_f1_one(predicted, normalize_answer(gold).split()) for gold in golds), default=0.0)


# ---------------------------------------------------------------------------------------------------------
# Diversity (distinct-n)
# ---------------------------------------------------------------------------------------------------------


def diversity_tokens(text: str) -> list[str]:
    """Tokens for distinct-n: lower-cased, punctuation removed, split on whitespace; articles are kept.

    Articles stay because a repeated "the" is exactly the repetition distinct-n measures.
    """
    return _strip_punctuation(text.lower()).split()


def _ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def distinct_n(texts: Iterable[str], n: int) -> float:
    """Unique n-grams / total n-grams over ``texts`` (n-grams never span two texts); 0.0 when there are none."""
    grams = [gram for text in texts for gram in _ngrams(diversity_tokens(text), n)]
    return len(set(grams)) / len(grams) if grams else 0.0


# ---------------------------------------------------------------------------------------------------------
# WordNet for METEOR's synonym stage, found offline
# ---------------------------------------------------------------------------------------------------------

WORDNET_ENV = "HARNESS_WORDNET_DIR"
# Debian/Ubuntu's ``wordnet-base`` package, then Princeton's default install location.
SYSTEM_WORDNET_DIRS = ("/usr/share/wordnet", "/usr/local/WordNet-3.0/dict")
_WORDNET_FILES = tuple(
    f"{kind}.{pos}" for kind in ("index", "data") for pos in ("noun", "verb", "adj", "adv")
) + tuple(f"{pos}.exc" for pos in ("noun", "verb", "adj", "adv"))
# The 45 lexicographer file names of WordNet 3.0 (lexnames(5WN)), numbered from 00. nltk's reader needs the
# ``lexnames`` file, which Princeton's database has but Debian's package leaves out.
_WORDNET30_LEXNAME_LIST = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
    "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location "
    "noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process "
    "noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body verb.change "
    "verb.cognition verb.communication verb.competition verb.consumption verb.contact verb.creation "
    "verb.emotion verb.motion verb.perception verb.possession verb.social verb.stative verb.weather "
    "adj.ppl"
)
_WORDNET30_LEXNAMES = _WORDNET30_LEXNAME_LIST.split()
_SYNTACTIC_CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}


@dataclass
class WordNetStatus:
    """Which WordNet METEOR's synonym stage uses, or why it has none."""

    reader: Any = None
    path: str | None = None
    version: str | None = None
    note: str = ""

    def describe(self) -> dict[str, Any]:
        return {"path": self.path, "version": self.version, "note": self.note}


def _missing_wordnet_files(directory: Path) -> list[str]:
    return [name for name in _WORDNET_FILES if not (directory / name).is_file()]


@functools.lru_cache(maxsize=4)
def load_wordnet_dir(directory: str) -> Any:
    """An nltk WordNet reader over a WordNet 3.0 database folder (e.g. Debian's ``/usr/share/wordnet``)."""
    import nltk.data
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    lexnames_text = "".join(
        f"{number:02d}\t{name}\t{_SYNTACTIC_CATEGORY[name.split('.')[0]]}\n"
        for number, name in enumerate(_WORDNET30_LEXNAMES)
    )

    class FolderWordNetReader(WordNetCorpusReader):
        def open(self, file: str) -> Any:
            if file == "lexnames" and not (Path(directory) / "lexnames").is_file():
                return io.StringIO(lexnames_text)
            return super().open(file)

        def map_wn(self, version: str = "wordnet") -> None:
            # The stock reader maps synsets onto nltk's own downloaded WordNet for multilingual lookups;
            # this reader has no multilingual data, so there is nothing to map (and no download to find).
            return None

    # nltk only opens corpus files under its data path; register the folder the user's system provides.
    if directory not in nltk.data.path:
        nltk.data.path.append(directory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multilingual functions are not available": expected, no OMW here
        return FolderWordNetReader(directory, None)


def find_wordnet() -> WordNetStatus:
    """Find WordNet without a network: ``$HARNESS_WORDNET_DIR``, nltk's data folders, then system folders.

    A folder named by the environment variable must hold WordNet (a wrong setting is an error, not a silent
    fallback); otherwise a missing WordNet is reported in the status and METEOR runs without synonyms.
    """
    explicit = os.environ.get(WORDNET_ENV)
    if explicit:
        missing = _missing_wordnet_files(Path(explicit))
        if missing:
            raise HarnessError(
                f"{WORDNET_ENV}={explicit} is not a WordNet database folder (missing {', '.join(missing[:4])})"
            )
        return _load_status(explicit, f"from ${WORDNET_ENV}")
    import nltk.data

    try:
        nltk.data.find("corpora/wordnet")
        from nltk.corpus import wordnet

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wordnet.ensure_loaded()
        root = getattr(wordnet.root, "path", str(wordnet.root))
        return WordNetStatus(wordnet, root, wordnet.get_version(), "nltk data package 'wordnet'")
    except (LookupError, OSError, ValueError):
        pass  # not downloaded (the usual case offline), or unreadable: try the system folders
    for candidate in SYSTEM_WORDNET_DIRS:
        if not _missing_wordnet_files(Path(candidate)):
            return _load_status(candidate, "system WordNet database folder")
    looked = ", ".join([f"${WORDNET_ENV}", "nltk data", *SYSTEM_WORDNET_DIRS])
    return WordNetStatus(
        note=f"WordNet not found (looked in {looked}); install the Debian package wordnet-base"
    )


def _load_status(directory: str, origin: str) -> WordNetStatus:
    try:
        reader = load_wordnet_dir(directory)
        return WordNetStatus(reader, directory, reader.get_version(), origin)
    except (OSError, ValueError, LookupError, AssertionError) as error:
        # A damaged database must not stop the run: METEOR goes on without synonyms and says why.
        return WordNetStatus(path=directory, note=f"WordNet at {directory} could not be read: {error}")


class _NoSynonyms:
    """Stands in for WordNet so nltk's METEOR runs only its exact and stem stages."""

    def synsets(self, word: str) -> list[Any]:
        return []


class _MemoisedSynonyms:
    """WordNet's ``synsets`` with a cache: METEOR looks the same words up for every question."""

    def __init__(self, reader: Any):
        self.synsets = functools.lru_cache(maxsize=1 << 16)(reader.synsets)


class _MemoisedPorterStemmer:
    """nltk's Porter stemmer with a cache; stemming is most of METEOR's time on repeated words."""

    def __init__(self) -> None:
        from nltk.stem.porter import PorterStemmer

        self.stem = functools.lru_cache(maxsize=1 << 16)(PorterStemmer().stem)


# ---------------------------------------------------------------------------------------------------------
# The scorer: every metric for one question, and corpus-level aggregates
# ---------------------------------------------------------------------------------------------------------


def resolve_metrics(names: Iterable[str] | None) -> list[str]:
    """Score keys for metric group names (``rouge``), single keys (``rouge_l``) or ``all``, in report order."""
    if not names:
        return list(ALL_SCORE_KEYS)
    wanted: set[str] = set()
    for raw in names:
        for name in filter(None, (part.strip().lower().replace("-", "_") for part in raw.split(","))):
            if name == "all":
                wanted.update(ALL_SCORE_KEYS)
            elif name in METRIC_GROUPS:
                wanted.update(METRIC_GROUPS[name])
            elif name in ALL_SCORE_KEYS:
                wanted.add(name)
            else:
                raise HarnessError(
                    f"unknown metric {name!r}; choose from {', '.join(METRIC_GROUPS)} "
                    f"or single scores {', '.join(ALL_SCORE_KEYS)}"
                )
    return [key for key in ALL_SCORE_KEYS if key in wanted]


def _group_of(key: str) -> str:
    return next(group for group, keys in METRIC_GROUPS.items() if key in keys)


def _bleu(order: int, *, sentence: bool) -> Any:
    from sacrebleu.metrics import BLEU

    # Lower-cased like every other metric here; 13a tokenisation and exponential smoothing are sacrebleu's
    # defaults. Sentence scores use the effective order, so a two-word answer is not zeroed by 3/4-grams.
    return BLEU(max_ngram_order=order, lowercase=True, effective_order=sentence)


@dataclass
class QAEvaluation:
    """Per-question scores (id -> key -> score) and the aggregate numbers of one predictions file."""

    keys: list[str]
    per_question: dict[str, dict[str, float]]
    aggregate: dict[str, float]
    bleu_corpus: dict[str, Any] = field(default_factory=dict)


class QAScorer:
    """Scores predictions on the chosen metrics; build once per run (ROUGE, BLEU and WordNet set-up is reused)."""

    def __init__(self, metrics: Iterable[str] | None = None, *, synonyms: bool = True):
        self.keys = resolve_metrics(metrics)
        self.groups = list(dict.fromkeys(_group_of(key) for key in self.keys))
        self._rouge = None
        if "rouge" in self.groups:
            from rouge_score import rouge_scorer

            # rouge-score announces its default tokeniser at INFO through absl on every scorer.
            logging.getLogger("absl").setLevel(logging.WARNING)
            self._rouge = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=False)
        self._sentence_bleu = (
            {n: _bleu(n, sentence=True) for n in BLEU_ORDERS} if "bleu" in self.groups else {}
        )
        self.wordnet = WordNetStatus(note="synonym stage turned off")
        if "meteor" in self.groups and synonyms:
            self.wordnet = find_wordnet()
        self._synonyms = (
            _MemoisedSynonyms(self.wordnet.reader) if self.wordnet.reader is not None else _NoSynonyms()
        )
        self._stemmer = _MemoisedPorterStemmer()

    @property
    def meteor_stages(self) -> list[str]:
        return ["exact", "stem", "synonym"] if self.wordnet.reader is not None else ["exact", "stem"]

    def score(self, record: QARecord) -> dict[str, float]:
        """Every chosen score for one question; all 0.0 for an empty prediction."""
        if record.is_empty:
            return dict.fromkeys(self.keys, 0.0)
        prediction, golds = record.prediction, record.golds
        scores: dict[str, float] = {}
        for group in self.groups:
            if group == "em":
                scores["em"] = exact_match(prediction, golds)
            elif group == "acc":
                scores["acc"] = accuracy(prediction, golds)
            elif group == "string_em":
                scores["string_em"] = string_em(prediction, record.gold_groups)
            elif group == "cover_em":
                scores["cover_em"] = cover_em(prediction, golds)
            elif group == "f1":
                scores["f1"] = token_f1(prediction, golds)
            elif group == "rouge":
                best = self._rouge.score_multi(golds, prediction)
                for key, name in zip(METRIC_GROUPS["rouge"], ("rouge1", "rouge2", "rougeL"), strict=True):
                    scores[key] = best[name].fmeasure
            elif group == "bleu":
                for n, metric in self._sentence_bleu.items():
                    scores[f"bleu_{n}"] = metric.sentence_score(prediction, golds).score / 100.0
            elif group == "meteor":
                scores["meteor"] = self.meteor(prediction, golds)
            elif group == "diversity":
                for n in DIVERSITY_ORDERS:
                    scores[f"distinct_{n}"] = distinct_n([prediction], n)
        return {key: scores[key] for key in self.keys}

    def meteor(self, prediction: str, golds: Sequence[str]) -> float:
        """nltk's METEOR (best over golds) on wordpunct tokens; synonyms only when WordNet was found."""
        from nltk.tokenize import wordpunct_tokenize
        from nltk.translate.meteor_score import meteor_score

        references = [wordpunct_tokenize(gold) for gold in golds]
        return meteor_score(
            references,
            wordpunct_tokenize(prediction),
            stemmer=self._stemmer,
            wordnet=self._synonyms,
            **METEOR_PARAMETERS,
        )

    def corpus_bleu(self, records: Sequence[QARecord]) -> dict[str, Any]:
        """sacrebleu corpus BLEU-1..4 (0-1 scale), with n-gram precisions and brevity penalty of BLEU-4.

        Questions with fewer golds than the most-answered one get ``None`` references, which sacrebleu skips.
        """
        hypotheses = [record.prediction for record in records]
        gold_lists = [record.golds for record in records]
        width = max(len(golds) for golds in gold_lists)
        streams = [[golds[i] if i < len(golds) else None for golds in gold_lists] for i in range(width)]
        result: dict[str, Any] = {}
        for n in BLEU_ORDERS:
            metric = _bleu(n, sentence=False)
            score = metric.corpus_score(hypotheses, streams)
            result[f"corpus_bleu_{n}"] = score.score / 100.0
            if n == BLEU_ORDERS[-1]:
                result["precisions"] = [p / 100.0 for p in score.precisions]
                result["brevity_penalty"] = score.bp
                result["hypothesis_length"] = score.sys_len
                result["reference_length"] = score.ref_len
                result["signature"] = str(metric.get_signature())
        return result

    def settings(self) -> dict[str, Any]:
        """What ran, with which settings: stored in every report."""
        described: dict[str, Any] = {"normalisation": NORMALISATION}
        if {"em", "acc", "string_em", "cover_em"} & set(self.groups):
            described["containment"] = (
                "Acc/StringEM: normalised gold is a substring of the normalised prediction; "
                "CoverEM: every token of the normalised gold is a token of the normalised prediction"
            )
        if "rouge" in self.groups:
            described["rouge"] = (
                "rouge-score F1 (rouge1, rouge2, rougeL), best gold, no stemmer; its tokeniser lower-cases and "
                "keeps only a-z and 0-9, so text in other scripts scores 0"
            )
        if "bleu" in self.groups:
            described["bleu"] = {
                "library": "sacrebleu",
                # The reference count in a signature is per call; here it varies by question.
                "sentence_signature": re.sub(
                    r"nrefs:[^|]*\|", "", str(self._sentence_bleu[4].get_signature())
                ),
                "orders": "BLEU-n is the geometric mean of 1..n-gram precisions times the brevity penalty",
                "scale": "0-1 (sacrebleu's score / 100)",
                "references": "all gold aliases of a question (variable count)",
            }
        if "meteor" in self.groups:
            described["meteor"] = {
                "library": "nltk.translate.meteor_score",
                "stages": self.meteor_stages,
                "wordnet": self.wordnet.describe(),
                "tokeniser": "nltk wordpunct_tokenize, lower-cased",
                "synonym_lookup": "on Porter stems of the words the exact and stem stages left (nltk's order)",
                "short_answers": "the fragmentation penalty caps a one-word exact match at 0.5",
                **METEOR_PARAMETERS,
            }
        if "diversity" in self.groups:
            described["diversity"] = (
                "distinct-n = unique n-grams / total n-grams; tokens lower-cased, punctuation removed, "
                "articles kept; per question and over all predictions"
            )
        described["empty_prediction"] = "scored 0 on every metric"
        return described

    def evaluate(self, records: Sequence[QARecord]) -> QAEvaluation:
        """Per-question scores, their means, and the corpus-level BLEU and distinct-n."""
        per_question = {record.qid: self.score(record) for record in records}
        aggregate = {
            key: sum(scores[key] for scores in per_question.values()) / len(records) for key in self.keys
        }
        bleu_corpus: dict[str, Any] = {}
        if "bleu" in self.groups:
            bleu_corpus = self.corpus_bleu(records)
            aggregate.update({f"corpus_bleu_{n}": bleu_corpus[f"corpus_bleu_{n}"] for n in BLEU_ORDERS})
        if "diversity" in self.groups:
            predictions = [record.prediction for record in records]
            aggregate.update({f"corpus_distinct_{n}": distinct_n(predictions, n) for n in DIVERSITY_ORDERS})
        return QAEvaluation(self.keys, per_question, aggregate, bleu_corpus)

"""Generation metrics for RAG answers, per question and in aggregate.

Answer-matching metrics (EM, Acc, StringEM, CoverEM, token F1) and ROUGE follow the chosen answer-metric
profile (:mod:`harness.qa.answers.profiles`: squad, ultrarag or flashrag) and take the best gold. BLEU and METEOR
come from their reference libraries (``sacrebleu``, ``nltk``). CJK text is scored per character
(:mod:`harness.qa.answers.tokenize`). :meth:`QAScorer.settings` records the profile and every setting, so a report
says exactly what ran. An empty prediction scores 0 on every metric.
"""

from __future__ import annotations

import functools
import io
import os
import re
import string
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.qa.answers.predictions import QARecord
from harness.qa.answers.profiles import EMPTY_GOLD_METRICS, EMPTY_GOLD_RULE, AnswerProfile, get_profile
from harness.qa.answers.tokenize import CJK_RULE, space_cjk, split_cjk_tokens

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
# Metric group -> its name in the tokenisation line.
_TOKENISED = {
    "string_em": "StringEM",
    "cover_em": "CoverEM",
    "f1": "F1",
    "rouge": "ROUGE",
    "bleu": "BLEU",
    "meteor": "METEOR",
    "diversity": "distinct-n",
}


def _strip_punctuation(text: str) -> str:
    return "".join(char for char in text if char not in _PUNCTUATION)


# ---------------------------------------------------------------------------------------------------------
# Diversity (distinct-n)
# ---------------------------------------------------------------------------------------------------------


def diversity_tokens(text: str) -> list[str]:
    """Tokens for distinct-n: lower-cased, punctuation removed, split on whitespace; articles are kept.

    Articles stay because a repeated "the" is exactly the repetition distinct-n measures. CJK characters
    count one each.
    """
    return split_cjk_tokens(_strip_punctuation(text.lower()).split())


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

    def __init__(
        self, metrics: Iterable[str] | None = None, *, synonyms: bool = True, profile: str | None = None
    ):
        self.keys = resolve_metrics(metrics)
        self.groups = list(dict.fromkeys(_group_of(key) for key in self.keys))
        self.profile: AnswerProfile = get_profile(profile)
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
        prediction, golds, profile = record.prediction, record.golds, self.profile
        scores: dict[str, float] = {}
        for group in self.groups:
            if group == "em":
                scores["em"] = profile.em(prediction, golds)
            elif group == "acc":
                scores["acc"] = profile.acc(prediction, golds)
            elif group == "string_em":
                scores["string_em"] = profile.string_em(prediction, record.gold_groups)
            elif group == "cover_em":
                scores["cover_em"] = profile.cover_em(prediction, golds)
            elif group == "f1":
                scores["f1"] = profile.f1(prediction, golds)
            elif group == "rouge":
                scores.update(zip(METRIC_GROUPS["rouge"], profile.rouge(prediction, golds), strict=True))
            elif group == "bleu":
                scores.update(self.sentence_bleu(prediction, golds))
            elif group == "meteor":
                scores["meteor"] = self.meteor(prediction, golds)
            elif group == "diversity":
                for n in DIVERSITY_ORDERS:
                    scores[f"distinct_{n}"] = distinct_n([prediction], n)
        return {key: scores[key] for key in self.keys}

    def sentence_bleu(self, prediction: str, golds: Sequence[str]) -> dict[str, float]:
        """BLEU-1..4 of one answer: the profile's own BLEU, else sacrebleu's sentence BLEU."""
        scores: dict[str, float] = {}
        spaced = [space_cjk(gold) for gold in golds]
        for n, metric in self._sentence_bleu.items():
            own = self.profile.bleu([prediction], [golds], n)
            if own is not None:
                scores[f"bleu_{n}"] = own.score
            else:
                scores[f"bleu_{n}"] = metric.sentence_score(space_cjk(prediction), spaced).score / 100.0
        return scores

    def meteor(self, prediction: str, golds: Sequence[str]) -> float:
        """nltk's METEOR (best over golds) on wordpunct tokens; synonyms only when WordNet was found."""
        from nltk.tokenize import wordpunct_tokenize
        from nltk.translate.meteor_score import meteor_score

        references = [wordpunct_tokenize(space_cjk(gold)) for gold in golds]
        return meteor_score(
            references,
            wordpunct_tokenize(space_cjk(prediction)),
            stemmer=self._stemmer,
            wordnet=self._synonyms,
            **METEOR_PARAMETERS,
        )

    def corpus_bleu(self, records: Sequence[QARecord]) -> dict[str, Any]:
        """sacrebleu corpus BLEU-1..4 (0-1 scale), with n-gram precisions and brevity penalty of BLEU-4.

        Questions with fewer golds than the most-answered one get ``None`` references, which sacrebleu skips.
        """
        if self.profile.own_bleu:
            return self._profile_corpus_bleu(records)
        hypotheses = [space_cjk(record.prediction) for record in records]
        gold_lists = [[space_cjk(gold) for gold in record.golds] for record in records]
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

    def _profile_corpus_bleu(self, records: Sequence[QARecord]) -> dict[str, Any]:
        """Corpus BLEU-1..4 by the profile's own definition, with BLEU-4's precisions and brevity penalty."""
        predictions = [record.prediction for record in records]
        gold_lists = [record.golds for record in records]
        result: dict[str, Any] = {}
        for n in BLEU_ORDERS:
            stats = self.profile.bleu(predictions, gold_lists, n)
            result[f"corpus_bleu_{n}"] = stats.score
        result.update(
            precisions=stats.precisions,
            brevity_penalty=stats.brevity_penalty,
            hypothesis_length=stats.hypothesis_length,
            reference_length=stats.reference_length,
            signature=f"{self.profile.name} BLEU (13a tokens, case kept, no smoothing, shortest gold length)",
        )
        return result

    def tokenisation(self) -> str:
        """How the chosen token-based metrics split text, beginning with the CJK rule, and where each departs
        from the profile's tool (the stdout line that names every departure)."""
        profile = self.profile
        parts = [CJK_RULE]
        for group in self.groups:
            if group in profile.tokens:
                parts.append(f"{_TOKENISED[group]}: {profile.tokens[group]}")
            if group in profile.departures:
                parts.append(
                    f"{_TOKENISED.get(group, group)} departs from {profile.tool}: {profile.departures[group]}"
                )
        return "; ".join(parts)

    def departures(self) -> dict[str, str]:
        """Each chosen metric whose numbers differ from the profile's tool (or sources), and why."""
        return {
            group: self.profile.departures[group] for group in self.groups if group in self.profile.departures
        }

    def settings(self) -> dict[str, Any]:
        """What ran, with which settings: stored in every report."""
        definitions = self.profile.describe()
        described: dict[str, Any] = {
            "profile": self.profile.name,
            "profile_summary": definitions["summary"],
            "normalisation": definitions["normalisation"],
            "definitions": {group: definitions[group] for group in self.groups if group in definitions},
            "tokenisation": self.tokenisation(),
            "departures": self.departures(),
            "empty_gold": f"{EMPTY_GOLD_RULE}; {self.profile.empty_gold_departure}",
        }
        if "bleu" in self.groups and self.profile.own_bleu:
            described["bleu"] = {
                "definition": self.profile.definitions["bleu"],
                "orders": "BLEU-n is the geometric mean of 1..n-gram precisions times the brevity penalty",
                "scale": "0-1",
                "references": "all gold aliases of a question",
            }
        elif "bleu" in self.groups:
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

    def empty_gold_ids(self, records: Sequence[QARecord]) -> list[str]:
        """Questions with a gold alias that normalises to nothing under the profile (it matches nothing)."""
        if not set(EMPTY_GOLD_METRICS) & set(self.groups):
            return []
        return [record.qid for record in records if not all(map(self.profile.normalise, record.golds))]

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

"""Answer-metric profiles: the same metric names as SQuAD/ALCE, UltraRAG and FlashRAG define them.

"EM", "F1" or "ROUGE-L" mean different things in different tools, so a number is only comparable with a
paper when it was computed the paper's way. Each profile reproduces one tool's normalisation and metric
definitions, written from that tool's published source:

- ``squad`` (the default): SQuAD v1.1 normalisation and token F1, ALCE/ASQA's StringEM, rouge-score.
- ``ultrarag``: UltraRAG's evaluation server (``servers/evaluation/src/evaluation.py``).
- ``flashrag``: FlashRAG's evaluator (``flashrag/evaluator/metrics.py`` and ``utils.py``).

A tool profile gives its tool's number on every metric and every script except where its ``departures`` say
otherwise, and every report states them. Two rules hold in every profile, where the tools differ or fail: CJK
text is scored per character (:mod:`harness.qa.answers.tokenize`), and a gold alias that normalises to nothing
never matches (``EMPTY_GOLD_RULE``). FlashRAG's ROUGE and BLEU also give 0 where FlashRAG stops with an error.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.core.errors import HarnessError
from harness.qa.answers.tokenize import rouge_score_tokens, space_cjk, split_cjk_tokens, word_tokens

DEFAULT_PROFILE = "squad"
ROUGE_KEYS = ("rouge_1", "rouge_2", "rouge_l")
# The metrics the empty-gold rule changes, in EMPTY_GOLD_RULE's order.
EMPTY_GOLD_METRICS = ("em", "acc", "string_em", "cover_em", "f1")
EMPTY_GOLD_RULE = (
    "a gold alias that normalises to nothing (e.g. 'The', '!!!') matches no prediction: it scores 0 on EM, "
    "Acc, StringEM, CoverEM and F1 (and still counts in StringEM's denominator)"
)

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ASCII_PUNCTUATION = frozenset(string.punctuation)
# UltraRAG also replaces typographic quotes and the acute accent; the backtick is already ASCII punctuation.
_ULTRARAG_PUNCTUATION = _ASCII_PUNCTUATION | {"\u2018", "\u2019", "\u00b4"}
_ULTRARAG_BOOLEANS = {"True": "yes", "False": "no"}
_FLASHRAG_SPECIAL = frozenset({"yes", "no", "noanswer"})

RougeScores = tuple[float, float, float]


# ---------------------------------------------------------------------------------------------------------
# Normalisations
# ---------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 16)
def normalize_answer(text: str) -> str:
    """SQuAD v1.1 (also FlashRAG's): lower-case, drop ASCII punctuation, drop a/an/the, collapse whitespace."""
    no_punctuation = "".join(char for char in text.lower() if char not in _ASCII_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", no_punctuation).split())


@functools.lru_cache(maxsize=1 << 16)
def normalize_ultrarag(text: str) -> str:
    """UltraRAG: whole answer "True"/"False" -> yes/no, "_" -> space, lower-case, punctuation -> space,
    drop a/an/the, collapse whitespace.

    Punctuation becomes a space rather than vanishing, so "x-y" is two words "x y" (SQuAD: one word "xy").
    """
    text = _ULTRARAG_BOOLEANS.get(text, text).replace("_", " ").lower()
    text = "".join(" " if char in _ULTRARAG_PUNCTUATION else char for char in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


# ---------------------------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------------------------


def answer_tokens(normalised: str) -> list[str]:
    """F1 tokens of normalised text: whitespace-separated words, CJK characters one each."""
    return split_cjk_tokens(normalised.split())


def _f1(predicted: Sequence[str], gold: Sequence[str]) -> float:
    """Token F1 of two bags of tokens; 0 when either is empty (the empty-gold rule)."""
    if not predicted or not gold:
        return 0.0
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


class _MemoisedPorter:
    """nltk's Porter stemmer (rouge-score's) with a cache: stemming is most of ROUGE's time on repeated words."""

    def __init__(self) -> None:
        from nltk.stem import porter

        self.stem = functools.lru_cache(maxsize=1 << 16)(porter.PorterStemmer().stem)


def _rouge_score_scorer(tokenise: Callable[[str], list[str]]) -> Any:
    """rouge-score's ROUGE-1/2/L over the profile's tokens."""
    from rouge_score import rouge_scorer, tokenizers

    class ProfileTokenizer(tokenizers.Tokenizer):
        def tokenize(self, text: str) -> list[str]:
            return tokenise(text)

    # rouge-score announces its default tokeniser at INFO through absl on every scorer.
    logging.getLogger("absl").setLevel(logging.WARNING)
    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], tokenizer=ProfileTokenizer())


def _best_rouge(scorer: Any, golds: Sequence[str], prediction: str) -> RougeScores:
    """Each ROUGE variant's best F-measure over the golds (rouge-score's ``score_multi`` picks the same)."""
    scores = [scorer.score(gold, prediction) for gold in golds]
    return tuple(  # type: ignore[return-value]
        max((score[name].fmeasure for score in scores), default=0.0)
        for name in ("rouge1", "rouge2", "rougeL")
    )


# ---------------------------------------------------------------------------------------------------------
# Profiles
# ---------------------------------------------------------------------------------------------------------


class AnswerProfile:
    """The ``squad`` profile; the tool profiles override what their tool defines differently.

    Every metric takes the raw prediction and golds (a non-empty prediction; the scorer gives an empty one
    0 everywhere) and returns the best score over the golds.
    """

    name = "squad"
    summary = "SQuAD v1.1 normalisation and token F1, ALCE/ASQA StringEM, rouge-score without stemming"
    definitions: dict[str, str] = {
        "normalisation": "SQuAD v1.1: lower-case, remove ASCII punctuation, remove a/an/the, collapse whitespace",
        "em": "normalised prediction equals a normalised gold",
        "acc": "a normalised gold is a substring of the normalised prediction (gold '1' is in '1972')",
        "string_em": "ALCE/ASQA: share of gold groups with an alias contained in the normalised prediction; "
        "a flat alias list is one group, so StringEM = Acc",
        "cover_em": "every token of a normalised gold is a token of the normalised prediction",
        "f1": "SQuAD token F1 (bag of tokens) of the normalised texts",
        "rouge": "rouge-score F-measure of ROUGE-1/2/L on the raw texts, lower-cased, no stemming",
    }
    # How each token-based metric splits text (after the CJK rule), for the report's tokenisation line.
    tokens: dict[str, str] = {
        "cover_em": "whitespace words of the normalised text (CJK not split)",
        "f1": "whitespace words of the normalised text",
        "rouge": "lower-cased runs of letters, marks and digits of any script",
        "bleu": "sacrebleu 13a, lower-cased",
        "meteor": "nltk wordpunct",
        "diversity": "whitespace words",
    }
    # Where this profile's numbers differ from the definition it is named after, and why; the empty-gold
    # rule has its own line. The squad profile is the harness's own and departs on purpose.
    tool = "its sources"
    departures: dict[str, str] = {
        "f1": "CJK characters are one token each (the SQuAD script keeps a CJK run as one word)",
        "rouge": "words of any script are kept whole and CJK characters are one token each; rouge-score's "
        "own tokeniser keeps only a-z and 0-9 (Zürich -> z, rich; Cyrillic, Arabic and CJK dropped)",
        "bleu": "CJK characters are one token each (13a keeps a CJK run as one token)",
        "meteor": "CJK characters are one token each (wordpunct keeps a CJK run as one token)",
        "diversity": "CJK characters are one token each",
    }
    # What the sources do with a gold that normalises to nothing, where EMPTY_GOLD_RULE departs from them.
    empty_gold_departure = (
        "the SQuAD script gives such a gold EM 1 when the answer also normalises to nothing, and ALCE's "
        "StringEM finds it in any answer"
    )
    own_bleu = False  # True when :meth:`bleu` replaces the harness's sacrebleu BLEU
    normalise: Callable[[str], str] = staticmethod(normalize_answer)

    def __init__(self) -> None:
        self._rouge: Any = None

    def describe(self) -> dict[str, Any]:
        """The profile's name, summary, every metric's definition and departures: stored in every report."""
        return {"name": self.name, "summary": self.summary, **self.definitions, "departures": self.departures}

    def _golds(self, golds: Sequence[str]) -> list[str]:
        """Normalised golds, without those that normalise to nothing (they never match)."""
        return [gold for gold in map(self.normalise, golds) if gold]

    def em(self, prediction: str, golds: Sequence[str]) -> float:
        normalised = self.normalise(prediction)
        return float(normalised in self._golds(golds))

    def acc(self, prediction: str, golds: Sequence[str]) -> float:
        normalised = self.normalise(prediction)
        return float(any(gold in normalised for gold in self._golds(golds)))

    def string_em(self, prediction: str, gold_groups: Sequence[Sequence[str]]) -> float:
        if not gold_groups:
            return 0.0
        return sum(self.acc(prediction, group) for group in gold_groups) / len(gold_groups)

    def cover_em(self, prediction: str, golds: Sequence[str]) -> float:
        predicted = set(self.normalise(prediction).split())
        return float(any(all(token in predicted for token in gold.split()) for gold in self._golds(golds)))

    def f1(self, prediction: str, golds: Sequence[str]) -> float:
        predicted = answer_tokens(self.normalise(prediction))
        return max((_f1(predicted, answer_tokens(gold)) for gold in self._golds(golds)), default=0.0)

    def rouge(self, prediction: str, golds: Sequence[str]) -> RougeScores:
        if self._rouge is None:
            self._rouge = _rouge_score_scorer(word_tokens)
        return _best_rouge(self._rouge, golds, prediction)

    def bleu(
        self, predictions: Sequence[str], gold_lists: Sequence[Sequence[str]], order: int
    ) -> BleuStats | None:
        """The profile's own BLEU over these questions, or ``None`` for the harness's (sacrebleu)."""
        return None


class UltraRAGProfile(AnswerProfile):
    """UltraRAG's evaluation server: its own normalisation everywhere, StringEM as equal golds, stemmed ROUGE."""

    name = "ultrarag"
    summary = (
        "UltraRAG evaluation server: punctuation replaced by spaces, True/False read as yes/no, StringEM is "
        "the share of golds equal to the prediction, ROUGE on normalised text with Porter stemming"
    )
    definitions = {
        **AnswerProfile.definitions,
        "normalisation": "UltraRAG: an answer that is exactly 'True'/'False' becomes yes/no, '_' and punctuation "
        "(ASCII plus ‘ ’ ´) become spaces, lower-case, remove a/an/the, collapse whitespace",
        "string_em": "UltraRAG: share of the gold aliases (nested groups flattened, repeats kept) equal to the "
        "normalised prediction; gold '1' vs '1972' scores 0",
        "f1": "token F1 of the UltraRAG-normalised texts",
        "rouge": "rouge-score F-measure of ROUGE-1/2/L between the UltraRAG-normalised texts, rouge-score's "
        "own tokens, Porter stemming of words longer than 3 characters",
    }
    normalise = staticmethod(normalize_ultrarag)
    tokens = {
        **AnswerProfile.tokens,
        "rouge": "rouge-score's own tokens of the normalised text, as UltraRAG: lower-cased runs of a-z and 0-9 "
        "(Zürich -> z, rich; Cyrillic, Arabic and emoji dropped), Porter-stemmed above 3 characters",
    }
    tool = "UltraRAG"
    empty_gold_departure = (
        "UltraRAG gives such a gold EM 1 (and counts it in StringEM) when the answer also normalises to "
        "nothing, Acc 1 against any other answer and CoverEM 1 against any answer"
    )
    departures = {
        "f1": "CJK characters are one token each (UltraRAG keeps a CJK run as one word)",
        "rouge": "CJK characters are one token each (rouge-score drops them, so UltraRAG scores Chinese 0)",
        **{
            metric: f"not an UltraRAG metric: the squad profile's, where {why}"
            for metric, why in AnswerProfile.departures.items()
            if metric in ("bleu", "meteor", "diversity")
        },
    }

    def string_em(self, prediction: str, gold_groups: Sequence[Sequence[str]]) -> float:
        golds = [alias for group in gold_groups for alias in group]
        if not golds:
            return 0.0
        normalised = self.normalise(prediction)
        return sum(gold == normalised for gold in map(self.normalise, golds) if gold) / len(golds)

    def rouge(self, prediction: str, golds: Sequence[str]) -> RougeScores:
        if self._rouge is None:
            stemmer = _MemoisedPorter()
            self._rouge = _rouge_score_scorer(lambda text: rouge_score_tokens(text, stemmer))
        return _best_rouge(self._rouge, [self.normalise(gold) for gold in golds], self.normalise(prediction))


class FlashRAGProfile(AnswerProfile):
    """FlashRAG's evaluator: SQuAD normalisation, F1 with its yes/no/noanswer rule, case-sensitive ROUGE."""

    name = "flashrag"
    summary = (
        "FlashRAG evaluator: SQuAD normalisation, F1 scores 0 when either side is yes/no/noanswer and they "
        "differ, ROUGE of the 'rouge' package on raw case-sensitive text"
    )
    definitions = {
        **AnswerProfile.definitions,
        "normalisation": "FlashRAG (the same as SQuAD v1.1): lower-case, remove ASCII punctuation, remove "
        "a/an/the, collapse whitespace",
        "string_em": "not a FlashRAG metric: the squad profile's (ALCE/ASQA) definition",
        "cover_em": "not a FlashRAG metric: the squad profile's definition",
        "f1": "token F1 of the normalised texts; a gold is skipped (0) when the normalised prediction or gold "
        "is 'yes', 'no' or 'noanswer' and the two differ",
        "bleu": "FlashRAG's BLEU: 13a tokens with case kept, n-gram counts clipped by the most any gold has, "
        "no smoothing (0 when a precision is 0), brevity penalty against the shortest gold",
        "rouge": "the 'rouge' package's F (2PR/(P+R+1e-8)) on the raw texts: case-sensitive, split into "
        "sentences at '.', words at spaces, n-grams counted once (sets), ROUGE-L as union-LCS over "
        "sentences divided by distinct words; text with no sentence scores 0 (FlashRAG stops with an error)",
    }
    tokens = {
        **AnswerProfile.tokens,
        "rouge": "words between spaces, case kept, sentences split at '.', as FlashRAG",
        "bleu": "13a (FlashRAG's copy of sacrebleu's), case kept",
    }
    tool = "FlashRAG"
    empty_gold_departure = "FlashRAG gives such a gold EM 1 when the answer also normalises to nothing and Acc 1 against any answer"
    departures = {
        "f1": "CJK characters are one token each (FlashRAG keeps a CJK run as one word)",
        "rouge": "CJK characters are one token each (the 'rouge' package splits only at spaces); text with no "
        "sentence (empty, or only '.') scores 0 where FlashRAG stops with an error",
        "bleu": "CJK characters are one token each (13a keeps a CJK run as one token); 0 where FlashRAG "
        "divides by zero (an answer, or a question's shortest gold, without a token)",
        "string_em": "not a FlashRAG metric: the squad profile's",
        "cover_em": "not a FlashRAG metric: the squad profile's",
        **{
            metric: f"not a FlashRAG metric: the squad profile's, where {AnswerProfile.departures[metric]}"
            for metric in ("meteor", "diversity")
        },
    }
    own_bleu = True

    def f1(self, prediction: str, golds: Sequence[str]) -> float:
        normalised = self.normalise(prediction)
        best = 0.0
        for gold in self._golds(golds):
            if normalised != gold and (normalised in _FLASHRAG_SPECIAL or gold in _FLASHRAG_SPECIAL):
                continue
            best = max(best, _f1(answer_tokens(normalised), answer_tokens(gold)))
        return best

    def bleu(self, predictions: Sequence[str], gold_lists: Sequence[Sequence[str]], order: int) -> BleuStats:
        return flashrag_bleu(predictions, gold_lists, order)

    def rouge(self, prediction: str, golds: Sequence[str]) -> RougeScores:
        scores = [sentence_set_rouge(prediction, gold) for gold in golds]
        return tuple(max((score[i] for score in scores), default=0.0) for i in range(3))  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------------------
# FlashRAG's ROUGE: the definitions of the 'rouge' package (1.0.1), which FlashRAG calls
# ---------------------------------------------------------------------------------------------------------


def _sentences(text: str) -> list[list[str]]:
    """Sentences as word lists: split at '.', pieces that were empty dropped, whitespace collapsed.

    A piece of only spaces survives as one empty word, as in the package ("Paris. " has two sentences).
    """
    return [split_cjk_tokens(" ".join(piece.split()).split(" ")) for piece in text.split(".") if piece]


def _ngram_set(words: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _f_measure(overlap: int, predicted: int, reference: int) -> float:
    precision = overlap / predicted if predicted else 0.0
    recall = overlap / reference if reference else 0.0
    return 2.0 * precision * recall / (precision + recall + 1e-8)


def _lcs_words(reference: Sequence[str], evaluated: Sequence[str]) -> set[str]:
    """The words of one longest common subsequence, traced back the way the package does (ties go left)."""
    rows, cols = len(reference), len(evaluated)
    table = [[0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(1, rows + 1):
        for j in range(1, cols + 1):
            if reference[i - 1] == evaluated[j - 1]:
                table[i][j] = table[i - 1][j - 1] + 1
            else:
                table[i][j] = max(table[i - 1][j], table[i][j - 1])
    words: set[str] = set()
    i, j = rows, cols
    while i and j:
        if reference[i - 1] == evaluated[j - 1]:
            words.add(reference[i - 1])
            i, j = i - 1, j - 1
        elif table[i - 1][j] > table[i][j - 1]:
            i -= 1
        else:
            j -= 1
    return words


def sentence_set_rouge(prediction: str, gold: str) -> RougeScores:
    """ROUGE-1, ROUGE-2 and summary-level ROUGE-L F as the 'rouge' package computes them (FlashRAG's)."""
    predicted, reference = _sentences(prediction), _sentences(gold)
    if not predicted or not reference:
        return (0.0, 0.0, 0.0)
    predicted_words = [word for sentence in predicted for word in sentence]
    reference_words = [word for sentence in reference for word in sentence]
    scores = []
    for n in (1, 2):
        ours, theirs = _ngram_set(predicted_words, n), _ngram_set(reference_words, n)
        scores.append(_f_measure(len(ours & theirs), len(ours), len(theirs)))
    union: set[str] = set()
    for sentence in reference:
        for candidate in predicted:
            union |= _lcs_words(sentence, candidate)
    # Recall and precision divide by the number of distinct words, not all words.
    scores.append(_f_measure(len(union), len(set(predicted_words)), len(set(reference_words))))
    return (scores[0], scores[1], scores[2])


# ---------------------------------------------------------------------------------------------------------
# FlashRAG's BLEU: the NMT-style corpus BLEU it ships, over 13a tokens
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BleuStats:
    """A BLEU score (0-1) with its n-gram precisions, brevity penalty and token counts."""

    score: float
    precisions: list[float]
    brevity_penalty: float
    hypothesis_length: int
    reference_length: int


def _13a_tokens(text: str) -> list[str]:
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    return Tokenizer13a()(space_cjk(text)).split()


def _ngram_counts(tokens: Sequence[str], max_order: int) -> Counter:
    return Counter(
        tuple(tokens[i : i + n]) for n in range(1, max_order + 1) for i in range(len(tokens) - n + 1)
    )


def flashrag_bleu(
    predictions: Sequence[str], gold_lists: Sequence[Sequence[str]], max_order: int
) -> BleuStats:
    """BLEU over these questions as FlashRAG computes it; 0 where FlashRAG would divide by zero."""
    matches, possible = [0] * max_order, [0] * max_order
    hypothesis_length = reference_length = 0
    for prediction, golds in zip(predictions, gold_lists, strict=True):
        hypothesis = _13a_tokens(prediction)
        references = [_13a_tokens(gold) for gold in golds]
        hypothesis_length += len(hypothesis)
        reference_length += min(len(reference) for reference in references)
        # Each n-gram is clipped by the largest count any one gold has (a union of the golds' counts).
        merged: Counter = Counter()
        for reference in references:
            merged |= _ngram_counts(reference, max_order)
        for gram, count in (_ngram_counts(hypothesis, max_order) & merged).items():
            matches[len(gram) - 1] += count
        for n in range(1, max_order + 1):
            possible[n - 1] += max(len(hypothesis) - n + 1, 0)
    precisions = [match / total if total else 0.0 for match, total in zip(matches, possible, strict=True)]
    if not hypothesis_length or not reference_length:
        return BleuStats(0.0, precisions, 0.0, hypothesis_length, reference_length)
    ratio = hypothesis_length / reference_length
    penalty = 1.0 if ratio > 1.0 else math.exp(1 - 1 / ratio)
    mean = math.exp(sum(math.log(p) for p in precisions) / max_order) if min(precisions) > 0 else 0.0
    return BleuStats(mean * penalty, precisions, penalty, hypothesis_length, reference_length)


PROFILES: dict[str, type[AnswerProfile]] = {
    profile.name: profile for profile in (AnswerProfile, UltraRAGProfile, FlashRAGProfile)
}
PROFILE_NAMES = tuple(PROFILES)


def get_profile(name: str | None) -> AnswerProfile:
    """A fresh profile by name (``None`` is the default, squad)."""
    chosen = (name or DEFAULT_PROFILE).strip().lower()
    if chosen not in PROFILES:
        raise HarnessError(f"unknown answer-metric profile {name!r}; choose from {', '.join(PROFILE_NAMES)}")
    return PROFILES[chosen]()

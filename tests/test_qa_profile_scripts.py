"""The ``ultrarag`` and ``flashrag`` answer profiles against their tools, on every script.

References (the tools' metric code, re-expressed here; each calls the same libraries the tool calls):

- UltraRAG, ``servers/evaluation/src/evaluation.py`` (OpenBMB/UltraRAG, commits 3af43e333b99 and a201fc2b6a17,
  identical metric code): ``normalize_text``; EM, Acc, StringEM, CoverEM and F1 on its normalised text; ROUGE
  from ``rouge_score.rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)`` called on
  the normalised gold and prediction, best F over the golds.
- FlashRAG, ``flashrag/evaluator/utils.py`` (RUC-NLPIR/FlashRAG 4912623826c1: ``normalize_answer``) and
  ``flashrag/evaluator/metrics.py`` (ddaeb3ca0966: ExactMatch, Sub_ExactMatch, F1_Score, Rouge_Score, BLEU):
  ROUGE from the ``rouge`` package's ``Rouge().get_scores(pred, gold)[0][key]["f"]`` on the raw text; BLEU
  from ``flashrag/evaluator/_bleu.py`` (785a9012227d: its copy of sacrebleu's 13a tokeniser, returning
  words, and the NMT ``compute_bleu`` without smoothing), one question at a time, ``max_order`` n for BLEU-n.
- squad (the harness's own profile): the SQuAD v1.1 script's normalisation and F1, rouge-score without a
  stemmer.

Random answers are drawn per script (ASCII, accented Latin, Cyrillic, Arabic, CJK, emoji, all mixed) with
punctuation, case, articles and odd whitespace. Every profile must give its tool's number on every metric,
except where the output says the profile departs, for that metric and that reason (``departures`` in the
report's settings and the stdout ``tokenisation`` line, the ``empty gold`` rule, the ``empty prediction``
rule).
"""

from __future__ import annotations

import json
import math
import random
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence

import pytest
from rouge import Rouge
from rouge_score import rouge_scorer

from harness.cli import main
from harness.qa.answers.answer_metrics import QAScorer
from harness.qa.answers.predictions import QARecord
from harness.qa.answers.profiles import EMPTY_GOLD_METRICS
from harness.qa.answers.tokenize import is_cjk

ANSWER_KEYS = ("em", "acc", "string_em", "cover_em", "f1")
ROUGE_KEYS = ("rouge_1", "rouge_2", "rouge_l")
BLEU_KEYS = ("bleu_1", "bleu_2", "bleu_3", "bleu_4")
TOLERANCE = 1e-12  # the same formulas, summed in another order

# ---------------------------------------------------------------------------------------------------------
# The tools' definitions
# ---------------------------------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ULTRARAG_EXCLUDE = set(string.punctuation + "‘’´`")


def ultrarag_normalise(text: str) -> str:
    text = {"True": "yes", "False": "no"}.get(text, text)
    text = text.replace("_", " ").lower()
    text = "".join(" " if char in _ULTRARAG_EXCLUDE else char for char in text)
    return " ".join(_ARTICLES.sub(" ", text).split()).strip()


def _token_f1(predicted: list[str], gold: list[str]) -> float:
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


_ULTRARAG_ROUGE = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)


def ultrarag_scores(prediction: str, golds: Sequence[str]) -> dict[str, float | None]:
    """UltraRAG's ``compute_metrics`` for one question (``golds`` = its flat ``gt`` list)."""
    pred = ultrarag_normalise(prediction)
    normalised = [ultrarag_normalise(gold) for gold in golds]
    pred_tokens = pred.split()
    scores: dict[str, float | None] = {
        "em": float(any(pred == gold for gold in normalised)),
        "acc": float(bool(pred) and any(gold in pred for gold in normalised)),
        "string_em": sum(pred == gold for gold in normalised) / len(normalised),
        "cover_em": float(any(all(t in pred_tokens for t in gold.split()) for gold in normalised)),
        "f1": max(
            _token_f1(pred_tokens, gold.split()) if pred_tokens and gold.split() else 0.0
            for gold in normalised
        ),
    }
    rouge = [_ULTRARAG_ROUGE.score(gold, pred) for gold in normalised]
    for key, name in zip(ROUGE_KEYS, ("rouge1", "rouge2", "rougeL"), strict=True):
        scores[key] = max(score[name].fmeasure for score in rouge)
    return scores


def flashrag_normalise(text: str) -> str:
    text = "".join(char for char in text.lower() if char not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


_FLASHRAG_SPECIAL = ("yes", "no", "noanswer")


def _flashrag_f1(prediction: str, golds: Sequence[str]) -> float:
    best = 0.0
    pred = flashrag_normalise(prediction)
    for gold in map(flashrag_normalise, golds):
        if pred != gold and (pred in _FLASHRAG_SPECIAL or gold in _FLASHRAG_SPECIAL):
            continue
        if pred.split() and gold.split():
            best = max(best, _token_f1(pred.split(), gold.split()))
    return best


_13A_RULES = [
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),
]


def flashrag_13a(line: str) -> list[str]:
    line = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        for entity, char in (("&quot;", '"'), ("&amp;", "&"), ("&lt;", "<"), ("&gt;", ">")):
            line = line.replace(entity, char)
    line = f" {line} "
    for pattern, replacement in _13A_RULES:
        line = pattern.sub(replacement, line)
    return line.split()


def flashrag_bleu(prediction: str, golds: Sequence[str], max_order: int) -> float | None:
    """FlashRAG's per-question BLEU (``compute_bleu`` on one pair); ``None`` where it divides by zero."""
    translation = flashrag_13a(prediction)
    references = [flashrag_13a(gold) for gold in golds]

    def counts(tokens: list[str]) -> Counter:
        return Counter(
            tuple(tokens[i : i + n]) for n in range(1, max_order + 1) for i in range(len(tokens) - n + 1)
        )

    merged: Counter = Counter()
    for reference in references:
        merged |= counts(reference)
    overlap = counts(translation) & merged
    matches = [0] * max_order
    for gram, count in overlap.items():
        matches[len(gram) - 1] += count
    possible = [max(len(translation) - n + 1, 0) for n in range(1, max_order + 1)]
    precisions = [m / p if p > 0 else 0.0 for m, p in zip(matches, possible, strict=True)]
    geo_mean = math.exp(sum(math.log(p) / max_order for p in precisions)) if min(precisions) > 0 else 0
    reference_length = min(len(reference) for reference in references)
    if reference_length == 0 or not translation:
        return None  # ZeroDivisionError in FlashRAG (ratio, or 1 / ratio)
    ratio = len(translation) / reference_length
    return geo_mean * (1.0 if ratio > 1.0 else math.exp(1 - 1.0 / ratio))


_FLASHRAG_ROUGE = Rouge()


def flashrag_scores(prediction: str, golds: Sequence[str]) -> dict[str, float | None]:
    """FlashRAG's metrics for one question; ``None`` where FlashRAG raises instead of giving a number."""
    pred = flashrag_normalise(prediction)
    normalised = [flashrag_normalise(gold) for gold in golds]
    scores: dict[str, float | None] = {
        "em": float(any(gold == pred for gold in normalised)),
        "acc": float(any(gold in pred for gold in normalised)),
        "f1": _flashrag_f1(prediction, golds),
    }
    try:
        rouge = [_FLASHRAG_ROUGE.get_scores(prediction, gold)[0] for gold in golds]
        for key, name in zip(ROUGE_KEYS, ("rouge-1", "rouge-2", "rouge-l"), strict=True):
            scores[key] = max(score[name]["f"] for score in rouge)
    except (ValueError, RecursionError):
        scores.update(dict.fromkeys(ROUGE_KEYS))
    for n, key in enumerate(BLEU_KEYS, 1):
        scores[key] = flashrag_bleu(prediction, golds, n)
    return scores


def flashrag_rouge_or_zero(prediction: str, golds: Sequence[str]) -> dict[str, float]:
    """FlashRAG's ROUGE with 0 for a gold (or prediction) the 'rouge' package cannot read, best over golds."""
    best = dict.fromkeys(ROUGE_KEYS, 0.0)
    for gold in golds:
        try:
            score = _FLASHRAG_ROUGE.get_scores(prediction, gold)[0]
        except ValueError:
            continue
        for key, name in zip(ROUGE_KEYS, ("rouge-1", "rouge-2", "rouge-l"), strict=True):
            best[key] = max(best[key], score[name]["f"])
    return best


_SQUAD_EXCLUDE = set(string.punctuation)
_ROUGE_SCORE = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"])


def squad_normalise(text: str) -> str:
    text = "".join(char for char in text.lower() if char not in _SQUAD_EXCLUDE)
    return " ".join(_ARTICLES.sub(" ", text).split())


def squad_scores(prediction: str, golds: Sequence[str]) -> dict[str, float | None]:
    """The SQuAD v1.1 script's EM and F1 (best gold), substring Acc, and rouge-score without stemming."""
    pred = squad_normalise(prediction)
    normalised = [squad_normalise(gold) for gold in golds]
    scores: dict[str, float | None] = {
        "em": float(pred in normalised),
        "acc": float(any(gold in pred for gold in normalised)),
        "f1": max(_token_f1(pred.split(), gold.split()) for gold in normalised),
    }
    rouge = [_ROUGE_SCORE.score(gold, prediction) for gold in golds]
    for key, name in zip(ROUGE_KEYS, ("rouge1", "rouge2", "rougeL"), strict=True):
        scores[key] = max(score[name].fmeasure for score in rouge)
    return scores


TOOLS: dict[str, tuple[Callable[[str, Sequence[str]], dict[str, float | None]], Callable[[str], str]]] = {
    "ultrarag": (ultrarag_scores, ultrarag_normalise),
    "flashrag": (flashrag_scores, flashrag_normalise),
    "squad": (squad_scores, squad_normalise),
}
KEYS = {
    "ultrarag": (*ANSWER_KEYS, *ROUGE_KEYS),
    "flashrag": ("em", "acc", "f1", *ROUGE_KEYS, *BLEU_KEYS),
    "squad": ("em", "acc", "f1", *ROUGE_KEYS),
}

# ---------------------------------------------------------------------------------------------------------
# Random answers, per script
# ---------------------------------------------------------------------------------------------------------


def _spaced(text: str) -> list[str]:
    return text.split(" ")


# Words per script (split at spaces): accented Latin has decomposed ü, dotted İ and the ligature ﬁ; Arabic has
# vowel marks and Arabic-Indic digits; emoji have skin tones, ZWJ sequences and variation selectors.
WORDS = {
    "ascii": _spaced("Paris run running fast H2O New_York x-y U.S. 1972 it's cats yes"),
    "latin": _spaced(
        "Zürich café Ångström naïve São Paulo Straße Øresund İstanbul façade Dvořák Zu\u0308rich résumé "
        "Łódź Ærø ﬁnal"
    ),
    "cyrillic": _spaced("Москва москва Россия ёлка Київ Ђоковић река бегущий Ёж"),
    "arabic": _spaced("القاهرة مصر كِتَاب السلام عليكم ٢٠٢٤ الْعَرَبِيَّة ، ؟"),
    "cjk": _spaced("北京 首都 東京タワー 서울 中国 2008年 。 、 「北京」 ｶﾀｶﾅ"),
    "emoji": _spaced("😀 👍🏽 👨\u200d👩\u200d👧 ❤️ 🇫🇷 🎉 Paris🎉 ☕ 1️⃣"),
}
COMMON = _spaced("the The a an A and of yes no True False noanswer 1 2008")
# Between words: spaces, a tab, no-break and ideographic spaces, a newline, ASCII and typographic punctuation.
SEPARATORS = [" ", " ", " ", "  ", "\t", "\u00a0", ", ", ". ", ".", "-", "_", "’", "‘", "´", "`", "!", "?"]
SEPARATORS += ["\u3000", "\n", " (", ") ", "'", '"', "…", "·"]
SCRIPTS = (*WORDS, "mixed")
CASES_PER_SCRIPT = 250


def _words(script: str) -> list[str]:
    return [word for words in WORDS.values() for word in words] if script == "mixed" else WORDS[script]


def _recase(rng: random.Random, word: str) -> str:
    return rng.choice([word, word, word.lower(), word.upper(), word.title()])


def _text(rng: random.Random, vocabulary: list[str]) -> str:
    words = [
        _recase(rng, rng.choice(vocabulary if rng.random() < 0.75 else COMMON))
        for _ in range(rng.randint(1, 6))
    ]
    text = words[0]
    for word in words[1:]:
        text += rng.choice(SEPARATORS) + word
    return rng.choice(["", "", " ", ".", "The ", "‘"]) + text + rng.choice(["", "", ".", "!", " ", "。"])


def _gold(rng: random.Random, prediction: str, vocabulary: list[str]) -> str:
    roll = rng.random()
    if roll < 0.2:
        return prediction
    if roll < 0.5:  # some of the prediction's words, maybe re-ordered
        words = prediction.split() or [prediction]
        picked = rng.sample(words, rng.randint(1, len(words)))
        return rng.choice([" ", "-", "_", ", "]).join(picked)
    if roll < 0.55:
        return rng.choice(["The", "!!!", "a", "...", " . ", "an the"])
    return _text(rng, vocabulary)


def random_cases(script: str, count: int = CASES_PER_SCRIPT, seed: int = 34) -> list[tuple[str, list[str]]]:
    rng = random.Random(f"{seed}-{script}")
    vocabulary = _words(script)
    cases = []
    for _ in range(count):
        prediction = _text(rng, vocabulary)
        golds = [_gold(rng, prediction, vocabulary) for _ in range(rng.randint(1, 3))]
        cases.append((prediction, golds))
    return cases


# ---------------------------------------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------------------------------------


def _record(prediction: str, golds: list[str]) -> QARecord:
    return QARecord(qid="q", line=1, gold_groups=(tuple(golds),), prediction=prediction)


def _group(key: str) -> str:
    return "rouge" if key.startswith("rouge") else "bleu" if key.startswith("bleu") else key


def reasons(profile: str, key: str, prediction: str, golds: list[str], tool_value: float | None) -> set[str]:
    """Why a profile may depart from its tool on this metric and question (empty when it must not)."""
    normalise = TOOLS[profile][1]
    found = set()
    if tool_value is None:
        found.add("tool error")
    if not prediction.strip():
        found.add("empty prediction")
    if key in EMPTY_GOLD_METRICS and not all(map(normalise, golds)):
        found.add("empty gold")
    if any(is_cjk(char) for text in (prediction, *golds) for char in text):
        found.add("CJK")
    if profile == "squad" and not all(text.isascii() for text in (prediction, *golds)):
        found.add("non-ASCII")
    return found


def compare(profile: str, cases: list[tuple[str, list[str]]], scorer: QAScorer) -> list[dict]:
    """Every (question, metric) where the profile's number differs from the tool's."""
    tool = TOOLS[profile][0]
    differences = []
    for prediction, golds in cases:
        expected = tool(prediction, golds)
        scores = scorer.score(_record(prediction, golds))
        for key in KEYS[profile]:
            value = expected[key]
            if value is not None and abs(scores[key] - value) <= TOLERANCE:
                continue
            differences.append(
                {
                    "key": key,
                    "prediction": prediction,
                    "golds": golds,
                    "harness": scores[key],
                    "tool": value,
                    "reasons": reasons(profile, key, prediction, golds, value),
                }
            )
    return differences


def scorer_for(profile: str) -> QAScorer:
    groups = {_group(key) for key in KEYS[profile]}
    return QAScorer(sorted(groups), profile=profile, synonyms=False)


# What each reason must be named by in the scorer's settings (the report; the stdout lines say the same).
def _named(settings: dict, key: str, reason: str) -> bool:
    departure = settings["departures"].get(_group(key), "")
    if reason == "empty gold":
        return key in EMPTY_GOLD_METRICS and "normalises to nothing" in settings["empty_gold"]
    if reason == "empty prediction":
        return settings["empty_prediction"] == "scored 0 on every metric"
    if reason == "tool error":
        return "error" in departure or "divides by zero" in departure
    if reason == "CJK":
        return "CJK" in departure
    return "any script" in departure  # squad's ROUGE keeps words of every script


@pytest.fixture(scope="module")
def scorers() -> dict[str, QAScorer]:
    return {profile: scorer_for(profile) for profile in TOOLS}


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("profile", list(TOOLS))
def test_profile_equals_its_tool_on_random_text(scorers, profile: str, script: str) -> None:
    differences = compare(profile, random_cases(script), scorers[profile])
    unexplained = [difference for difference in differences if not difference["reasons"]]
    assert unexplained == []
    settings = scorers[profile].settings()
    unnamed = [
        difference
        for difference in differences
        if not any(_named(settings, difference["key"], reason) for reason in difference["reasons"])
    ]
    assert unnamed == []
    # Where the tool stops with an error, the profile scores the text it cannot read 0 (CJK aside).
    for d in differences:
        if d["tool"] is not None or "CJK" in d["reasons"]:
            continue
        expected = (
            flashrag_rouge_or_zero(d["prediction"], d["golds"])[d["key"]] if "rouge" in d["key"] else 0.0
        )
        assert d["harness"] == pytest.approx(expected, abs=TOLERANCE)
    if script not in ("cjk", "mixed"):  # only the empty-answer rules and tool errors remain
        assert {reason for d in differences for reason in d["reasons"]} <= {
            "empty gold",
            "empty prediction",
            "tool error",
            *(["non-ASCII"] if profile == "squad" else []),
        }


def test_random_cases_reach_every_reason_and_every_tokenisation_path(scorers) -> None:
    # The generator is only a check if it produces the hard inputs: non-ASCII words the tools split or drop,
    # golds that normalise to nothing, text FlashRAG cannot score, and CJK.
    cases = [case for script in SCRIPTS for case in random_cases(script)]
    seen = {reason for d in compare("flashrag", cases, scorers["flashrag"]) for reason in d["reasons"]}
    assert {"CJK", "empty gold", "tool error"} <= seen
    assert sum(prediction == golds[0] for prediction, golds in cases) > 100
    assert any("ü" in prediction for prediction, _ in cases)


# ---------------------------------------------------------------------------------------------------------
# Hand-worked cases per script
# ---------------------------------------------------------------------------------------------------------


def _scores(profile: str, prediction: str, golds: list[str]) -> dict[str, float]:
    keys = [*ANSWER_KEYS, "rouge", "bleu"]
    return QAScorer(keys, profile=profile, synonyms=False).score(_record(prediction, golds))


def _rouge(scores: dict[str, float]) -> tuple[float, ...]:
    return tuple(round(scores[key], 6) for key in ROUGE_KEYS)


def test_zurich() -> None:
    # UltraRAG: normalised "zürich"; rouge-score keeps a-z runs -> z, rich on both sides: 1, 1 (bigram z rich), 1.
    assert _rouge(_scores("ultrarag", "Zürich", ["Zürich"])) == (1, 1, 1)
    assert ultrarag_scores("Zürich", ["Zürich"])["rouge_2"] == 1.0
    # "Zürich" vs "Zurich": z, rich vs zurich -> nothing in common.
    assert _rouge(_scores("ultrarag", "Zürich", ["Zurich"])) == (0, 0, 0)
    # "Zürich Paris" vs "Zürich": z rich pari(s) vs z rich -> R1 P 2/3 R 1 = 0.8; R2 (z rich) 1 of 2 vs 1 -> 2/3.
    assert _rouge(_scores("ultrarag", "Zürich Paris", ["Zürich"])) == (0.8, round(2 / 3, 6), 0.8)
    # FlashRAG: words at spaces, case kept -> "Zürich" = "Zürich": 1, 0 (no bigram), 1 (F = 2/(2+1e-8)).
    assert _rouge(_scores("flashrag", "Zürich", ["Zürich"])) == (1, 0, 1)
    # squad keeps the word whole: one token -> 1, 0, 1 (a named departure from rouge-score's z, rich).
    assert _rouge(_scores("squad", "Zürich", ["Zürich"])) == (1, 0, 1)


def test_cyrillic_arabic_and_emoji() -> None:
    # Cyrillic: UltraRAG's rouge-score drops every letter -> no token -> 0; EM/F1 on normalised text -> 1.
    ultrarag = _scores("ultrarag", "москва", ["Москва"])
    assert _rouge(ultrarag) == (0, 0, 0) and ultrarag["em"] == ultrarag["f1"] == 1.0
    # FlashRAG is case-sensitive: москва != Москва -> 0; squad lower-cases -> 1, 0, 1.
    assert _rouge(_scores("flashrag", "москва", ["Москва"])) == (0, 0, 0)
    assert _rouge(_scores("squad", "москва", ["Москва"])) == (1, 0, 1)
    # Arabic "السلام عليكم" vs "السلام": UltraRAG ROUGE 0 (dropped); FlashRAG words: P 1/2, R 1 -> 2/3, 0, 2/3.
    assert _rouge(_scores("ultrarag", "السلام عليكم", ["السلام"])) == (0, 0, 0)
    flashrag = _scores("flashrag", "السلام عليكم", ["السلام"])
    assert _rouge(flashrag) == (round(2 / 3, 6), 0, round(2 / 3, 6)) and flashrag["f1"] == pytest.approx(
        2 / 3
    )
    # Emoji: "Paris 🎉" vs "Paris". UltraRAG: F1 words paris, 🎉 vs paris -> 2/3; ROUGE drops 🎉 -> 1, 0, 1.
    ultrarag = _scores("ultrarag", "Paris 🎉", ["Paris"])
    assert ultrarag["f1"] == pytest.approx(2 / 3) and _rouge(ultrarag) == (1, 0, 1)
    # FlashRAG: words {Paris, 🎉} vs {Paris} -> 2/3, 0, 2/3; BLEU-1: 13a keeps 🎉 a token -> 1 of 2 -> 0.5.
    flashrag = _scores("flashrag", "Paris 🎉", ["Paris"])
    assert _rouge(flashrag) == (round(2 / 3, 6), 0, round(2 / 3, 6)) and flashrag["bleu_1"] == 0.5


def test_cjk_is_the_named_departure() -> None:
    # 首都是北京 vs 北京: the harness scores CJK per character (F1 = ROUGE-1 = 4/7); the tools do not:
    # UltraRAG F1 sees two different words -> 0 and rouge-score drops them -> 0; FlashRAG likewise 0.
    for profile, tool in (("ultrarag", ultrarag_scores), ("flashrag", flashrag_scores)):
        scores = _scores(profile, "首都是北京", ["北京"])
        assert scores["f1"] == pytest.approx(4 / 7) and tool("首都是北京", ["北京"])["f1"] == 0.0
        departures = scorer_for(profile).settings()["departures"]
        assert "CJK" in departures["f1"] and "CJK" in departures["rouge"]


@pytest.mark.parametrize("script", [script for script in SCRIPTS if script not in ("cjk", "mixed")])
def test_flashrag_corpus_bleu_equals_flashrag(scorers, script: str) -> None:
    # FlashRAG's headline BLEU is compute_bleu over the whole corpus (max_order 4, no smoothing).
    cases = random_cases(script)
    records = [_record(prediction, golds) for prediction, golds in cases]
    ours = scorers["flashrag"].corpus_bleu(records)
    for n in (1, 2, 3, 4):
        expected = _flashrag_corpus_bleu(cases, n)
        assert ours[f"corpus_bleu_{n}"] == pytest.approx(expected, abs=TOLERANCE)


def _flashrag_corpus_bleu(cases: list[tuple[str, list[str]]], max_order: int) -> float:
    """FlashRAG's compute_bleu over a corpus: n-gram matches and lengths pooled, then one BLEU."""
    matches, possible = [0] * max_order, [0] * max_order
    translation_length = reference_length = 0
    for prediction, golds in cases:
        translation = flashrag_13a(prediction)
        references = [flashrag_13a(gold) for gold in golds]
        translation_length += len(translation)
        reference_length += min(len(reference) for reference in references)
        merged: Counter = Counter()
        for reference in references:
            merged |= Counter(
                tuple(reference[i : i + n])
                for n in range(1, max_order + 1)
                for i in range(len(reference) - n + 1)
            )
        grams = Counter(
            tuple(translation[i : i + n])
            for n in range(1, max_order + 1)
            for i in range(len(translation) - n + 1)
        )
        for gram, count in (grams & merged).items():
            matches[len(gram) - 1] += count
        for n in range(1, max_order + 1):
            possible[n - 1] += max(len(translation) - n + 1, 0)
    precisions = [m / p if p else 0.0 for m, p in zip(matches, possible, strict=True)]
    geo_mean = math.exp(sum(math.log(p) / max_order for p in precisions)) if min(precisions) > 0 else 0
    ratio = translation_length / reference_length
    return geo_mean * (1.0 if ratio > 1.0 else math.exp(1 - 1.0 / ratio))


def test_the_output_names_each_departure(tmp_path, capsys) -> None:

    path = tmp_path / "answers.jsonl"
    rows = [{"id": 1, "golden_answers": ["Zürich"], "pred_answer": "Zürich"}]
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    report = tmp_path / "report.json"
    argv = [
        "qa-eval",
        str(path),
        "--metrics",
        "em,f1,rouge",
        "--profile",
        "ultrarag",
        "--output",
        str(report),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "ROUGE: rouge-score's own tokens of the normalised text, as UltraRAG" in out
    assert "ROUGE departs from UltraRAG: CJK characters are one token each" in out
    assert "F1 departs from UltraRAG: CJK characters" in out
    settings = json.loads(report.read_text())["settings"]
    assert set(settings["departures"]) == {
        "f1",
        "rouge",
    }  # EM departs only by the empty-gold rule, its own line
    assert json.loads(report.read_text())["aggregate"]["rouge_2"] == 1.0  # z, rich: UltraRAG's 1, not 0

    argv = ["qa-eval", str(path), "--metrics", "rouge,bleu", "--profile", "flashrag", "--output", str(report)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "ROUGE departs from FlashRAG:" in out and "stops with an error" in out
    assert "BLEU departs from FlashRAG:" in out and "divides by zero" in out

    assert main(["qa-eval", str(path), "--metrics", "rouge", "--output", str(report)]) == 0
    assert "ROUGE departs from its sources: words of any script are kept whole" in capsys.readouterr().out


def test_empty_gold_departure_is_what_the_output_says() -> None:
    # The tools' own numbers for a gold that normalises to nothing, as the empty-gold line states them; every
    # profile scores such a gold 0 instead.
    tool = ultrarag_scores("Paris", ["The"])
    assert (tool["em"], tool["acc"], tool["cover_em"]) == (0.0, 1.0, 1.0)
    assert ultrarag_scores("the", ["The"])["em"] == ultrarag_scores("the", ["The"])["string_em"] == 1.0
    assert ultrarag_scores("the", ["The"])["acc"] == 0.0
    assert flashrag_scores("Paris", ["!!!"])["acc"] == 1.0 and flashrag_scores("The", ["!!!"])["em"] == 1.0
    assert squad_scores("The", ["!!!"])["em"] == 1.0
    for profile in TOOLS:
        scores = _scores(profile, "Paris", ["The"])
        assert [scores[key] for key in EMPTY_GOLD_METRICS] == [0.0] * 5
        line = scorer_for(profile).settings()["empty_gold"]
        assert "EM 1" in line and "when the answer also normalises to nothing" in line

"""Generation metrics on hand-worked examples, and agreement with independent reference implementations."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness.core.errors import HarnessError
from harness.qa.answers.answer_metrics import (
    ALL_SCORE_KEYS,
    QAScorer,
    distinct_n,
    find_wordnet,
    resolve_metrics,
)
from harness.qa.answers.predictions import QARecord
from harness.qa.answers.profiles import get_profile, normalize_answer

SQUAD = get_profile("squad")
exact_match, accuracy, cover_em, string_em, token_f1 = (
    SQUAD.em,
    SQUAD.acc,
    SQUAD.cover_em,
    SQUAD.string_em,
    SQUAD.f1,
)

MOON_GOLDS = ["14 December 1972 UTC", "December 1972"]
MOON_PREDICTION = "December 14, 1973"
NO_ANSWER = "The documents do not provide information about the last moon landing."
GOLD_SCORES = [key for key in ALL_SCORE_KEYS if not key.startswith("distinct")]


def record(prediction: str, golds, qid: str = "q") -> QARecord:
    groups = tuple(tuple(group) for group in golds) if isinstance(golds[0], list) else (tuple(golds),)
    return QARecord(qid=qid, line=1, gold_groups=groups, prediction=prediction)


@pytest.fixture(scope="module")
def scorer() -> QAScorer:
    return QAScorer()


def test_squad_normalisation() -> None:
    assert normalize_answer("  The Quick,  brown FOX! ") == "quick brown fox"
    assert normalize_answer("An apple a day") == "apple day"
    # Articles go only as whole words: "theory" and "another" keep their letters.
    assert normalize_answer("theory of another") == "theory of another"
    assert normalize_answer("U.S.-based") == "usbased"


def test_moon_landing_seed_is_not_exact_but_partial_f1(scorer: QAScorer) -> None:
    assert exact_match(MOON_PREDICTION, MOON_GOLDS) == 0.0
    # Normalised "december 14 1973" vs "14 december 1972 utc": 2 common tokens, P = 2/3, R = 2/4 -> F1 4/7;
    # vs "december 1972": 1 common, P = 1/3, R = 1/2 -> 0.4. The best gold counts.
    assert token_f1(MOON_PREDICTION, MOON_GOLDS) == pytest.approx(4 / 7)
    assert accuracy(MOON_PREDICTION, MOON_GOLDS) == 0.0
    assert cover_em(MOON_PREDICTION, MOON_GOLDS) == 0.0  # "1972" is missing
    scores = scorer.score(record(MOON_PREDICTION, MOON_GOLDS))
    assert scores["em"] == 0.0 and 0.0 < scores["f1"] < 1.0


def test_documents_do_not_provide_scores_zero(scorer: QAScorer) -> None:
    scores = scorer.score(record(NO_ANSWER, MOON_GOLDS))
    assert {key: scores[key] for key in GOLD_SCORES} == dict.fromkeys(GOLD_SCORES, 0.0)


def test_exact_match_and_f1_hand_worked() -> None:
    assert exact_match("the December, 1972.", MOON_GOLDS) == 1.0
    # "cat sat on mat" vs "cat on mat": 3 common, P = 3/4, R = 1 -> 6/7.
    assert token_f1("The cat sat on the mat", ["a cat on a mat"]) == pytest.approx(6 / 7)
    # Repeated tokens count once per occurrence in both (bag of tokens): "paris paris" vs "paris": P 1/2.
    assert token_f1("Paris Paris", ["Paris"]) == pytest.approx(2 / 3)


def test_accuracy_is_substring_of_normalised_text() -> None:
    assert accuracy("It happened in December 1972, at night.", MOON_GOLDS) == 1.0
    assert accuracy("It happened in 1972 in December", MOON_GOLDS) == 0.0  # order matters, unlike CoverEM
    # The reference implementations test plain substrings, so text without spaces works, and "1" is in "1972".
    assert accuracy("北京是中国的首都", ["北京"]) == 1.0
    assert accuracy("In 1972.", ["1"]) == 1.0
    assert accuracy("anything", ["The"]) == 0.0  # a gold that normalises to nothing matches nothing


def test_cover_em_ignores_order_unlike_acc() -> None:
    prediction = "1972, in December"
    assert cover_em(prediction, ["December 1972"]) == 1.0
    assert accuracy(prediction, ["December 1972"]) == 0.0


def test_string_em_counts_groups() -> None:
    groups = [["Paris"], ["Lyon", "Lyons"], ["Nice"]]
    assert string_em("Paris and Lyons", groups) == pytest.approx(2 / 3)
    assert string_em("Marseille", groups) == 0.0
    # A flat list is one group of aliases: StringEM is then Acc.
    flat = record("It was December 1972", MOON_GOLDS)
    assert string_em(flat.prediction, flat.gold_groups) == accuracy(flat.prediction, flat.golds) == 1.0


def test_nested_gold_other_metrics_use_every_alias(scorer: QAScorer) -> None:
    scores = scorer.score(record("Lyons", [["Paris"], ["Lyon", "Lyons"]]))
    assert scores["em"] == 1.0 and scores["f1"] == 1.0
    assert scores["string_em"] == 0.5


def test_bleu_2_cat_example() -> None:
    # Candidate bigrams: the cat, cat sat, sat on, on the, the mat; 3 appear in the reference -> 0.6.
    # Unigrams: 5 of 6 matched (clipped). Equal lengths, so BLEU-2 = sqrt(5/6 * 3/5) = sqrt(1/2).
    example = record("the cat sat on the mat", ["the cat is on the mat"])
    scorer = QAScorer(["bleu"])
    corpus = scorer.corpus_bleu([example])
    assert corpus["precisions"][:2] == pytest.approx([5 / 6, 0.6])
    assert corpus["brevity_penalty"] == 1.0
    assert corpus["corpus_bleu_2"] == pytest.approx(math.sqrt(0.5))
    assert scorer.score(example)["bleu_2"] == pytest.approx(math.sqrt(0.5))
    assert scorer.score(example)["bleu_1"] == pytest.approx(5 / 6)


def test_short_answer_sentence_bleu_uses_effective_order() -> None:
    # A two-word exact answer has no 3- or 4-grams; with the effective order its BLEU-4 is 1, not 0.
    assert QAScorer(["bleu_4"]).score(record("December 1972", MOON_GOLDS)) == {"bleu_4": pytest.approx(1.0)}


def test_diversity_example() -> None:
    text = "the cat was found under the bed"
    assert distinct_n([text], 1) == pytest.approx(6 / 7)
    assert distinct_n([text], 2) == 1.0
    # Over two identical predictions every n-gram repeats; n-grams never span the two texts.
    assert distinct_n([text, text], 1) == pytest.approx(6 / 14)
    assert distinct_n([text, text], 2) == pytest.approx(6 / 12)
    assert distinct_n(["yes"], 2) == 0.0


def test_rouge_hand_worked() -> None:
    # Unigrams: 5 of 6 on both sides; bigrams 3 of 5; LCS "the cat on the mat" = 5 of 6.
    scores = QAScorer(["rouge"]).score(record("the cat sat on the mat", ["the cat is on the mat"]))
    assert scores == pytest.approx({"rouge_1": 5 / 6, "rouge_2": 0.6, "rouge_l": 5 / 6})


def test_rouge_takes_best_gold_per_variant(scorer: QAScorer) -> None:
    scores = scorer.score(record(MOON_PREDICTION, MOON_GOLDS))
    # rouge-1 is best against the long gold (2 of 3 / 2 of 4 -> 4/7), rouge-L against the short one
    # (LCS 1: P 1/3, R 1/2 -> 0.4 beats 1/3 and 1/4 -> 2/7).
    assert scores["rouge_1"] == pytest.approx(4 / 7)
    assert scores["rouge_l"] == pytest.approx(0.4)


def test_empty_prediction_scores_zero_everywhere(scorer: QAScorer) -> None:
    scores = scorer.score(record("   ", ["The"]))  # even a gold that normalises to "" cannot match it
    assert scores == dict.fromkeys(ALL_SCORE_KEYS, 0.0)


def test_meteor_stages_hand_worked() -> None:
    with_synonyms = QAScorer(["meteor"])
    assert with_synonyms.meteor_stages == ["exact", "stem", "synonym"], (
        f"WordNet not found ({with_synonyms.wordnet.note}); `make setup` installs Debian's wordnet-base"
    )
    without = QAScorer(["meteor"], synonyms=False)
    assert without.meteor_stages == ["exact", "stem"]
    # "car" -> "auto" only through WordNet (car.n.01). All 3 words matched in one chunk:
    # P = R = 1, penalty 0.5 * (1/3)^3. Without synonyms: 2 of 3 matched, one chunk, penalty 0.5 * (1/2)^3.
    # (nltk looks synonyms up after stemming, so "automobile" -> "automobil" would find no synonym.)
    example = record("a fast car", ["a fast auto"])
    assert with_synonyms.score(example)["meteor"] == pytest.approx(1 - 0.5 / 27)
    assert without.score(example)["meteor"] == pytest.approx((1 - 0.5 / 8) * 2 / 3)
    # One-word exact answer: P = R = 1 but one chunk per match, so the penalty is 0.5 * (1/1)^3.
    assert without.score(record("1972", ["1972"]))["meteor"] == pytest.approx(0.5)
    # The stem stage: "runs" and "running" share the Porter stem "run".
    assert without.score(record("he runs", ["he running"]))["meteor"] == pytest.approx(1 - 0.5 / 8)


def test_meteor_without_wordnet_reports_and_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import nltk.data

    import harness.qa.answers.answer_metrics as qa_metrics

    def not_downloaded(resource: str) -> None:
        raise LookupError(resource)

    monkeypatch.setattr(nltk.data, "find", not_downloaded)
    monkeypatch.setattr(qa_metrics, "SYSTEM_WORDNET_DIRS", (str(tmp_path / "nowhere"),))
    monkeypatch.delenv(qa_metrics.WORDNET_ENV, raising=False)
    status = find_wordnet()
    assert status.reader is None and "WordNet not found" in status.note
    scorer = QAScorer(["meteor"])
    assert scorer.meteor_stages == ["exact", "stem"]
    assert scorer.settings()["meteor"]["stages"] == ["exact", "stem"]
    assert scorer.score(record("a fast car", ["a fast auto"]))["meteor"] == pytest.approx(0.625)


def test_wordnet_env_pointing_nowhere_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HARNESS_WORDNET_DIR", str(tmp_path))
    with pytest.raises(HarnessError, match="not a WordNet database folder"):
        find_wordnet()


def test_resolve_metrics_accepts_groups_and_keys() -> None:
    assert resolve_metrics(["f1,rouge"]) == ["f1", "rouge_1", "rouge_2", "rouge_l"]
    assert resolve_metrics(["ROUGE-L", "em"]) == ["em", "rouge_l"]
    assert resolve_metrics(None) == list(ALL_SCORE_KEYS)
    with pytest.raises(HarnessError, match="unknown metric 'bleurt'"):
        resolve_metrics(["bleurt"])


def test_evaluate_aggregates(scorer: QAScorer) -> None:
    records = [
        record("December 1972", MOON_GOLDS, "a"),
        record(NO_ANSWER, MOON_GOLDS, "b"),
        record("", MOON_GOLDS, "c"),
    ]
    result = scorer.evaluate(records)
    assert result.aggregate["em"] == pytest.approx(1 / 3)
    assert result.aggregate["f1"] == pytest.approx(1 / 3)
    assert set(result.per_question) == {"a", "b", "c"}
    assert 0.0 < result.aggregate["corpus_bleu_4"] < 1.0
    # Distinct unigrams over all predictions: "december 1972" + 11 distinct words of NO_ANSWER (its "the"
    # appears twice, and "december" does not repeat across).
    no_answer_tokens = NO_ANSWER.lower().replace(".", "").split()
    assert result.aggregate["corpus_distinct_1"] == pytest.approx(
        (2 + len(set(no_answer_tokens))) / (2 + len(no_answer_tokens))
    )


# ---------------------------------------------------------------------------------------------------------
# Agreement with independent implementations on a set of sentences
# ---------------------------------------------------------------------------------------------------------

SENTENCES = [
    ("the quick brown fox jumps over the lazy dog", "the quick brown fox jumped over the lazy dog"),
    ("a man is playing a guitar on the stage", "a man plays the guitar on a stage"),
    ("the first moon landing was in july 1969", "the first crewed moon landing happened in july 1969"),
    ("paris is the capital and largest city of france", "the capital of france is paris"),
    ("water boils at one hundred degrees celsius at sea level", "at sea level water boils at 100 degrees"),
    ("the treaty was signed in the city of versailles", "the treaty of versailles was signed in france"),
]


def test_corpus_bleu_agrees_with_nltk() -> None:
    from nltk.translate.bleu_score import corpus_bleu

    records = [record(hyp, [ref], str(i)) for i, (hyp, ref) in enumerate(SENTENCES)]
    ours = QAScorer(["bleu"]).corpus_bleu(records)
    # Lower-case text without punctuation tokenises the same way in sacrebleu (13a) and by whitespace.
    references = [[ref.split()] for _, ref in SENTENCES]
    hypotheses = [hyp.split() for hyp, _ in SENTENCES]
    for n in (1, 2, 3, 4):
        expected = corpus_bleu(references, hypotheses, weights=tuple([1 / n] * n))
        assert ours[f"corpus_bleu_{n}"] == pytest.approx(expected, abs=1e-9)


def test_rouge_and_meteor_agree_with_their_libraries() -> None:
    from nltk.translate.meteor_score import single_meteor_score
    from rouge_score import rouge_scorer

    reference_rouge = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"])
    scorer = QAScorer(["rouge", "meteor"], synonyms=False)

    class NoSynonyms:
        def synsets(self, word: str) -> list:
            return []

    for hyp, ref in SENTENCES:
        ours = scorer.score(record(hyp, [ref]))
        expected = reference_rouge.score(ref, hyp)
        assert ours["rouge_1"] == pytest.approx(expected["rouge1"].fmeasure)
        assert ours["rouge_2"] == pytest.approx(expected["rouge2"].fmeasure)
        assert ours["rouge_l"] == pytest.approx(expected["rougeL"].fmeasure)
        assert ours["meteor"] == pytest.approx(
            single_meteor_score(ref.split(), hyp.split(), wordnet=NoSynonyms())
        )

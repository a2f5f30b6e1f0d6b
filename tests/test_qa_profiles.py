"""Answer-metric profiles (squad, ultrarag, flashrag) on hand-made cases, worked out by hand.

Every case is scored by each profile through :class:`QAScorer` (the code path ``qa-eval`` runs). The expected
values come from each tool's published definitions, worked in the comments:

- squad: SQuAD v1.1 normalisation (lower-case, drop ASCII punctuation, drop a/an/the), token F1, ALCE/ASQA
  StringEM (share of gold groups with an alias contained), rouge-score ROUGE on the raw text (lower-cased,
  words = runs of letters/digits, no stemming, n-gram counts).
- ultrarag: UltraRAG's normalisation (exact "True"/"False" -> yes/no, "_" and punctuation incl. ‘ ’ ´ become
  spaces, lower-case, drop articles), StringEM = share of golds equal to the prediction, ROUGE of the
  normalised texts with Porter stemming of words longer than 3 letters.
- flashrag: SQuAD normalisation; F1 skips a gold when either normalised side is yes/no/noanswer and they
  differ; ROUGE of the 'rouge' package on raw text: case kept, sentences split at '.', words at spaces,
  n-grams as sets, F = 2PR/(P+R+1e-8) (so "1" below is 0.999999995), ROUGE-L = union-LCS words / distinct
  words. StringEM and CoverEM are not FlashRAG metrics and follow squad.
- every profile: CJK characters are one token each; a gold that normalises to nothing never matches.
  Elsewhere the ultrarag ROUGE uses rouge-score's own tokens (a-z and 0-9 runs), as UltraRAG does.

Notation: P = precision, R = recall, F = 2PR/(P+R); "S/U/F" = squad/ultrarag/flashrag; "norm" = normalised.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pytest

from harness.cli import main
from harness.core.errors import HarnessError
from harness.qa.answers.answer_metrics import QAScorer, distinct_n
from harness.qa.answers.predictions import QARecord
from harness.qa.answers.profiles import PROFILE_NAMES, get_profile, normalize_ultrarag
from harness.qa.answers.tokenize import space_cjk, split_cjk, word_tokens

ANSWER_KEYS = ("em", "acc", "string_em", "cover_em", "f1")
ROUGE_KEYS = ("rouge_1", "rouge_2", "rouge_l")


def m(em: float, acc: float, string_em: float, cover_em: float, f1: float, *rouge: float) -> dict[str, float]:
    """Expected answer scores, then optionally ROUGE-1, ROUGE-2, ROUGE-L."""
    expected = dict(zip(ANSWER_KEYS, (em, acc, string_em, cover_em, f1), strict=True))
    if rouge:
        expected.update(zip(ROUGE_KEYS, rouge, strict=True))
    return expected


@dataclass
class Case:
    name: str
    prediction: str
    golds: list  # a flat alias list (one group) or a list of groups
    expected: dict[str, dict[str, float]] = field(default_factory=dict)  # profile -> key -> value


def case(name: str, prediction: str, golds: list, **expected: dict[str, float]) -> Case:
    return Case(name, prediction, golds, expected)


CASES = [
    # Gold "x-y" vs "x y". S/F: gold norm "xy" (hyphen dropped), prediction "x y": not equal, "xy" not a
    # substring, token "xy" not in {x, y}, no common token -> all 0. U: hyphen -> space, "x y" == "x y" -> 1.
    # ROUGE S: rouge-score splits "x-y" into x, y -> unigrams 2/2, bigram (x y) 1/1, LCS 2 -> 1, 1, 1. U: same
    # on the normalised texts. F: raw words "x-y" vs "x", "y" share nothing -> 0.
    case(
        "hyphen",
        "x y",
        ["x-y"],
        squad=m(0, 0, 0, 0, 0, 1, 1, 1),
        ultrarag=m(1, 1, 1, 1, 1, 1, 1, 1),
        flashrag=m(0, 0, 0, 0, 0, 0, 0, 0),
    ),
    # "True" vs gold "yes". S/F: "true" vs "yes" share nothing -> 0 (F1 F: gold "yes" is special and differs
    # -> skipped -> 0). U: the whole answer "True" becomes "yes" -> all 1; ROUGE of "yes" vs "yes": unigram 1,
    # no bigrams (rouge-score scores 0), LCS 1 -> 1, 0, 1.
    case(
        "True vs yes",
        "True",
        ["yes"],
        squad=m(0, 0, 0, 0, 0, 0, 0, 0),
        ultrarag=m(1, 1, 1, 1, 1, 1, 0, 1),
        flashrag=m(0, 0, 0, 0, 0, 0, 0, 0),
    ),
    # Gold "True", prediction "yes": U maps the gold too -> 1. F: prediction "yes" is special, differs -> F1 0.
    case(
        "yes vs gold True",
        "yes",
        ["True"],
        squad=m(0, 0, 0, 0, 0, 0, 0, 0),
        ultrarag=m(1, 1, 1, 1, 1, 1, 0, 1),
        flashrag=m(0, 0, 0, 0, 0, 0, 0, 0),
    ),
    # U maps only the exact strings "True"/"False": "true" stays "true" -> nothing matches "yes".
    case(
        "lower-case true is not mapped",
        "true",
        ["yes"],
        squad=m(0, 0, 0, 0, 0, 0, 0, 0),
        ultrarag=m(0, 0, 0, 0, 0, 0, 0, 0),
        flashrag=m(0, 0, 0, 0, 0, 0, 0, 0),
    ),
    # "True." is not exactly "True" either: U norm "true" -> 0.
    case(
        "True with a full stop",
        "True.",
        ["yes"],
        squad=m(0, 0, 0, 0, 0, 0, 0, 0),
        ultrarag=m(0, 0, 0, 0, 0, 0, 0, 0),
        flashrag=m(0, 0, 0, 0, 0, 0, 0, 0),
    ),
    # "False" vs gold "no": U -> "no" == "no" -> 1 (ROUGE 1, 0, 1); S/F "false" vs "no" -> 0.
    case(
        "False vs no",
        "False",
        ["no"],
        squad=m(0, 0, 0, 0, 0, 0, 0, 0),
        ultrarag=m(1, 1, 1, 1, 1, 1, 0, 1),
        flashrag=m(0, 0, 0, 0, 0, 0, 0, 0),
    ),
    # StringEM gold "1" vs "1972". S/F: "1" is a substring of "1972" -> Acc 1 and (one group) StringEM 1;
    # EM 0; token "1" not in {1972} -> CoverEM 0, F1 0. U: StringEM counts golds EQUAL to the prediction:
    # "1" != "1972" -> 0 (Acc is still a substring test -> 1). ROUGE: tokens 1972 vs 1 -> 0 everywhere.
    case(
        "StringEM 1 vs 1972",
        "1972",
        ["1"],
        squad=m(0, 1, 1, 0, 0, 0, 0, 0),
        ultrarag=m(0, 1, 0, 0, 0, 0, 0, 0),
        flashrag=m(0, 1, 1, 0, 0, 0, 0, 0),
    ),
    # ROUGE-2 "running fast" vs "run fast". Answer metrics (all): not equal, "run fast" not a substring of
    # "running fast", "run" missing -> CoverEM 0; F1: common {fast}, P 1/2, R 1/2 -> 0.5.
    # S: no stemming: unigrams 1 of 2 each way -> 0.5; bigram (running fast) vs (run fast) -> 0; LCS 1 -> 0.5.
    # U: Porter stems "running" -> "run" ("fast", "run" unchanged) -> identical -> 1, 1, 1.
    # F: raw words, sets: {running, fast} vs {run, fast} -> 0.5, bigrams 0, LCS {fast}/2 -> 0.5.
    case(
        "ROUGE-2 stemming",
        "running fast",
        ["run fast"],
        squad=m(0, 0, 0, 0, 0.5, 0.5, 0, 0.5),
        ultrarag=m(0, 0, 0, 0, 0.5, 1, 1, 1),
        flashrag=m(0, 0, 0, 0, 0.5, 0.5, 0, 0.5),
    ),
    # "h2o" vs gold "H2O": every normalisation lower-cases -> answer metrics 1; S/U ROUGE lower-case -> 1, 0
    # (one word, no bigram), 1. F ROUGE keeps case: "h2o" != "H2O" -> 0, 0, 0.
    case(
        "H2O case",
        "h2o",
        ["H2O"],
        squad=m(1, 1, 1, 1, 1, 1, 0, 1),
        ultrarag=m(1, 1, 1, 1, 1, 1, 0, 1),
        flashrag=m(1, 1, 1, 1, 1, 0, 0, 0),
    ),
    # "no" vs gold "no answer". S/U: EM 0; "no answer" not in "no" -> Acc 0, StringEM 0; "answer" missing ->
    # CoverEM 0; F1: common 1, P 1, R 1/2 -> 2/3. ROUGE: unigram P 1, R 1/2 -> 2/3; the prediction has no
    # bigram -> 0; LCS 1 -> 2/3. F: prediction "no" is special and differs -> F1 0; ROUGE sets: same 2/3, 0,
    # LCS {no}: R 1/2 (2 distinct gold words), P 1/1 -> 2/3.
    case(
        "no vs no answer",
        "no",
        ["no answer"],
        squad=m(0, 0, 0, 0, 2 / 3, 2 / 3, 0, 2 / 3),
        ultrarag=m(0, 0, 0, 0, 2 / 3, 2 / 3, 0, 2 / 3),
        flashrag=m(0, 0, 0, 0, 0, 2 / 3, 0, 2 / 3),
    ),
    # "no answer" vs gold "no": "no" is a substring and a token -> Acc 1, CoverEM 1; StringEM S/F 1 (Acc of the
    # group), U 0 (not equal); F1: P 1/2, R 1 -> 2/3, but F: gold "no" special and differs -> 0.
    # ROUGE: unigram P 1/2, R 1 -> 2/3; gold has no bigram -> 0; LCS 1 -> 2/3 (F sets: the same).
    case(
        "no answer vs no",
        "no answer",
        ["no"],
        squad=m(0, 1, 1, 1, 2 / 3, 2 / 3, 0, 2 / 3),
        ultrarag=m(0, 1, 0, 1, 2 / 3, 2 / 3, 0, 2 / 3),
        flashrag=m(0, 1, 1, 1, 0, 2 / 3, 0, 2 / 3),
    ),
    # "no-answer" vs "no answer". S/F norm "noanswer" vs "no answer": nothing matches -> 0 (F: "noanswer" is
    # special and differs -> F1 0 too). U: hyphen -> space -> equal -> 1. ROUGE S: rouge-score splits at the
    # hyphen -> no, answer on both sides -> 1, 1, 1; U the same; F raw "no-answer" vs "no", "answer" -> 0.
    case(
        "no-answer",
        "no-answer",
        ["no answer"],
        squad=m(0, 0, 0, 0, 0, 1, 1, 1),
        ultrarag=m(1, 1, 1, 1, 1, 1, 1, 1),
        flashrag=m(0, 0, 0, 0, 0, 0, 0, 0),
    ),
    # "yes" vs "yes": equal, so F's yes/no rule does not skip -> F1 1 everywhere. ROUGE 1, 0 (no bigram), 1.
    case(
        "yes vs yes",
        "yes",
        ["yes"],
        squad=m(1, 1, 1, 1, 1, 1, 0, 1),
        ultrarag=m(1, 1, 1, 1, 1, 1, 0, 1),
        flashrag=m(1, 1, 1, 1, 1, 1, 0, 1),
    ),
    # Empty-gold rule: gold "The" normalises to nothing in every profile, so it matches nothing: 0 on EM, Acc,
    # StringEM, CoverEM, F1 (the tools disagree with themselves here: UltraRAG gives EM 1, Acc 0, CoverEM 1;
    # FlashRAG EM 1, Acc 1). ROUGE sees its own tokens: S "the" vs "the" -> 1, 0, 1; U normalised texts are
    # empty -> 0; F raw "The" vs "The" -> 1, 0, 1.
    case(
        "empty gold The",
        "The",
        ["The"],
        squad=m(0, 0, 0, 0, 0, 1, 0, 1),
        ultrarag=m(0, 0, 0, 0, 0, 0, 0, 0),
        flashrag=m(0, 0, 0, 0, 0, 1, 0, 1),
    ),
    # Gold "!!!" normalises to nothing: "Paris" scores 0 (UltraRAG's and FlashRAG's Acc would say 1, since ""
    # is a substring of anything). ROUGE: S/U gold has no word -> 0; F words "Paris" vs "!!!" -> 0.
    case(
        "empty gold !!!",
        "Paris",
        ["!!!"],
        squad=m(0, 0, 0, 0, 0, 0, 0, 0),
        ultrarag=m(0, 0, 0, 0, 0, 0, 0, 0),
        flashrag=m(0, 0, 0, 0, 0, 0, 0, 0),
    ),
    # An empty gold beside a real one: the real one decides. U's StringEM still counts it: 1 equal of 2 -> 0.5.
    # ROUGE: best gold "Paris" -> 1, 0, 1.
    case(
        "empty gold beside a real one",
        "Paris",
        ["The", "Paris"],
        squad=m(1, 1, 1, 1, 1, 1, 0, 1),
        ultrarag=m(1, 1, 0.5, 1, 1, 1, 0, 1),
        flashrag=m(1, 1, 1, 1, 1, 1, 0, 1),
    ),
    # Chinese, scored per character. Prediction 首都是北京 (5 characters), gold 北京 (2).
    # EM 0; 北京 is a substring -> Acc 1, StringEM S/F 1, U 0 (not equal); CoverEM works on whitespace words:
    # 首都是北京 is one word, not 北京 -> 0. F1: common {北, 京} = 2, P 2/5, R 2/2 -> 2*0.4/1.4 = 4/7.
    # ROUGE-1 the same 4/7; bigrams 首都 都是 是北 北京 vs 北京 -> P 1/4, R 1 -> 0.4; LCS 北京 = 2 -> 4/7.
    # F (sets) gives the same numbers: all n-grams are distinct.
    case(
        "Chinese",
        "首都是北京",
        ["北京"],
        squad=m(0, 1, 1, 0, 4 / 7, 4 / 7, 0.4, 4 / 7),
        ultrarag=m(0, 1, 0, 0, 4 / 7, 4 / 7, 0.4, 4 / 7),
        flashrag=m(0, 1, 1, 0, 4 / 7, 4 / 7, 0.4, 4 / 7),
    ),
    # 北京。 vs 北京: no profile removes the CJK full stop 。 (not ASCII punctuation), so it is an F1 token:
    # [北, 京, 。] vs [北, 京] -> P 2/3, R 1 -> 0.8. S/U ROUGE treat 。 as a separator -> 北 京 both sides ->
    # 1, 1, 1. F ROUGE keeps it: unigrams P 2/3, R 1 -> 0.8; bigrams {北京, 京。} vs {北京} -> P 1/2, R 1 -> 2/3;
    # LCS {北, 京} over 3 and 2 distinct words -> 0.8.
    case(
        "Chinese full stop",
        "北京。",
        ["北京"],
        squad=m(0, 1, 1, 0, 0.8, 1, 1, 1),
        ultrarag=m(0, 1, 0, 0, 0.8, 1, 1, 1),
        flashrag=m(0, 1, 1, 0, 0.8, 0.8, 2 / 3, 0.8),
    ),
    # Japanese kana are per character too (ー is Katakana): 東京タワー = 5 tokens vs 東京 = 2 -> as the Chinese
    # case: F1 4/7, ROUGE 4/7, 0.4 (東京 of 4 bigrams), 4/7.
    case(
        "Japanese",
        "東京タワー",
        ["東京"],
        squad=m(0, 1, 1, 0, 4 / 7, 4 / 7, 0.4, 4 / 7),
        ultrarag=m(0, 1, 0, 0, 4 / 7, 4 / 7, 0.4, 4 / 7),
        flashrag=m(0, 1, 1, 0, 4 / 7, 4 / 7, 0.4, 4 / 7),
    ),
    # Mixed 北京2008年 vs 2008: tokens 北, 京, 2008, 年 -> F1 P 1/4, R 1 -> 0.4; ROUGE-1 0.4, no gold bigram
    # -> 0, LCS 1 -> 0.4. Acc 1 (substring); CoverEM 0 (one whitespace word).
    case(
        "Chinese with digits",
        "北京2008年",
        ["2008"],
        squad=m(0, 1, 1, 0, 0.4, 0.4, 0, 0.4),
        ultrarag=m(0, 1, 0, 0, 0.4, 0.4, 0, 0.4),
        flashrag=m(0, 1, 1, 0, 0.4, 0.4, 0, 0.4),
    ),
    # Cyrillic: "москва" vs "Москва" lower-cases equal -> answer metrics 1. S ROUGE keeps words of any script
    # -> 1, 0, 1. U ROUGE is UltraRAG's rouge-score tokeniser, which keeps only a-z and 0-9: no token -> 0, 0, 0
    # (as UltraRAG). F ROUGE keeps case -> 0.
    case(
        "Cyrillic",
        "москва",
        ["Москва"],
        squad=m(1, 1, 1, 1, 1, 1, 0, 1),
        ultrarag=m(1, 1, 1, 1, 1, 0, 0, 0),
        flashrag=m(1, 1, 1, 1, 1, 0, 0, 0),
    ),
    # Accented Latin: "Zürich" vs "Zürich". S ROUGE: one word -> 1, 0 (no bigram), 1. U ROUGE: rouge-score
    # splits at ü -> z, rich on both sides -> 1, 1 (bigram z rich), 1, as UltraRAG. F: the same word -> 1, 0, 1.
    case(
        "accented Latin",
        "Zürich",
        ["Zürich"],
        squad=m(1, 1, 1, 1, 1, 1, 0, 1),
        ultrarag=m(1, 1, 1, 1, 1, 1, 1, 1),
        flashrag=m(1, 1, 1, 1, 1, 1, 0, 1),
    ),
    # "New_York" vs "New York": S/F drop "_" (ASCII punctuation) -> "newyork" vs "new york" -> 0. U replaces
    # it by a space -> equal -> 1. ROUGE S/U: "_" separates words -> new, york both sides -> 1, 1, 1; F raw
    # "New_York" vs "New", "York" -> 0.
    case(
        "underscore",
        "New_York",
        ["New York"],
        squad=m(0, 0, 0, 0, 0, 1, 1, 1),
        ultrarag=m(1, 1, 1, 1, 1, 1, 1, 1),
        flashrag=m(0, 0, 0, 0, 0, 0, 0, 0),
    ),
    # Curly quotes: S/F keep ‘ ’ (not ASCII) -> norm "‘hamlet’": EM 0, "hamlet" is a substring -> Acc 1,
    # StringEM 1, CoverEM 0 (word "‘hamlet’"), F1 0. U turns them into spaces -> "hamlet" -> all 1.
    # ROUGE S/U: quotes separate -> hamlet vs hamlet -> 1, 0, 1; F raw "‘Hamlet’" vs "Hamlet" -> 0.
    case(
        "curly quotes",
        "‘Hamlet’",
        ["Hamlet"],
        squad=m(0, 1, 1, 0, 0, 1, 0, 1),
        ultrarag=m(1, 1, 1, 1, 1, 1, 0, 1),
        flashrag=m(0, 1, 1, 0, 0, 0, 0, 0),
    ),
    # Articles: "The Beatles" vs "Beatles" normalise equal -> answer metrics 1. ROUGE S on raw text: the,
    # beatles vs beatles -> P 1/2, R 1 -> 2/3; no gold bigram -> 0; LCS 1 -> 2/3. U scores normalised text
    # (article gone) -> 1, 0, 1. F raw words The, Beatles vs Beatles -> 2/3, 0, 2/3.
    case(
        "article",
        "The Beatles",
        ["Beatles"],
        squad=m(1, 1, 1, 1, 1, 2 / 3, 0, 2 / 3),
        ultrarag=m(1, 1, 1, 1, 1, 1, 0, 1),
        flashrag=m(1, 1, 1, 1, 1, 2 / 3, 0, 2 / 3),
    ),
    # "Paris, France" vs "Paris": EM 0, Acc 1, CoverEM 1, F1 P 1/2 R 1 -> 2/3; StringEM S/F 1, U 0.
    # ROUGE S/U: paris, france vs paris -> 2/3, 0, 2/3. F raw word "Paris," != "Paris" -> 0, 0, 0.
    case(
        "attached comma",
        "Paris, France",
        ["Paris"],
        squad=m(0, 1, 1, 1, 2 / 3, 2 / 3, 0, 2 / 3),
        ultrarag=m(0, 1, 0, 1, 2 / 3, 2 / 3, 0, 2 / 3),
        flashrag=m(0, 1, 1, 1, 2 / 3, 0, 0, 0),
    ),
    # "Paris. " (trailing space) vs "Paris": normalised equal -> 1 everywhere; S/U ROUGE 1, 0, 1.
    # F: split at '.' gives "Paris" and " " -> the second is kept as an empty word "" -> unigram set
    # {Paris, ""} vs {Paris}: P 1/2, R 1 -> 2/3; bigram {(Paris, "")} vs none -> 0; LCS {Paris}, P 1/2 -> 2/3.
    case(
        "trailing full stop and space",
        "Paris. ",
        ["Paris"],
        squad=m(1, 1, 1, 1, 1, 1, 0, 1),
        ultrarag=m(1, 1, 1, 1, 1, 1, 0, 1),
        flashrag=m(1, 1, 1, 1, 1, 2 / 3, 0, 2 / 3),
    ),
    # "the the cat" vs "the cat": normalised both "cat" -> 1. ROUGE S counts n-grams: unigrams the 1 + cat 1 =
    # 2 common, P 2/3, R 1 -> 0.8; bigrams (the the),(the cat) vs (the cat) -> P 1/2, R 1 -> 2/3; LCS 2 ->
    # 0.8. U on normalised "cat" vs "cat" -> 1, 0, 1. F uses sets: {the, cat} both -> 1; bigrams 2/3 as S;
    # LCS {the, cat} over 2 distinct words each -> 1.
    case(
        "repeated article",
        "the the cat",
        ["the cat"],
        squad=m(1, 1, 1, 1, 1, 0.8, 2 / 3, 0.8),
        ultrarag=m(1, 1, 1, 1, 1, 1, 0, 1),
        flashrag=m(1, 1, 1, 1, 1, 1, 2 / 3, 1),
    ),
    # ASQA gold groups [Paris], [Lyon, Lyons], [Nice] vs "Paris and Lyons". S/F StringEM: Paris found, Lyon
    # found (substring of "lyons"), Nice not -> 2/3. U flattens to 4 golds, none equal -> 0. EM 0, Acc 1,
    # CoverEM 1 (gold "paris"), F1 best: "paris" or "lyons" -> P 1/3, R 1 -> 0.5.
    case(
        "ASQA groups",
        "Paris and Lyons",
        [["Paris"], ["Lyon", "Lyons"], ["Nice"]],
        squad=m(0, 1, 2 / 3, 1, 0.5),
        ultrarag=m(0, 1, 0, 1, 0.5),
        flashrag=m(0, 1, 2 / 3, 1, 0.5),
    ),
    # Repeated aliases: golds Paris, paris, Lyon vs "Paris". U StringEM: 2 of 3 equal -> 2/3. S/F: one group
    # with a contained alias -> 1.
    case(
        "repeated aliases",
        "Paris",
        ["Paris", "paris", "Lyon"],
        squad=m(1, 1, 1, 1, 1),
        ultrarag=m(1, 1, 2 / 3, 1, 1),
        flashrag=m(1, 1, 1, 1, 1),
    ),
    # "1972, in December" vs "December 1972": order differs -> EM 0, Acc 0; CoverEM 1 (both words present);
    # F1: 2 common, P 2/3, R 1 -> 0.8. ROUGE S/U: 1972 in december vs december 1972 -> unigrams P 2/3 R 1 ->
    # 0.8, no common bigram, LCS 1: P 1/3 R 1/2 -> 0.4. F raw "1972," != "1972": unigram {December} -> P 1/3,
    # R 1/2 -> 0.4; LCS {December} -> 0.4.
    case(
        "order",
        "1972, in December",
        ["December 1972"],
        squad=m(0, 0, 0, 1, 0.8, 0.8, 0, 0.4),
        ultrarag=m(0, 0, 0, 1, 0.8, 0.8, 0, 0.4),
        flashrag=m(0, 0, 0, 1, 0.8, 0.4, 0, 0.4),
    ),
    # "Paris Paris" vs "Paris": F1 bag of tokens: P 1/2, R 1 -> 2/3; EM 0; Acc 1. ROUGE S/U counts -> 2/3, 0,
    # 2/3. F sets: {Paris} vs {Paris} -> 1; bigram (Paris Paris) vs none -> 0; LCS {Paris} over 1 distinct
    # word each -> 1.
    case(
        "repeated word",
        "Paris Paris",
        ["Paris"],
        squad=m(0, 1, 1, 1, 2 / 3, 2 / 3, 0, 2 / 3),
        ultrarag=m(0, 1, 0, 1, 2 / 3, 2 / 3, 0, 2 / 3),
        flashrag=m(0, 1, 1, 1, 2 / 3, 1, 0, 1),
    ),
    # "yes it is" vs "yes": F1 S/U P 1/3, R 1 -> 0.5; F: gold "yes" special, prediction differs -> 0.
    # ROUGE everywhere 0.5 (unigram), 0, 0.5 (LCS 1 of 3 and 1).
    case(
        "yes it is",
        "yes it is",
        ["yes"],
        squad=m(0, 1, 1, 1, 0.5, 0.5, 0, 0.5),
        ultrarag=m(0, 1, 0, 1, 0.5, 0.5, 0, 0.5),
        flashrag=m(0, 1, 1, 1, 0, 0.5, 0, 0.5),
    ),
    # "The cats are running" vs "a cat runs": no common word after normalising -> 0. U ROUGE stems cats -> cat,
    # running -> run, runs -> run ("are", "cat" have 3 letters): cat are run vs cat run -> unigrams P 2/3,
    # R 1 -> 0.8; bigrams (cat are),(are run) vs (cat run) -> 0; LCS cat run = 2 -> 0.8. S/F: 0.
    case(
        "stemming",
        "The cats are running",
        ["a cat runs"],
        squad=m(0, 0, 0, 0, 0, 0, 0, 0),
        ultrarag=m(0, 0, 0, 0, 0, 0.8, 0, 0.8),
        flashrag=m(0, 0, 0, 0, 0, 0, 0, 0),
    ),
    # "US" vs "U.S.": S/F drop the dots -> "us" == "us" -> 1. U turns them into spaces -> "u s" vs "us" -> 0.
    # ROUGE S/U: "U.S." is the words u, s vs us -> 0; F splits "U.S." into sentences "U", "S" -> 0.
    case(
        "dotted abbreviation",
        "US",
        ["U.S."],
        squad=m(1, 1, 1, 1, 1, 0, 0, 0),
        ultrarag=m(0, 0, 0, 0, 0, 0, 0, 0),
        flashrag=m(1, 1, 1, 1, 1, 0, 0, 0),
    ),
    # "Mount Everest" vs "Everest": everyone agrees: EM 0, Acc 1, CoverEM 1, F1 P 1/2 R 1 -> 2/3, StringEM
    # S/F 1 U 0. ROUGE S/U: 2/3, 0, 2/3; F same on raw words (case matches).
    case(
        "longer answer",
        "Mount Everest",
        ["Everest"],
        squad=m(0, 1, 1, 1, 2 / 3, 2 / 3, 0, 2 / 3),
        ultrarag=m(0, 1, 0, 1, 2 / 3, 2 / 3, 0, 2 / 3),
        flashrag=m(0, 1, 1, 1, 2 / 3, 2 / 3, 0, 2 / 3),
    ),
    # An empty prediction scores 0 on every metric in every profile.
    case(
        "empty prediction",
        "   ",
        ["Paris"],
        squad=m(0, 0, 0, 0, 0, 0, 0, 0),
        ultrarag=m(0, 0, 0, 0, 0, 0, 0, 0),
        flashrag=m(0, 0, 0, 0, 0, 0, 0, 0),
    ),
    # BLEU, "The cat sat on the mat" vs "the cat is on the mat". S/U (sacrebleu, lower-cased): unigrams the x2,
    # cat, on, mat = 5 of 6; bigrams the cat, on the, the mat = 3 of 5; equal lengths -> BLEU-1 5/6, BLEU-2
    # sqrt(5/6 * 3/5). F (case kept): "The" != "the" -> unigrams cat, on, the, mat = 4 of 6; bigrams on the,
    # the mat = 2 of 5 -> BLEU-1 2/3, BLEU-2 sqrt(2/3 * 2/5); the 4-grams share nothing -> BLEU-4 0 (no
    # smoothing).
    case(
        "BLEU case",
        "The cat sat on the mat",
        ["the cat is on the mat"],
        squad={"bleu_1": 5 / 6, "bleu_2": math.sqrt(0.5)},
        ultrarag={"bleu_1": 5 / 6, "bleu_2": math.sqrt(0.5)},
        flashrag={"bleu_1": 2 / 3, "bleu_2": math.sqrt(4 / 15), "bleu_4": 0.0},
    ),
    # BLEU per character: 首都是北京 vs 北京 -> 2 of 5 characters match; the prediction is longer, so no
    # brevity penalty -> BLEU-1 0.4 everywhere (13a alone would see one word each and score 0).
    case(
        "Chinese BLEU",
        "首都是北京",
        ["北京"],
        squad={"bleu_1": 0.4},
        ultrarag={"bleu_1": 0.4},
        flashrag={"bleu_1": 0.4},
    ),
]


def _record(prediction: str, golds: list) -> QARecord:
    groups = tuple(tuple(group) for group in golds) if isinstance(golds[0], list) else (tuple(golds),)
    return QARecord(qid="q", line=1, gold_groups=groups, prediction=prediction)


@pytest.fixture(scope="module")
def scorers() -> dict[str, QAScorer]:
    keys = [*ANSWER_KEYS, "rouge", "bleu"]
    return {name: QAScorer(keys, profile=name) for name in PROFILE_NAMES}


PARAMS = [
    pytest.param(profile, item, id=f"{profile}-{item.name}")
    for item in CASES
    for profile in PROFILE_NAMES
    if profile in item.expected
]


def test_at_least_30_hand_made_cases_per_profile() -> None:
    for profile in PROFILE_NAMES:
        assert sum(profile in item.expected for item in CASES) >= 30, profile


@pytest.mark.parametrize(("profile", "item"), PARAMS)
def test_hand_worked_case(scorers: dict[str, QAScorer], profile: str, item: Case) -> None:
    scores = scorers[profile].score(_record(item.prediction, item.golds))
    expected = item.expected[profile]
    # abs=1e-7 absorbs FlashRAG's 1e-8 in 2PR/(P+R+1e-8) and nothing else.
    assert {key: scores[key] for key in expected} == pytest.approx(expected, abs=1e-7)


def test_ultrarag_normalisation_steps() -> None:
    assert normalize_ultrarag("True") == "yes" and normalize_ultrarag("False") == "no"
    assert normalize_ultrarag(" True") == "true"  # only the exact string is mapped
    assert normalize_ultrarag("The U.S._Army’s `best`") == "u s army s best"


def test_cjk_tokens() -> None:
    assert split_cjk("北京2008年") == ["北", "京", "2008", "年"]
    assert split_cjk("") == [""] and split_cjk("café") == ["café"]
    assert word_tokens("Café, 東京タワー! x_y") == ["café", "東", "京", "タ", "ワ", "ー", "x", "y"]
    assert space_cjk("abc") == "abc" and space_cjk("a北b").split() == ["a", "北", "b"]


def test_cjk_meteor_and_distinct_n_per_character() -> None:
    # 北京 vs 北京: two matched tokens in one chunk -> P = R = 1, penalty 0.5 * (1/2)^3 -> 1 - 0.0625.
    # (As one token it was one match in one chunk: penalty 0.5 -> 0.5.)
    scorer = QAScorer(["meteor"], synonyms=False)
    assert scorer.score(_record("北京", ["北京"]))["meteor"] == pytest.approx(0.9375)
    # 北京北京: tokens 北 京 北 京 -> 2 distinct of 4 unigrams; bigrams 北京, 京北, 北京 -> 2 of 3.
    assert distinct_n(["北京北京"], 1) == 0.5
    assert distinct_n(["北京北京"], 2) == pytest.approx(2 / 3)


def test_unicode_rouge_tokens_equal_rouge_score_on_ascii() -> None:
    from rouge_score.tokenize import tokenize

    for text in ["The U.S.-based H2O_x co.", "  running, FAST!! 3.5 ", "a--b", "it's 1972"]:
        assert word_tokens(text) == tokenize(text, None)


def test_unknown_profile_is_an_error() -> None:
    with pytest.raises(HarnessError, match="unknown answer-metric profile 'ragas'; choose from squad"):
        get_profile("ragas")
    assert get_profile(None).name == "squad"


def test_corpus_bleu_follows_the_profile() -> None:
    records = [_record("The cat sat on the mat", ["the cat is on the mat"]), _record("Paris", ["Paris"])]
    # FlashRAG pools the counts: unigrams 4 + 1 of 6 + 1, bigrams 2 of 5 + 0; lengths 7 = 7 -> no penalty.
    flashrag = QAScorer(["bleu"], profile="flashrag").corpus_bleu(records)
    assert flashrag["corpus_bleu_1"] == pytest.approx(5 / 7)
    assert flashrag["corpus_bleu_2"] == pytest.approx(math.sqrt(5 / 7 * 2 / 5))
    assert flashrag["brevity_penalty"] == 1.0 and flashrag["signature"].startswith("flashrag BLEU")
    squad = QAScorer(["bleu"], profile="squad").corpus_bleu(records)
    assert squad["corpus_bleu_1"] == pytest.approx(6 / 7)  # lower-cased: "The" matches


def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return str(path)


ROWS = [
    {"id": 1, "golden_answers": ["x-y"], "pred_answer": "x y"},
    {"id": 2, "golden_answers": ["yes"], "pred_answer": "True"},
]


def test_qa_eval_names_the_profile_everywhere(tmp_path, capsys) -> None:
    predictions = _write(tmp_path / "answers.jsonl", ROWS)
    report_path = tmp_path / "report.json"
    code = main(
        ["qa-eval", predictions, "--metrics", "em,f1", "--profile", "ultrarag", "--output", str(report_path)]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "profile ultrarag" in out and "profile: ultrarag (UltraRAG" in out
    assert "tokenisation: CJK characters" in out and "empty gold: a gold alias" in out
    report = json.loads(report_path.read_text())
    assert report["profile"] == "ultrarag" and report["settings"]["profile"] == "ultrarag"
    assert report["aggregate"] == {"em": 1.0, "f1": 1.0}  # both cases match under UltraRAG's rules
    assert set(report["settings"]["definitions"]) == {"em", "f1"}

    assert main(["qa-eval", predictions, "--metrics", "em", "--output", str(report_path)]) == 0
    assert json.loads(report_path.read_text())["aggregate"] == {"em": 0.0}  # squad, the default
    assert "profile: squad" in capsys.readouterr().out


def test_qa_eval_counts_golds_that_normalise_to_nothing(tmp_path, capsys) -> None:
    rows = [*ROWS, {"id": 3, "golden_answers": ["The", "Paris"], "pred_answer": "Paris"}]
    predictions = _write(tmp_path / "answers.jsonl", rows)
    report_path = tmp_path / "report.json"
    assert main(["qa-eval", predictions, "--metrics", "em", "--output", str(report_path)]) == 0
    assert "1 question(s) have a gold answer that normalises to nothing under profile squad" in (
        capsys.readouterr().err
    )
    summary = json.loads(report_path.read_text())["predictions"]
    assert summary["empty_golds"] == 1 and summary["empty_gold_examples"] == ["3"]


def test_qa_compare_names_the_profile(tmp_path, capsys) -> None:
    a = _write(tmp_path / "a.jsonl", ROWS)
    b = _write(tmp_path / "b.jsonl", [{**row, "pred_answer": "nothing"} for row in ROWS])
    report_path = tmp_path / "compare.json"
    argv = ["qa-compare", a, b, "--metrics", "em", "--profile", "flashrag", "--output", str(report_path)]
    assert main(argv) == 0
    assert "profile: flashrag" in capsys.readouterr().out
    report = json.loads(report_path.read_text())
    assert report["profile"] == "flashrag" and report["settings"]["profile"] == "flashrag"


def test_unknown_profile_on_the_command_line(tmp_path, capsys) -> None:
    predictions = _write(tmp_path / "answers.jsonl", ROWS)
    assert main(["qa-eval", predictions, "--profile", "ragas"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "argument --profile: invalid choice: 'ragas'" in err and "flashrag" in err

"""Tokens beyond ASCII for the token-based answer metrics (F1, ROUGE, BLEU, METEOR, distinct-n).

Chinese and Japanese are written without spaces between words, so a whitespace tokeniser makes a whole
Chinese answer one token, and rouge-score's tokeniser (a-z and 0-9 only) drops it altogether: every Chinese
answer scored 0. Here CJK characters (Han ideographs, kana, Hangul, Bopomofo) are scored one per character in
every profile, as Chinese RAG evaluations do. Other text is split the way the profile's tool splits it
(:func:`rouge_score_tokens` for UltraRAG's ROUGE), or per word of any script (:func:`word_tokens`, the
squad profile's ROUGE, where rouge-score would drop every letter outside a-z).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import Protocol

CJK_RULE = "CJK characters (Han, kana, Hangul, Bopomofo) are one token each in every profile"

# Inclusive code point ranges scored per character.
_CJK_RANGES = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x3005, 0x3007),  # ideographic iteration mark, closing mark, number zero
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x312F),  # Bopomofo
    (0x3130, 0x318F),  # Hangul Compatibility Jamo
    (0x31A0, 0x31BF),  # Bopomofo Extended
    (0x31F0, 0x31FF),  # Katakana Phonetic Extensions
    (0x3400, 0x4DBF),  # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xAC00, 0xD7AF),  # Hangul Syllables
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0xFF66, 0xFF9F),  # half-width Katakana
    (0x20000, 0x323AF),  # CJK Unified Ideographs Extensions B-H and Compatibility Supplement
)


_CJK_CLASS = "".join(f"{chr(low)}-{chr(high)}" for low, high in _CJK_RANGES)
_CJK = re.compile(f"[{_CJK_CLASS}]")
# A CJK character, or a run of anything else: the pieces split_cjk cuts a token into.
_CJK_PIECES = re.compile(f"[{_CJK_CLASS}]|[^{_CJK_CLASS}]+")
# On ASCII text a word is what rouge-score keeps: a run of a-z and 0-9 (after lower-casing).
_ASCII_WORD = re.compile(r"[a-z0-9]+")


def is_cjk(char: str) -> bool:
    """Whether ``char`` is scored as a token of its own."""
    return _CJK.match(char) is not None


def split_cjk(token: str) -> list[str]:
    """One token split so each CJK character stands alone: ``"北京2008年"`` -> 北, 京, 2008, 年.

    A token without CJK characters comes back unchanged, even the empty string (FlashRAG's ROUGE counts one).
    """
    if token.isascii() or not _CJK.search(token):
        return [token]
    return _CJK_PIECES.findall(token)


def split_cjk_tokens(tokens: Iterable[str]) -> list[str]:
    """Every token through :func:`split_cjk`, flattened."""
    return [piece for token in tokens for piece in split_cjk(token)]


def space_cjk(text: str) -> str:
    """``text`` with a space on each side of every CJK character, for tokenisers that split on spaces."""
    if text.isascii():
        return text
    return _CJK.sub(r" \g<0> ", text)


def _is_word_char(char: str) -> bool:
    # Letters, combining marks and digits of any script; marks matter for Devanagari, Arabic vowels, etc.
    return unicodedata.category(char)[0] in "LMN"


def word_tokens(text: str) -> list[str]:
    """ROUGE tokens: lower-cased runs of letters, marks and digits of any script; CJK characters alone.

    On ASCII text this is rouge-score's tokeniser (lower-case, keep runs of a-z and 0-9), which drops every
    other character: "café" became "caf" and Chinese vanished.
    """
    text = text.lower()
    if text.isascii():
        return _ASCII_WORD.findall(text)
    tokens: list[str] = []
    run = ""
    for char in text:
        if is_cjk(char):
            if run:
                tokens.append(run)
                run = ""
            tokens.append(char)
        elif _is_word_char(char):
            run += char
        elif run:
            tokens.append(run)
            run = ""
    if run:
        tokens.append(run)
    return tokens


class Stemmer(Protocol):
    stem: Callable[[str], str]


def rouge_score_tokens(text: str, stemmer: Stemmer | None) -> list[str]:
    """rouge-score's own tokens, with CJK characters one token each (rouge-score drops them).

    rouge-score lower-cases, keeps runs of a-z and 0-9 and drops everything else, so "Zürich" is the two
    tokens z, rich and Cyrillic or Arabic text has none; words longer than 3 characters are stemmed when a
    stemmer is given. Text without CJK characters gets exactly rouge-score's tokens.
    """
    from rouge_score.tokenize import tokenize

    if text.isascii() or not _CJK.search(text):
        return tokenize(text, stemmer)
    tokens: list[str] = []
    for piece in _CJK_PIECES.findall(text):
        if is_cjk(piece):
            tokens.append(piece)
        else:
            tokens.extend(tokenize(piece, stemmer))
    return tokens

"""Shell-style splitting in linear time: exactly what shlex.split gives."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota.words import split_words


def _split(split: object, text: str) -> object:
    try:
        return split(text)  # type: ignore[operator]
    except ValueError as e:
        return ("error", str(e))


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(" \t\r\n\\'\"ab,#\x0b\u2028"))))
def test_split_words_is_shlex_split(text: str) -> None:
    assert _split(split_words, text) == _split(shlex.split, text)


@pytest.mark.parametrize("text", ['a "b\\" c" d', "'it''s' x", '"" a ""', "a\\\nb", 'x"y"z'])
def test_split_words_examples(text: str) -> None:
    assert split_words(text) == shlex.split(text)


def test_a_long_word_is_one_word() -> None:
    """shlex built it a character at a time (quadratic); the result is the same."""
    word = "ab" * 50_000
    assert split_words(f'--x {word} "{word}"') == ["--x", word, word]

"""Near-duplicate removal and the seeded train/validation split."""

from __future__ import annotations

import random

import pytest

from autorl.inputs.dedup import DedupIndex, dedup, jaccard, ngrams, normalize, split_train_val


def test_normalize_ignores_case_punctuation_and_spacing():
    assert normalize("  What's   the CAPITAL of France?! ") == "what s the capital of france"


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("What is the capital of France?", "what is the capital of france"),
        ("What is the capital of France?", "What's the capital of France?"),
        (
            "Tom has 3 apples and buys 5 more. How many apples does he have?",
            "Tom has 3 apples and buys 2 more. How many apples does he have?",
        ),
        (
            "Summarize this email: Hi team, the meeting moved to 3pm. Bring the Q3 report.",
            "Summarize this email: Hi team, the meeting moved to 4 pm. Bring the Q3 report!",
        ),
    ],
)
def test_near_duplicates_are_removed(first, second):
    assert dedup([first, second]) == [first]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Write a haiku about the sea", "Write a haiku about the ocean"),
        ("Translate 'good morning' into Spanish", "Translate 'good night' into Spanish"),
        ("Write a haiku about the sea", "Write a short poem about autumn leaves"),
        ("What is 2+2?", "What is 3+3?"),
    ],
)
def test_distinct_inputs_are_kept(first, second):
    assert dedup([first, second]) == [first, second]


def test_dedup_keeps_first_occurrences_in_order():
    texts = ["b question here", "a question there", "B question here!", "c something else", "a question there"]
    assert dedup(texts) == ["b question here", "a question there", "c something else"]


def test_index_reports_whether_a_text_was_kept():
    index = DedupIndex(threshold=0.8)
    assert index.add("Is 91 a prime number?")
    assert not index.add("is 91 a prime number")
    assert len(index) == 1 and index.kept == ["Is 91 a prime number?"]


def test_blocked_texts_are_never_kept_and_block_their_copies():
    index = DedupIndex()
    index.block("How many wheels do 4 bicycles have?")
    assert index.is_duplicate("how many wheels do 4 bicycles have")
    assert not index.add("How many wheels do 4 bicycles have!")
    assert index.add("How many legs do 3 spiders have?")
    assert index.kept == ["How many legs do 3 spiders have?"]


def test_threshold_is_the_trigram_jaccard():
    a, b = ngrams("abcd"), ngrams("abce")  # {abc, bcd} vs {abc, bce}: 1/3
    assert jaccard(a, b) == pytest.approx(1 / 3)
    assert dedup(["abcd", "abce"], threshold=0.3) == ["abcd"]
    with pytest.raises(ValueError):
        DedupIndex(threshold=0)


TEXTS = [f"input number {i} about {word}" for i, word in enumerate("abcdefghijklmnopqrst")]


def test_split_is_deterministic_and_independent_of_order():
    first = dict(zip(TEXTS, split_train_val(TEXTS, 0.2, seed=3), strict=False))
    assert first == dict(zip(TEXTS, split_train_val(TEXTS, 0.2, seed=3), strict=False))
    shuffled = random.Random(0).sample(TEXTS, len(TEXTS))
    assert first == dict(zip(shuffled, split_train_val(shuffled, 0.2, seed=3), strict=False))
    assert list(first.values()).count("val") == 4


def test_split_changes_with_the_seed():
    assert split_train_val(TEXTS, 0.2, seed=0) != split_train_val(TEXTS, 0.2, seed=1)


@pytest.mark.parametrize(
    ("n", "fraction", "n_val"),
    [(0, 0.2, 0), (1, 0.2, 0), (2, 0.2, 1), (3, 0.9, 2), (10, 0.0, 0), (10, 0.25, 2), (20, 0.2, 4)],
)
def test_split_sizes(n, fraction, n_val):
    assert split_train_val(TEXTS[:n], fraction).count("val") == n_val


def test_split_rejects_bad_fraction():
    with pytest.raises(ValueError):
        split_train_val(TEXTS, 1.0)

"""Exact and near-duplicate removal of generated inputs, and their seeded train/validation split.

Near-duplicates: two texts are duplicates when the Jaccard similarity of their sets of character
trigrams, taken after normalization (Unicode NFKC, case folded, punctuation replaced by spaces,
whitespace collapsed), is at least `NEAR_DUPLICATE_THRESHOLD` = 0.8. At 0.8, "What is the capital of
France?" and "What's the capital of France?" (0.83) are duplicates, and so is a long word problem
copied with one number changed (0.89); "Write a haiku about the sea" and "... about the ocean" (0.73)
and "Translate 'good morning' into Spanish" and "... 'good night' ..." (0.60) are both kept.
Exact duplicates after normalization have similarity 1. Each new text is compared with every kept
one (quadratic; about a second for a thousand inputs), the first occurrence wins. Texts can also be
blocked (seen, never kept): the task's seed examples are, so copies of them are duplicates.

Split: each text gets a rank from SHA-256 of (seed, normalized text); the lowest-ranked
`round(val_fraction * n)` texts (at least one when there are two or more texts and
val_fraction > 0, and never all of them) form the validation set. The split depends only on the
seed and the set of texts, not on their order, and validation never overlaps train.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Literal

NGRAM = 3
"""Character n-gram length of the similarity."""
NEAR_DUPLICATE_THRESHOLD = 0.8
"""Jaccard similarity of character trigram sets at or above which two texts are duplicates."""
DEFAULT_VAL_FRACTION = 0.2
"""Share of the inputs held out for validation."""

Split = Literal["train", "val"]


def normalize(text: str) -> str:
    """NFKC, case folded, punctuation replaced by spaces, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


def ngrams(text: str, n: int = NGRAM) -> frozenset[str]:
    """The set of character n-grams of the normalized text (the whole text when shorter than n)."""
    norm = normalize(text)
    return frozenset(norm[i : i + n] for i in range(max(1, len(norm) - n + 1)))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


class DedupIndex:
    """The texts kept so far; `add` keeps a text only if it is no duplicate of one already seen."""

    def __init__(self, threshold: float = NEAR_DUPLICATE_THRESHOLD):
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.kept: list[str] = []
        self._normalized: set[str] = set()
        self._ngrams: list[frozenset[str]] = []

    def is_duplicate(self, text: str) -> bool:
        """Whether `text` is an exact or near-duplicate of a text kept or blocked before."""
        if normalize(text) in self._normalized:
            return True
        grams = ngrams(text)
        return any(jaccard(grams, other) >= self.threshold for other in self._ngrams)

    def block(self, text: str) -> None:
        """Count `text` as seen without keeping it: later copies of it are duplicates."""
        self._normalized.add(normalize(text))
        self._ngrams.append(ngrams(text))

    def add(self, text: str) -> bool:
        """Keep `text` and return True, or return False if it duplicates a text seen before."""
        if self.is_duplicate(text):
            return False
        self.block(text)
        self.kept.append(text)
        return True

    def __len__(self) -> int:
        return len(self.kept)


def dedup(texts: Iterable[str], threshold: float = NEAR_DUPLICATE_THRESHOLD) -> list[str]:
    """`texts` without exact and near-duplicates, first occurrences kept, in order."""
    index = DedupIndex(threshold)
    for text in texts:
        index.add(text)
    return index.kept


def split_train_val(texts: Sequence[str], val_fraction: float = DEFAULT_VAL_FRACTION, seed: int = 0) -> list[Split]:
    """The split of each text ("train" or "val"), deterministic in the seed and the set of texts."""
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    n = len(texts)
    n_val = min(n - 1, max(1, round(val_fraction * n))) if n >= 2 and val_fraction > 0 else 0
    rank = sorted(range(n), key=lambda i: hashlib.sha256(f"{seed}\0{normalize(texts[i])}".encode()).digest())
    val = set(rank[:n_val])
    return ["val" if i in val else "train" for i in range(n)]

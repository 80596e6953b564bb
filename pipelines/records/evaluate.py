"""The evaluate stage's artifact: the base model's, the latest and the best checkpoint's judged answers to the
validation inputs (`evaluation`'s files)."""

from __future__ import annotations

NAME = "evaluate"

"""RULER: group-relative LLM judging of agent trajectories, plus pluggable custom judges; usable on its own.

    import ruler
    scores = await ruler.ruler(message_lists, judge_model="openai/gpt-4.1-mini")
    group = await ruler.ruler_score_group(group, judge_model="openai/gpt-4.1-mini")

Custom judges follow the `ruler.Judge` protocol; `ruler.load_judge("module:attribute")` loads one.
"""

from .api import ruler, ruler_score_group
from .backend import DEFAULT_JUDGE_MODEL, JudgeModel
from .cache import JudgeCache, default_cache_dir
from .endpoint import ModelEndpoint
from .errors import JudgeFailedError, JudgeSpecError, ModelSpecError, RulerError, RulerInputError
from .judges import CombinedJudge, FunctionJudge, Judge
from .loading import load_judge
from .retry import RetryPolicy
from .rubric import DEFAULT_RUBRIC
from .ruler_judge import RulerJudge
from .scores import TrajectoryScore

__all__ = [
    "DEFAULT_JUDGE_MODEL",
    "DEFAULT_RUBRIC",
    "CombinedJudge",
    "FunctionJudge",
    "Judge",
    "JudgeCache",
    "JudgeFailedError",
    "JudgeModel",
    "JudgeSpecError",
    "ModelEndpoint",
    "ModelSpecError",
    "RetryPolicy",
    "RulerError",
    "RulerInputError",
    "RulerJudge",
    "TrajectoryScore",
    "default_cache_dir",
    "load_judge",
    "ruler",
    "ruler_score_group",
]

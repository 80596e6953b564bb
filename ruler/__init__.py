"""RULER: group-relative LLM judging of agent trajectories, plus pluggable custom judges; usable on its own.

    import ruler
    scores = await ruler.ruler(message_lists, judge_model="openai/gpt-4.1-mini")
    group = await ruler.ruler_score_group(group, judge_model="openai/gpt-4.1-mini")

Custom judges follow the `ruler.Judge` protocol; `ruler.load_judge("module:attribute")` loads one. Names are
imported on first use, so importing one module of ruler (`ruler.endpoint`) does not load the others.
"""

import importlib

_EXPORTS = {
    "CombinedJudge": "judges",
    "DEFAULT_JUDGE_MODEL": "client",
    "DEFAULT_RUBRIC": "rubric",
    "FunctionJudge": "judges",
    "InputsCheck": "audit",
    "Judge": "judges",
    "JudgeAudit": "audit",
    "JudgeCache": "cache",
    "JudgeFailedError": "errors",
    "JudgeModel": "client",
    "JudgeSpecError": "errors",
    "ModelEndpoint": "endpoint",
    "ModelSpecError": "errors",
    "RetryPolicy": "retry",
    "RulerError": "errors",
    "RulerInputError": "errors",
    "RulerJudge": "ruler_judge",
    "TURN_REWARDS": "scores",
    "TrajectoryScore": "scores",
    "TurnScores": "scores",
    "audit_judge": "audit",
    "check_inputs": "audit",
    "default_cache_dir": "cache",
    "load_judge": "loading",
    "register_embedded": "endpoint",
    "ruler": "api",
    "ruler_score_group": "api",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ruler' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

"""ART's import path for LangGraph agents (`art.langgraph`): `init_chat_model` and `wrap_rollout`, which live
in `autorl.agents.langgraph`."""

from .agents.langgraph import ModelCall, init_chat_model, recorded_trajectory, wrap_rollout

__all__ = ["ModelCall", "init_chat_model", "recorded_trajectory", "wrap_rollout"]

"""Trainer engines: "auto" picks Unsloth only on CUDA where it is installed; asking for Unsloth where it
cannot run is one line; the PEFT engine is what CPU runs train with (the GPU path: benchmarks/perf/gpu_check.py)."""

import pytest

from autorl.errors import AutoRLError
from autorl.training import engines


@pytest.mark.parametrize(
    ("cuda", "installed", "auto"),
    [(False, False, "peft"), (False, True, "peft"), (True, False, "peft"), (True, True, "unsloth")],
)
def test_auto_picks_unsloth_only_on_cuda_where_it_is_installed(monkeypatch, cuda, installed, auto):
    monkeypatch.setattr(engines, "cuda_available", lambda: cuda)
    monkeypatch.setattr(engines, "unsloth_installed", lambda: installed)
    assert engines.resolve_engine("auto") == auto
    assert engines.resolve_engine("peft") == "peft"


def test_unsloth_where_it_cannot_run_is_one_line(monkeypatch):
    monkeypatch.setattr(engines, "cuda_available", lambda: False)
    with pytest.raises(AutoRLError, match='"unsloth" needs a CUDA GPU'):
        engines.resolve_engine("unsloth")
    monkeypatch.setattr(engines, "cuda_available", lambda: True)
    monkeypatch.setattr(engines, "unsloth_installed", lambda: False)
    with pytest.raises(AutoRLError, match=r"not installed: ./install.sh --gpu"):
        engines.resolve_engine("unsloth")


def test_a_cpu_trainer_uses_peft(tiny_model, tmp_path):
    from autorl import TrainerConfig
    from autorl.training.trainer import GRPOTrainer

    trainer = GRPOTrainer(tiny_model, tmp_path, TrainerConfig(dtype="float32"))
    assert trainer.engine == ("unsloth" if engines.cuda_available() and engines.unsloth_installed() else "peft")

"""Where `LocalBackend` runs a model's torch work: its trainer's steps and its merges on one thread."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import autorl as art
import autorl.training.trainer as trainer_module
from autorl.backends.local import LocalPlacement, LocalServing
from autorl.serving.config import ServerConfig


def test_a_model_s_merges_run_on_the_thread_its_trainer_steps_on(tmp_path, monkeypatch):
    threads: dict[str, str] = {}

    class RecordingTrainer:  # the edge of this test: where each call runs, not what it computes
        def __init__(self, *args, **kwargs):
            threads["build"] = threading.current_thread().name

        def step(self, groups, config, step=None):
            threads["step"] = threading.current_thread().name
            return {}

        def save(self, step, metrics):
            threads["save"] = threading.current_thread().name
            (tmp_path / "checkpoints" / f"{step:04d}").mkdir(parents=True)
            (tmp_path / "checkpoints" / f"{step:04d}" / "metrics.json").write_text("{}")

    def load_merged(path):
        threads["merge"] = threading.current_thread().name

    monkeypatch.setattr(trainer_module, "GRPOTrainer", RecordingTrainer)
    placement = LocalPlacement(ServerConfig())
    model = art.TrainableModel(name="policy", base_model="embedded:smollm2-135m")
    other = art.TrainableModel(name="other", base_model="embedded:smollm2-135m")
    server = SimpleNamespace(merged=True, running=True, served_name="policy", load_merged=load_merged)
    serving = LocalServing(model, tmp_path, server, max_restarts=0, torch_thread=placement.torch_thread(model))
    trainer = placement.trainer(model, tmp_path)

    async def one_step() -> str:
        await trainer.step([], art.TrainConfig(), step=1)
        return await serving.serve(1)

    try:
        assert asyncio.run(one_step()) == "policy"
        other_thread = placement.torch_thread(other).submit(lambda: threading.current_thread().name).result()
    finally:
        placement.close()
    assert len(set(threads.values())) == 1, threads  # built, stepped, saved and merged on one thread
    assert threads["merge"] != threading.current_thread().name
    assert other_thread != threads["merge"]  # each model has its own

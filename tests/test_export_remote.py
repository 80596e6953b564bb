"""`autorl export` of runs trained elsewhere: a run on an `autorl serve` (`--backend URL`) exports the copy of its
checkpoint in its run directory, and a checkpoint not copied there is fetched from the server (`autorl serve`'s
real app over a scripted endpoint, tests/helpers/remote.py); an unreachable server or a missing token is one line
that leaves nothing. A run on a Ray cluster (`--ray`) exports from its run directory without joining Ray (that a
cluster run's driver writes its checkpoints there: tests/test_cluster_e2e.py, tests/test_trainer_workers.py)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

import pipelines.policy
from autorl.training.checkpoints import METRICS_FILE
from pipelines.cli import app
from pipelines.run_view import RunView
from tests.helpers.benchmark_runs import make_run
from tests.helpers.cli import error_line
from tests.helpers.lora import lora_run, random_lora
from tests.helpers.remote import TOKEN, Harness, free_port


def invoke(home: Path, *args: str):
    return CliRunner().invoke(app, ["export", *args, "--home", str(home)])


def record_config(home: Path, **fields) -> None:
    """Set `fields` in run `r`'s recorded config, as `autorl run --backend URL` or `--ray` records them."""
    path = home / "runs" / "r" / "run.json"
    record = json.loads(path.read_text())
    record["config"].update(fields)
    path.write_text(json.dumps(record))


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def test_a_checkpoint_not_copied_here_is_fetched_from_the_autorl_serve_the_run_trained_on(
    served, tiny_model, tmp_path, monkeypatch
):
    home = tmp_path / "home"
    make_run(home, rewards=(), model=str(tiny_model))
    record_config(home, backend=served.url)
    monkeypatch.setenv("AUTORL_TOKEN", TOKEN)
    policy = RunView(home, "r", Counter()).policy
    asyncio.run(policy.start())  # the run's policy registered on the server, as `autorl run --backend` does
    policy.backend.close()
    there = served.served.backend.run_dir(policy.model) / "checkpoints"
    for step in (1, 2):  # trained there (random LoRAs: the merge shows), never copied back here
        random_lora(tiny_model, there / f"000{step}", seed=step, r=4, lora_alpha=8)
        (there / f"000{step}" / METRICS_FILE).write_text(json.dumps({"step": step, "reward": 0.5}))
    here = policy.run_dir / "checkpoints"
    assert not here.exists()

    monkeypatch.setenv("AUTORL_TOKEN", "not-the-servers-token")
    out = tmp_path / "agent"
    line = error_line(invoke(home, "r@2", "--out", str(out)))
    assert line == (
        "error: r@2 is not in run 'r''s directory here and could not be fetched from the `autorl serve` it trained "
        f"on: autorl server {served.url} refused the token: set AUTORL_TOKEN to the server's"
    )
    assert not out.exists() and not list(tmp_path.glob(".agent*"))

    monkeypatch.setenv("AUTORL_TOKEN", TOKEN)
    result = invoke(home, "r@latest", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert f"exported r step 2 (hf) (the checkpoint fetched from {served.url}) to {out}" in result.output
    for name in ("adapter_model.safetensors", "adapter_config.json", METRICS_FILE):  # copied whole, as a run would
        assert (here / "0002" / name).read_bytes() == (there / "0002" / name).read_bytes()
    assert not (here / "0001").exists()  # only what was asked for
    exported = AutoModelForCausalLM.from_pretrained(out)
    on_server = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), there / "0002")
    ids = torch.tensor([[5, 9, 40, 41, 2]])
    assert torch.allclose(logits(exported, ids), logits(on_server, ids), atol=1e-5)
    assert not torch.allclose(logits(exported, ids), logits(AutoModelForCausalLM.from_pretrained(tiny_model), ids))

    served.stop()
    restarted = Harness(tmp_path, served.chat, port=served.port)  # its registry and files only
    try:  # a checkpoint read from a restarted server's files: no model started there (no vLLM server) to read it
        result = invoke(home, "r@1", "--out", str(tmp_path / "first"))
        assert result.exit_code == 0 and "fetched" in result.output, result.output
        assert restarted.served.models == {}
    finally:
        restarted.stop()
    # the copy is the run's now: exported again with neither the server nor the token
    monkeypatch.delenv("AUTORL_TOKEN")
    result = invoke(home, "r@2", "--format", "peft", "--out", str(tmp_path / "adapter"))
    assert result.exit_code == 0, result.output
    assert "fetched" not in result.output


def test_the_best_checkpoint_not_copied_here_is_fetched_rather_than_the_best_of_the_copies(
    served, tiny_model, tmp_path, monkeypatch
):
    home = tmp_path / "home"
    make_run(home, rewards=(), model=str(tiny_model))
    record_config(home, backend=served.url, steps=2)
    monkeypatch.setenv("AUTORL_TOKEN", TOKEN)
    policy = RunView(home, "r", Counter()).policy
    asyncio.run(policy.start())
    policy.backend.close()
    there = served.served.backend.run_dir(policy.model) / "checkpoints"
    for where, step in ((there, 1), (there, 2), (policy.run_dir / "checkpoints", 2)):  # step 2 copied back
        random_lora(tiny_model, where / f"000{step}", seed=step, r=4, lora_alpha=8)
        (where / f"000{step}" / METRICS_FILE).write_text(json.dumps({"step": step}))
    history = [{"step": 1, "reward": 0.9}, {"step": 2, "reward": 0.4}]  # the run's copy of its history
    (policy.run_dir / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
    result = invoke(home, "r@best", "--out", str(tmp_path / "agent"))
    assert result.exit_code == 0, result.output
    assert f"exported r step 1 (hf) (the checkpoint fetched from {served.url})" in result.output


def test_an_unreachable_server_or_no_token_is_one_line_and_a_copied_checkpoint_needs_neither(
    tiny_model, tmp_path, monkeypatch
):
    home = tmp_path / "home"
    lora_run(home, str(tiny_model), tiny_model)  # checkpoints 0001 and 0002 copied back during the run
    down = f"http://127.0.0.1:{free_port()}"
    record_config(home, backend=down)
    monkeypatch.delenv("AUTORL_TOKEN", raising=False)
    assert invoke(home, "r@best", "--out", str(tmp_path / "best")).exit_code == 0

    out = tmp_path / "agent"
    line = error_line(invoke(home, "r@3", "--out", str(out)))
    assert line.startswith("error: r@3 is not in run 'r''s directory here and could not be fetched from the")
    assert line.endswith(  # as written: the CLI's redaction keeps a placeholder
        ": RemoteBackend needs the server's token: pass api_key=TOKEN or set AUTORL_TOKEN (`autorl serve` wrote it "
        "to HOME/serve/token unless given one)"
    )
    monkeypatch.setenv("AUTORL_TOKEN", TOKEN)
    line = error_line(invoke(home, "r@3", "--out", str(out)))
    assert line.endswith(f": autorl server {down} does not answer (ConnectError): is `autorl serve` running there?")
    assert not out.exists() and not list(tmp_path.glob(".agent*"))
    assert sorted(p.name for p in next((home / "artifacts").glob("train/*/checkpoints")).iterdir()) == ["0001", "0002"]
    line = error_line(invoke(home, "r@soon", "--out", str(out)))  # a mistake is told without asking the server
    assert line.startswith("error: 'soon' is not a checkpoint")


def test_a_cluster_run_exports_from_its_run_directory_without_joining_ray(tiny_model, tmp_path, monkeypatch):
    home = tmp_path / "home"
    lora_run(home, str(tiny_model), tiny_model)
    record_config(home, cluster={"ray": "auto", "replicas": 2})

    def no_backend(*args):
        pytest.fail("the export made the run's backend (a cluster run's joins Ray)")

    monkeypatch.setattr(pipelines.policy, "make_backend", no_backend)
    result = invoke(home, "r@best", "--out", str(tmp_path / "agent"))
    assert result.exit_code == 0, result.output
    assert "exported r step 1 (hf)" in result.output


def test_the_policys_run_directory_is_its_backends_local_and_remote(tiny_model, tmp_path, monkeypatch):
    """`Policy.run_dir` is the train stage's artifact directory without making the backend; the backend agrees."""
    home = tmp_path / "home"
    lora_run(home, str(tiny_model), tiny_model)
    local = RunView(home, "r", Counter(), connect=False).policy
    assert local.run_dir == local.backend.run_dir(local.model) == next((home / "artifacts").glob("train/*"))
    record_config(home, backend=f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AUTORL_TOKEN", TOKEN)
    remote = RunView(home, "r", Counter(), connect=False).policy
    assert remote.run_dir == remote.backend.run_dir(remote.model) == local.run_dir

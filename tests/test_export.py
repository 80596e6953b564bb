"""`autorl export` on the tiny random Llama: the merged model loads with transformers and answers as the base model
with the checkpoint's LoRA does, the PEFT adapter too; the model card carries the run's evidence; a user's mistake
is one line and nothing is left under --out."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from autorl.errors import AutoRLError
from autorl.export import hf
from autorl.export.ollama import modelfile
from pipelines.cli import app
from pipelines.export import export
from pipelines.run_lock import finished_run
from tests.helpers.benchmark_runs import PROMPT, VAL
from tests.helpers.cli import error_line
from tests.helpers.disk import fill, tmpfs
from tests.helpers.lora import lora_run
from tests.helpers.tiny import CHATML


@pytest.fixture
def home(tmp_path, tiny_model) -> Path:
    """A finished run `r` of the tiny model, two checkpoints (step 1 the best by training reward)."""
    lora_run(tmp_path / "home", str(tiny_model), tiny_model)
    return tmp_path / "home"


def invoke(home: Path, *args: str):
    return CliRunner().invoke(app, ["export", *args, "--home", str(home)])


def greedy(model, tokenizer, text: str, tokens: int = 12) -> list[int]:
    ids = tokenizer.apply_chat_template(
        [{"role": "system", "content": PROMPT}, {"role": "user", "content": text}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return out[0, ids.shape[1] :].tolist()


def test_the_merged_export_answers_as_the_checkpoint_and_carries_its_chat_template(home, tiny_model, tmp_path):
    out = tmp_path / "agent"
    result = invoke(home, "r@best", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "exported r step 1 (hf)" in result.output
    assert {"model.safetensors", "config.json", "generation_config.json", "README.md", "system_prompt.txt"} <= {
        p.name for p in out.iterdir()
    }
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template == CHATML
    exported = AutoModelForCausalLM.from_pretrained(out)
    checkpoint = next((home / "artifacts").glob("train/*/checkpoints/0001"))
    served = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), checkpoint)  # unmerged
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    ids = torch.tensor([tokenizer.encode("What is 6 x 7?")])
    with torch.no_grad():
        assert torch.allclose(exported(ids).logits, served(ids).logits, atol=1e-5)
        assert not torch.allclose(exported(ids).logits, base(ids).logits, atol=1e-3)  # the LoRA is in it
    assert [greedy(exported, tokenizer, t) for t in VAL] == [greedy(served, tokenizer, t) for t in VAL]
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == tokenizer.eos_token_id
    assert (out / "system_prompt.txt").read_text().strip() == PROMPT


def test_the_peft_export_loads_onto_its_base_and_equals_the_merged_one(home, tiny_model, tmp_path):
    assert invoke(home, "r@2", "--format", "peft", "--out", str(tmp_path / "peft")).exit_code == 0
    assert invoke(home, "r@latest", "--out", str(tmp_path / "hf")).exit_code == 0
    config = json.loads((tmp_path / "peft" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tiny_model)
    adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), tmp_path / "peft")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    ids = torch.tensor([[5, 9, 40, 41, 2]])
    with torch.no_grad():
        assert torch.allclose(adapter(ids).logits, merged(ids).logits, atol=1e-5)
    assert AutoTokenizer.from_pretrained(tmp_path / "peft").chat_template == CHATML


def test_the_model_card_carries_the_runs_evidence(home, tiny_model, tmp_path):
    record_path = home / "runs" / "r" / "run.json"
    record = json.loads(record_path.read_text())
    record["stages"] = {
        "preflight": {"summary": {"audit": {"verdict": "reliable", "line": "judge reliable: rank agreement 0.9"}}},
        "evaluate": {
            "summary": {
                "val_inputs": 3,
                "variants": {
                    "base": {"mean": 0.25, "ci_low": 0.1, "ci_high": 0.4, "inputs": 3},
                    "latest": {"mean": 0.75, "ci_low": 0.6, "ci_high": 0.9, "inputs": 3, "step": 2},
                },
            }
        },
    }
    record["cost"] = {"seconds": 120.0, "tokens_total": 8233, "usd": {"compute": 0.01, "api": 0.0, "total": 0.01}}
    record_path.write_text(json.dumps(record))
    prompt_file = next((home / "artifacts" / "system_prompt").glob("*/system_prompt.json"))
    secret = "sk-proj-AbCdEf1234567890AbCdEf1234567890XyZ"
    prompt_file.write_text(json.dumps({"system_prompt": f"{PROMPT}\nCall the API with {secret}."}))
    result = invoke(home, "r@2", "--out", str(tmp_path / "agent"))
    assert result.exit_code == 0 and "warning: the run's system prompt holds what looks like a secret" in result.output
    assert secret in (tmp_path / "agent" / "system_prompt.txt").read_text()  # as the agent was trained with it
    card = (tmp_path / "agent" / "README.md").read_text()
    assert secret not in card and "Call the API with <redacted>." in card  # the card is made to be shared
    assert str(tiny_model) not in card  # where the base model lies here is no one's business
    front, body = card.removeprefix("---\n").split("\n---\n", 1)
    metadata = yaml.safe_load(front)
    assert metadata["base_model_relation"] == "finetune" and metadata["library_name"] == "transformers"
    assert metadata["license"] == "other"  # the tiny model's directory names none
    assert "base_model" not in metadata  # a local directory is no Hugging Face id
    assert metadata["tags"] == ["autorl", "reinforcement-learning", "grpo", "lora"]
    assert re.search(r"by autorl \S+ \(commit [0-9a-f]{12}\):", body)  # the suite runs in a git checkout
    for evidence in (
        "> Arithmetic.",  # the task
        f"> {PROMPT}",
        "judge: `embedded`; its audit before training: **reliable** (judge reliable: rank agreement 0.9)",
        "| 2 | 0.400 |",  # the training curve up to the exported step
        "| latest | 2 | 0.750 | [0.600, 0.900] | 3/3 |",  # the evaluation with its CI
        "It never fired",  # the sentinel
        "120 s, 8233 tokens, $0.0100",
        "1 train and 3 validation inputs, generated from the task by `embedded`",
        "- LoRA: rank 4, alpha 8, on down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj",
        "autorl",
    ):
        assert evidence in body, evidence
    (home / "runs" / "r" / "benchmark").mkdir()
    (home / "runs" / "r" / "benchmark" / "results.md").write_text("| variant | mean |\n|---|---|\n| r@2 | 0.8 |\n")
    export(home, "r@1", "peft", tmp_path / "adapter")
    card = (tmp_path / "adapter" / "README.md").read_text()
    assert "From `autorl benchmark r` (`benchmark/results.md`); this export is `r@1`:" in card
    assert "| r@2 | 0.8 |" in card and "base_model_relation: adapter" in card
    assert "| 1 | 0.600 |" in card and "| 2 | 0.400 |" not in card  # the curve ends at the exported step


def test_the_card_of_a_run_warmed_up_with_sft_counts_its_rl_steps_and_says_so(home, tmp_path):
    record_path = home / "runs" / "r" / "run.json"
    record = json.loads(record_path.read_text())
    record["config"]["sft"]["bootstrap"] = 8  # step 1 was the warm-up's, step 2 the first RL step
    record["keys"]["sft"] = "sft-r"
    record_path.write_text(json.dumps(record))
    manifest = {"steps": 1, "conversations": 3, "epochs": 1, "file": "samples.jsonl", "final_loss": 0.5}
    (home / "artifacts" / "sft" / "sft-r").mkdir(parents=True)
    (home / "artifacts" / "sft" / "sft-r" / "artifact.json").write_text(json.dumps(manifest))
    history = home / "artifacts" / "train" / "train-r" / "history.jsonl"
    history.write_text(
        '{"step": 1, "sft": true, "loss": 0.5}\n{"step": 2, "reward": 0.4}\n{"step": 3, "reward": 0.9}\n'
    )
    export(home, "r@2", "peft", tmp_path / "agent")
    card = (tmp_path / "agent" / "README.md").read_text()
    assert "- RL steps: 1 (of 2 asked)" in card and "| 2 | 0.400 |" in card
    assert "| 1 |" not in card and "| 3 |" not in card  # the curve: RL steps up to the exported one
    assert "Warmed up with SFT before RL: 3 conversations of `samples.jsonl`, 1 epoch(s), in 1 model steps" in card


def test_best_is_the_best_of_the_checkpoints_the_run_kept(home, tmp_path):
    assert export(home, "r@best", "peft", tmp_path / "first").step == 1  # by training reward: 0.6, then 0.4
    shutil.rmtree(home / "artifacts" / "train" / "train-r" / "checkpoints" / "0001")  # as --keep-checkpoints does
    assert export(home, "r@best", "peft", tmp_path / "then").step == 2


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["nope", "--out", "{out}"], "error: no run named 'nope'"),
        (["r@7", "--out", "{out}"], "error: run 'r' has no checkpoint 0007 (checkpoints: 0001, 0002)"),
        (["r@soon", "--out", "{out}"], "error: 'soon' is not a checkpoint; use latest, best or a step"),
        (["r", "--out", "{out}", "--format", "onnx"], "error: --format 'onnx': use one of hf, peft, gguf"),
        (["r", "--out", "{out}", "--quant", "q8_0"], "error: --quant is for --format gguf"),
        (["r", "--out", "{out}", "--format", "gguf", "--quant", "q3_k"], "error: --quant 'q3_k': use one or more of"),
        (["r", "--out", "{out}", "--format", "gguf"], "error: GGUF export takes its tokenizer and metadata from"),
        (["r", "--out", "{out}/deeper"], "error: --out {out}/deeper: its directory {out} does not exist"),
    ],
)
def test_a_mistake_is_one_line_and_writes_nothing(home, tmp_path, args, line):
    out = tmp_path / "agent"
    result = invoke(home, *[a.format(out=out) for a in args])
    assert error_line(result).startswith(line.format(out=out))
    assert not out.exists() and not list(tmp_path.glob(".agent*"))


def test_an_existing_out_is_never_overwritten(home, tmp_path):
    out = tmp_path / "agent"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    assert error_line(invoke(home, "r", "--out", str(out))).startswith(f"error: --out {out} exists")
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_an_out_made_while_the_export_is_written_is_kept_and_the_export_is_not(home, tmp_path, monkeypatch):
    out = tmp_path / "agent"
    write_merged = hf.write_merged

    def meanwhile(*args):
        write_merged(*args)
        out.mkdir()  # another export to the same path, or the user, got there first
        (out / "mine.txt").write_text("keep")

    monkeypatch.setattr(hf, "write_merged", meanwhile)
    line = error_line(invoke(home, "r", "--out", str(out)))
    assert line.startswith(f"error: --out {out} was made while the export was written; it is left as it was")
    assert [p.name for p in out.iterdir()] == ["mine.txt"] and not list(tmp_path.glob(".agent*"))


def test_an_out_where_no_file_can_be_made_and_an_unknown_gguf_type_are_one_line(home, tmp_path):
    line = error_line(invoke(home, "r", "--out", "/sys/agent"))  # sysfs takes no new files, even from root
    assert line.startswith("error: --out /sys/agent: its directory /sys takes no files (")
    with pytest.raises(AutoRLError, match=r"^GGUF type q3_k: use one or more of f16, q8_0"):
        export(home, "r", "gguf", tmp_path / "agent", ["q8_0", "q3_k"])  # the Python API, as --quant is checked
    assert not (tmp_path / "agent").exists()


def test_a_run_still_training_is_refused(home, tmp_path):
    record = json.loads((home / "runs" / "r" / "run.json").read_text())
    with finished_run(home, "r", record["keys"]["train"]):  # as `autorl run` holds them
        line = error_line(invoke(home, "r", "--out", str(tmp_path / "agent")))
    assert line.startswith("error: run 'r' is in use by process") and "wait for it to finish" in line
    assert not (tmp_path / "agent").exists()
    assert invoke(home, "r", "--out", str(tmp_path / "agent")).exit_code == 0  # once it finished


def test_a_failure_midway_leaves_nothing_under_out(home, tmp_path, monkeypatch):
    write_merged = hf.write_merged

    def interrupted(*args):
        write_merged(*args)
        raise KeyboardInterrupt  # Ctrl-C once the weights are written

    monkeypatch.setattr(hf, "write_merged", interrupted)
    out = tmp_path / "agent"
    line = error_line(invoke(home, "r", "--out", str(out)))
    assert line == f"error: interrupted; nothing was written to {out}"
    assert not out.exists() and not list(tmp_path.glob(".agent*"))


def test_the_modelfile_gives_ollama_the_system_prompt_chat_format_and_stop():
    text = modelfile("model-q8_0.gguf", CHATML, 'Say """hi"""', ["<|im_end|>"])
    assert text.splitlines()[0] == "FROM ./model-q8_0.gguf"
    assert 'SYSTEM """Say " " "hi" " """"' in text
    assert "<|im_start|>{{ .Role }}" in text and 'PARAMETER stop "<|im_end|>"' in text
    assert "TEMPLATE" not in modelfile("m.gguf", "[INST] {{ messages }}", "p", []).split("#")[0]


def test_a_disk_too_small_is_one_line_before_writing_and_a_full_one_midway_leaves_nothing(home, tiny_model, tmp_path):
    weights = (tiny_model / "model.safetensors").stat().st_size
    with tmpfs(tmp_path / "disk", "1m") as disk:
        filler = fill(disk, leave=weights // 2)
        line = error_line(invoke(home, "r", "--out", str(disk / "agent")))
        assert line.startswith("error: the export needs about") and f"{disk} has" in line
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
        filler.unlink()
        filler = fill(disk, leave=weights + 8192)  # the weights fit, the tokenizer and card do not
        line = error_line(invoke(home, "r", "--out", str(disk / "agent")))
        assert line.startswith(f"error: disk full while writing {disk / 'agent'}; nothing was half-written")
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
        filler.unlink()
        assert invoke(home, "r", "--out", str(disk / "agent")).exit_code == 0  # space freed: the same command

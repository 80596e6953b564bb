"""The fault table's check of what a finished run left on disk (`faults.artifact_problems`)."""

import json
from pathlib import Path

import faults

from autorl.training.checkpoints import METRICS_FILE


def finished_run(home: Path, sft_summary: dict) -> None:
    """A run record whose inputs and train stages were computed (each artifact's manifest on disk, the train
    stage's checkpoint with its metrics) and whose sft stage is as given, with no artifact."""
    for stage, key in (("inputs", "k1"), ("train", "k3")):
        (home / "artifacts" / stage / key).mkdir(parents=True)
        (home / "artifacts" / stage / key / "artifact.json").write_text("{}")
    checkpoint = home / "artifacts" / "train" / "k3" / "checkpoints" / "0001"
    checkpoint.mkdir(parents=True)
    (checkpoint / METRICS_FILE).write_text("{}")
    (home / "runs" / "r").mkdir(parents=True)
    keys = {"inputs": "k1", "sft": "k2", "train": "k3"}
    stages = {"inputs": {"summary": {"inputs": 4}}, "sft": {"summary": sft_summary}, "train": {"summary": {}}}
    (home / "runs" / "r" / "run.json").write_text(json.dumps({"keys": keys, "stages": stages}))


def test_a_stage_the_run_skipped_has_no_artifact_and_is_not_incomplete(tmp_path):
    finished_run(tmp_path, {"skipped": "no --sft-file or --sft-bootstrap"})
    assert faults.artifact_problems(tmp_path, "r") == []


def test_a_stage_the_run_computed_without_its_manifest_is_incomplete(tmp_path):
    finished_run(tmp_path, {"examples": 8})
    assert faults.artifact_problems(tmp_path, "r") == ["incomplete sft/k2"]


def test_a_stage_the_run_never_reached_is_not_incomplete_and_one_it_finished_is_checked(tmp_path):
    """A run stopped in train (a full disk) has keys for every stage but entries only for those it finished:
    evaluate and report, never begun, are no problem; a recorded stage without its manifest is."""
    finished_run(tmp_path, {"skipped": "no --sft-file or --sft-bootstrap"})
    path = tmp_path / "runs" / "r" / "run.json"
    run = json.loads(path.read_text())
    run["keys"] |= {"evaluate": "k4", "report": "k5"}
    path.write_text(json.dumps(run))
    assert faults.artifact_problems(tmp_path, "r") == []

    (tmp_path / "artifacts" / "inputs" / "k1" / "artifact.json").unlink()
    assert faults.artifact_problems(tmp_path, "r") == ["incomplete inputs/k1"]

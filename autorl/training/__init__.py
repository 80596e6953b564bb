"""Training a LoRA: the GRPO trainer (trainer.py), the loss and its variants (loss.py), trajectories as token
sequences and masks (sequences.py), the engines that load the model (engines.py), the checkpoint layout
(checkpoints.py), how far a policy's samples are from the base model (drift.py)."""

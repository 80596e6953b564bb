"""Training a LoRA: the GRPO trainer (trainer.py), the loss and its variants (loss.py), ART's ratio shaping,
advantage balance and learning-rate multipliers (art_knobs.py), trajectories as token sequences and masks
(sequences.py), the engines that load the model (engines.py), the checkpoint layout (checkpoints.py), how far a
policy's samples are from the base model (drift.py)."""

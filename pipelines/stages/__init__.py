"""The pipeline's stages, in order. Each module declares its name, the stages it reads, the settings
its artifact depends on, and an async `run(ctx)` that writes the artifact and returns a summary."""

from . import baseline, evaluate, inputs, report, system_prompt, train

STAGE_MODULES = {m.NAME: m for m in (inputs, system_prompt, baseline, train, evaluate, report)}

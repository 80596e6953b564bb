"""What a run wrote, and how it is read: the bottom floor of the application.

A module per record: the run's directory (`run`: run.json, and `RunArtifacts`, what reading a run's artifacts
needs), each stage's artifact (`inputs`, `system_prompt`, `baseline`, `preflight`, `sft`, `train`, `evaluate`,
and `evaluation`, the judged answers' files the baseline and evaluate stages share), what each training step
took (`step_costs`) and what model calls cost (`pricing`: the Meter, LiteLLM's prices). The stages write their
artifacts through these modules and read their upstream stages' through them; the pipeline, `autorl runs` and
`show`, the report and `autorl benchmark` read runs only through them. They import nothing of `pipelines`
above them (tests/test_layout.py).
"""

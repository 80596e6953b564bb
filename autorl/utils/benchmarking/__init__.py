"""ART's `art.utils.benchmarking`: compare agent variants from what `model.log` recorded.

`load_trajectories.load_trajectories(project)` reads every model's `trajectories/<split>/NNNN.parquet` under a
backend's path (ART's layout) into one polars table, a row per trajectory; `charts.training_progress_chart` draws
a metric's mean per step, a line per model; `charts.percentage_comparison_bar_chart` a bar per model, its first
step's mean and what training added by its last; `pull_model_trajectories.pull_model_trajectories` copies a
model's trajectories from an `autorl serve` to this machine; `types.BenchmarkModelKey` names a model in a chart.
The modules have ART's paths, so ART's imports work with `art` changed to `autorl`; the charts are matplotlib
figures. Needs polars: `pip install 'autorl[plotting]'`.
"""

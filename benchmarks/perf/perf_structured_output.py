"""What structured output costs the embedded generator on CPU: one input-writing request with the generator's
JSON schema, with a simpler schema, as plain JSON mode, and with no schema, on the same server.

    python benchmarks/perf/perf_structured_output.py [--repeats 3] [--concurrency 1]

The request is the one autorl's input generator sent before issue 25 (DSPy's JSON adapter over the
`WriteInputs` signature, five inputs asked for), sampled with the same seed and temperature under each
response format:
- `bounded`: the generator's schema, an array of exactly 5 strings of 8-400 characters (strict);
- `simple`: an array of strings, no bounds;
- `json_object`: any JSON object;
- `none`: no response format.
Per format: seconds per request (the first request of a format also compiles its grammar, reported
apart), completion tokens, tokens/s, and whether the reply parses as the generator needs it. Prints the
ratio of each format's tokens/s to `bounded`'s, writes benchmarks/perf/results/structured_output.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from _common import print_table, ratio_entry, summary, write_result

from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
from autorl.serving.vllm_server import VLLMServer

TASK = "Reply to a customer asking for a refund, politely, in two sentences"
FORMATS = ("bounded", "simple", "json_object", "none")
ITEM = {"type": "string"}


def messages() -> list[dict]:
    """The generator's request before issue 25: DSPy's JSON adapter formatting of `WriteInputs`."""
    system = (
        "Your input fields are:\n1. `task` (str): what the agent does\n2. `guidance` (str): extra instructions "
        "for the inputs (may be empty)\n3. `examples` (list[str]): example inputs showing the style (may be empty)"
        "\n4. `difficulty` (str): how hard the inputs should be\n5. `length` (str): how long each input should be"
        "\n6. `avoid` (list[str]): inputs already written; write different ones\n7. `count` (int): how many "
        "inputs to write\nYour output fields are:\n1. `new_inputs` (list[str]): the new inputs, one complete user "
        "message each\nAll interactions will be structured in the following way, with the appropriate values "
        "filled in.\n\nInputs will have the following structure:\n\n[[ ## task ## ]]\n{task}\n\n[[ ## guidance ## "
        "]]\n{guidance}\n\n[[ ## examples ## ]]\n{examples}\n\n[[ ## difficulty ## ]]\n{difficulty}\n\n[[ ## "
        "length ## ]]\n{length}\n\n[[ ## avoid ## ]]\n{avoid}\n\n[[ ## count ## ]]\n{count}\n\nOutputs will be a "
        'JSON object with the following fields.\n\n{\n  "new_inputs": "{new_inputs}        # note: the value you '
        'produce must adhere to the JSON schema: {\\"type\\": \\"array\\", \\"items\\": {\\"type\\": \\"string\\"}}"'
        "\n}\nIn adhering to this structure, your objective is: \n        Write new inputs that real users would "
        "send to an AI agent doing the task. Each input is one\n        complete message to the agent, never an "
        "answer. Vary topics, wording and details; match the\n        requested difficulty and length; follow the "
        "guidance; match the style of the examples without\n        copying them; do not repeat any input listed "
        "in `avoid`."
    )
    user = (
        f"[[ ## task ## ]]\n{TASK}\n\n[[ ## guidance ## ]]\n\n\n[[ ## examples ## ]]\n[]\n\n[[ ## difficulty ## ]]\n"
        "easy: common, typical requests\n\n[[ ## length ## ]]\nshort: one sentence\n\n[[ ## avoid ## ]]\n[]\n\n"
        "[[ ## count ## ]]\n5\n\nRespond with a JSON object in the following order of fields: `new_inputs` (must "
        "be formatted as a valid Python list[str])."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def response_format(name: str) -> dict | None:
    if name == "none":
        return None
    if name == "json_object":
        return {"type": "json_object"}
    items = {"type": "string", "minLength": 8, "maxLength": 400} if name == "bounded" else ITEM
    array = {"type": "array", "items": items, **({"minItems": 5, "maxItems": 5} if name == "bounded" else {})}
    schema = {
        "type": "object",
        "properties": {"new_inputs": array},
        "required": ["new_inputs"],
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": "inputs", "schema": schema, "strict": name == "bounded"}}


def parses(text: str) -> bool:
    """Whether the reply holds a list of strings under new_inputs, as the generator reads it."""
    start, end = text.find("{"), text.rfind("}")
    try:
        value = json.loads(text[start : end + 1])
    except ValueError:
        return False
    inputs = value.get("new_inputs") if isinstance(value, dict) else None
    return isinstance(inputs, list) and bool(inputs) and all(isinstance(i, str) for i in inputs)


async def one(client: httpx.AsyncClient, url: str, fmt: str, seed: int) -> dict:
    body = {
        "model": DEFAULT_BASE_MODEL,
        "messages": messages(),
        "temperature": 0.7,
        "max_tokens": 1200,
        "seed": seed,
        **({"response_format": f} if (f := response_format(fmt)) else {}),
    }
    started = time.monotonic()
    reply = (await client.post(f"{url}/chat/completions", json=body, timeout=1800)).json()
    seconds = time.monotonic() - started
    tokens = reply["usage"]["completion_tokens"]
    return {"seconds": seconds, "tokens": tokens, "parses": parses(reply["choices"][0]["message"]["content"])}


async def measure(url: str, repeats: int, concurrency: int) -> dict:
    results: dict = {}
    async with httpx.AsyncClient() as client:
        for fmt in FORMATS:  # the first request of a format compiles its grammar: timed apart
            first = await one(client, url, fmt, seed=10_000)
            runs = []
            for rep in range(repeats):
                batch = await asyncio.gather(
                    *(one(client, url, fmt, seed=rep * concurrency + i) for i in range(concurrency))
                )
                runs += batch
            rates = [r["tokens"] / r["seconds"] for r in runs]
            results[fmt] = {
                "first_request_s": round(first["seconds"], 2),
                "seconds": summary([r["seconds"] for r in runs]),
                "completion_tokens": summary([r["tokens"] for r in runs]),
                "tokens_per_s": summary(rates),
                "parsed": sum(r["parses"] for r in runs) / len(runs),
            }
            print(fmt, json.dumps(results[fmt]), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        server = VLLMServer(resolve_base_model(DEFAULT_BASE_MODEL), DEFAULT_BASE_MODEL, Path(tmp) / "vllm.log")
        with server:
            results = asyncio.run(measure(server.base_url, args.repeats, args.concurrency))
    conditions = f"embedded model, one vLLM server, {args.concurrency} request(s) at a time, temperature 0.7"
    rows = [
        ratio_entry(
            f"generator tokens/s, {fmt} vs bounded schema",
            statistics.median(results[fmt]["tokens_per_s"]["samples"]),
            statistics.median(results["bounded"]["tokens_per_s"]["samples"]),
            "tok/s",
            None,
            True,
            conditions,
        )
        for fmt in FORMATS[1:]
    ]
    print_table(rows)
    path = write_result(
        "structured_output",
        {"repeats": args.repeats, "concurrency": args.concurrency, "formats": results, "ratios": rows},
        started,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

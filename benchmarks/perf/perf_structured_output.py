"""What structured output costs the embedded model on CPU: the judge's and the old generator's requests, each
with its JSON schema, with a simpler schema, as plain JSON mode and with no schema, on servers with vLLM's
structured-output backends (xgrammar, guidance) and with compact JSON.

    python benchmarks/perf/perf_structured_output.py [--repeats 3] [--servers default,guidance,compact]
        [--requests judge,generator] [--formats bounded,simple,json_object,none] [--as-sent]
        [--concurrency N] [--out NAME]

Two requests, each sampled with the same seeds and temperature under each response format:
- `generator`: the request autorl's input generator sent before issue 25 (DSPy's JSON adapter over the
  `WriteInputs` signature, five inputs asked for); `bounded` is its schema, an array of exactly 5 strings
  of 8-400 characters (strict), `simple` an array of strings without bounds;
- `judge`: RULER's request for a group of 4 answers (ruler.prompt.build_judge_prompt); `bounded` is
  RULER's schema (ruler.scores.response_format: one object per id, explanation at most 120 characters, a
  score in [0, 1]), `simple` the same keys without bounds;
and for both `json_object` (any JSON object) and `none` (no response format). Server variants: `default`
(vLLM's choice of backend), `guidance` (`--structured-outputs-config.backend guidance`), `compact`
(xgrammar with `disable_any_whitespace`: no whitespace between JSON tokens). Per server, request and format: seconds
per request (the first request of a format also compiles its grammar, reported apart), completion
tokens (at most `MAX_TOKENS`), tokens/s, and whether the reply parses. Prints each one's tokens/s against the default server's
`bounded` for the same request; writes benchmarks/perf/results/structured_output.json.

`--concurrency N` sends N requests at once (seeds apart) for each repeat, as a run's judge audit does (eight
re-judgings at once at its defaults): then seconds are each request's and tokens/s the whole batch's;
`--out NAME` writes results/NAME.json instead.

`--as-sent` sends the judge's request as RULER does instead (its `max_tokens` for four answers,
`ruler.scores.answer_tokens`, and no temperature: the server's default): then the parse rate and the tokens
of whole replies are what is measured, e.g. how often the judge rambles until `max_tokens` cuts its JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import httpx
from _common import print_table, ratio_entry, summary, write_result

from autorl.serving.config import ServerConfig
from autorl.serving.embedded import DEFAULT_BASE_MODEL, resolve_base_model
from autorl.serving.vllm_server import VLLMServer
from ruler.prompt import build_judge_prompt
from ruler.rubric import DEFAULT_RUBRIC
from ruler.scores import InvalidAnswer, answer_tokens, parse_verdicts
from ruler.scores import response_format as ruler_response_format

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


MAX_TOKENS = 128
"""Tokens per request: the rate is what is measured (a reply cut by the cap does not parse, and is counted so)."""
SERVERS = {
    "default": [],
    "guidance": ["--structured-outputs-config.backend", "guidance"],
    # vLLM refuses disable_any_whitespace unless the backend is named
    "compact": [
        "--structured-outputs-config.backend",
        "xgrammar",
        "--structured-outputs-config.disable_any_whitespace",
        "true",
    ],
}


def judge_request() -> tuple[list[dict], list[str]]:
    """RULER's messages for a group of four answers to one refund request, and the group's ids."""
    question = [
        {"role": "system", "content": "You reply to customers, politely, in two sentences."},
        {"role": "user", "content": "Hi, the kettle I bought last week stopped working. Can I get my money back?"},
    ]
    answers = [
        "I am sorry to hear that. Please send it back and we will refund you in full.",
        "No refunds.",
        "Thank you for telling us; we have started your refund, which arrives within five days.",
        "Kettles are great for tea.",
    ]
    prompt = build_judge_prompt(
        [[*question, {"role": "assistant", "content": a}] for a in answers], DEFAULT_RUBRIC, task=TASK
    )
    return prompt.messages, prompt.ids


def response_format(request: str, name: str) -> dict | None:
    if name == "none":
        return None
    if name == "json_object":
        return {"type": "json_object"}
    if request == "judge":
        bounded = ruler_response_format(judge_request()[1])
        if name == "bounded":
            return bounded
        entry = {"type": "object", "properties": {"explanation": {"type": "string"}, "score": {"type": "number"}}}
        schema = {
            "type": "object",
            "properties": {"scores": {"type": "object", "properties": dict.fromkeys(judge_request()[1], entry)}},
        }
        return {"type": "json_schema", "json_schema": {"name": "ruler_scores", "schema": schema}}
    items = {"type": "string", "minLength": 8, "maxLength": 400} if name == "bounded" else ITEM
    array = {"type": "array", "items": items, **({"minItems": 5, "maxItems": 5} if name == "bounded" else {})}
    schema = {
        "type": "object",
        "properties": {"new_inputs": array},
        "required": ["new_inputs"],
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": "inputs", "schema": schema, "strict": name == "bounded"}}


def parses(request: str, text: str) -> bool:
    """Whether the reply is what its reader needs: RULER's verdicts, or a list of strings under new_inputs."""
    if request == "judge":
        try:
            parse_verdicts(text, judge_request()[1])
        except InvalidAnswer:
            return False
        return True
    start, end = text.find("{"), text.rfind("}")
    try:
        value = json.loads(text[start : end + 1])
    except ValueError:
        return False
    inputs = value.get("new_inputs") if isinstance(value, dict) else None
    return isinstance(inputs, list) and bool(inputs) and all(isinstance(i, str) for i in inputs)


async def one(client: httpx.AsyncClient, url: str, request: str, fmt: str, seed: int, as_sent: bool) -> dict:
    sampling = {"max_tokens": answer_tokens(len(judge_request()[1]))} if as_sent else {"temperature": 0.7}
    body = {
        "model": DEFAULT_BASE_MODEL,
        "messages": messages() if request == "generator" else judge_request()[0],
        "max_tokens": MAX_TOKENS,
        **sampling,
        "seed": seed,
        **({"response_format": f} if (f := response_format(request, fmt)) else {}),
    }
    started = time.monotonic()
    reply = (await client.post(f"{url}/chat/completions", json=body, timeout=1800)).json()
    seconds = time.monotonic() - started
    tokens = reply["usage"]["completion_tokens"]
    text = reply["choices"][0]["message"]["content"]
    return {"seconds": seconds, "tokens": tokens, "parses": parses(request, text)}


async def measure(
    url: str, key: str, repeats: int, requests: list[str], formats: list[str], as_sent: bool, concurrency: int
) -> dict:
    results: dict = {}
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as client:
        for request in requests:
            for fmt in formats:  # the first request of a format compiles its grammar: timed apart
                first = await one(client, url, request, fmt, 10_000, as_sent)
                runs, rates = [], []
                for rep in range(repeats):
                    started = time.monotonic()
                    batch = await asyncio.gather(
                        *(one(client, url, request, fmt, rep * concurrency + i, as_sent) for i in range(concurrency))
                    )
                    runs += batch
                    rates.append(sum(r["tokens"] for r in batch) / (time.monotonic() - started))
                results[f"{request}/{fmt}"] = {
                    "first_request_s": round(first["seconds"], 2),
                    "seconds": summary([r["seconds"] for r in runs]),
                    "completion_tokens": summary([r["tokens"] for r in runs]),
                    "tokens_per_s": summary(rates),
                    "parsed": sum(r["parses"] for r in [first, *runs]) / (len(runs) + 1),
                }
                print(request, fmt, json.dumps(results[f"{request}/{fmt}"]), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--servers", default=",".join(SERVERS), help="Server variants, comma-separated.")
    parser.add_argument("--requests", default="judge,generator", help="Requests, comma-separated.")
    parser.add_argument("--formats", default=",".join(FORMATS), help="Response formats, comma-separated.")
    parser.add_argument("--as-sent", action="store_true", help="The judge's request with RULER's sampling.")
    parser.add_argument("--concurrency", type=int, default=1, help="Requests sent at once per repeat.")
    parser.add_argument("--out", default="structured_output", help="The result's name (results/NAME.json).")
    args = parser.parse_args()
    requests, formats = args.requests.split(","), args.formats.split(",")
    if args.as_sent and requests != ["judge"]:
        parser.error("--as-sent applies to the judge's request: pass --requests judge")
    started = time.monotonic()
    results: dict = {}
    for variant in args.servers.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            config = ServerConfig(extra_args=SERVERS[variant])
            server = VLLMServer(
                resolve_base_model(DEFAULT_BASE_MODEL), DEFAULT_BASE_MODEL, Path(tmp) / "vllm.log", config
            )
            with server:
                print(f"== server {variant}", flush=True)
                results[variant] = asyncio.run(
                    measure(
                        server.base_url, server.api_key, args.repeats, requests, formats, args.as_sent, args.concurrency
                    )
                )
    sampling = "RULER's max_tokens, the server's temperature" if args.as_sent else "temperature 0.7"
    at_once = "one request at a time" if args.concurrency == 1 else f"{args.concurrency} requests at once"
    conditions = f"embedded model, {at_once}, {sampling}, seeds 0..repeats x requests - 1"
    base = results.get("default", next(iter(results.values())))
    rows = [
        ratio_entry(
            f"{key} tokens/s on the {variant} server vs {key.split('/')[0]}/bounded on default",
            figures["tokens_per_s"]["median"],
            base[f"{key.split('/')[0]}/bounded"]["tokens_per_s"]["median"],
            "tok/s",
            None,
            True,
            conditions,
        )
        for variant, per_key in results.items()
        for key, figures in per_key.items()
        if not (variant == "default" and key.endswith("/bounded")) and f"{key.split('/')[0]}/bounded" in base
    ]
    print_table(rows)
    settings = {"repeats": args.repeats, "as_sent": args.as_sent, "concurrency": args.concurrency}
    path = write_result(args.out, {**settings, "servers": results, "ratios": rows}, started)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

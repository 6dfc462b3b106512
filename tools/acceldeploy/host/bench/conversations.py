"""The `conversations` bench dataset: multi-turn chats, each turn's prompt extending the last.

Every conversation opens with one long system prompt (shared by all of them, as a product's
instructions are) and a first user message of its own, with an image when the profile says so;
each next turn sends the whole history again: the system prompt, every earlier question and the
model's real answers, and a new question. So a server that saw the conversation's last turn
holds its prefix in its cache, and one that did not computes the whole prompt again: what the
gateway's routing decides.

vLLM's own `vllm bench serve` sends one independent request per prompt (its datasets keep a
conversation's first turn only), and its multi-turn benchmark lives in the vLLM repository's
`benchmarks/multi_turn`, outside the wheel. So this module runs the load: every conversation
open at once, a user's next turn after its answer and some thought, at most `max_concurrency`
requests in flight, each streamed. Its result has the keys vLLM's bench writes
(`median_ttft_ms`, `p99_ttft_ms`, `request_throughput`, ...), so the summary, intervals and
baselines read it as they read vLLM's.

Standard library only: it is shipped to the host beside the driver.
"""

from __future__ import annotations

import base64
import json
import os
import random
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Plain words for the generated text: the tokenizer turns each into one token or a few.
WORDS = (
    "report", "invoice", "shipment", "camera", "window", "river", "garden", "engine", "ticket",
    "market", "budget", "signal", "doctor", "letter", "planet", "museum", "battery", "bridge",
    "harbor", "coffee", "forest", "number", "sensor", "switch", "contract", "season",
    "kitchen", "station", "mirror", "pocket", "rocket", "silver", "throttle", "valley",
    "winter", "yellow",
)  # fmt: skip
PERCENTILES = (50, 90, 99)
TIMEOUT_SECONDS = 600.0


SESSION_HEADER = "X-Session-ID"


@dataclass
class Conversation:
    index: int
    session: str  # unique to the run, round and conversation
    first: str
    follow_ups: list[str]
    image: str | None = None  # a data: URL


@dataclass
class Turn:
    ok: bool
    ttft: float = 0.0
    e2el: float = 0.0
    output_tokens: int = 0
    input_tokens: int = 0
    error: str = ""


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def system_prompt(profile: Mapping[str, Any]) -> str:
    """The prompt every conversation shares: the same for every round and run of a profile."""
    rng = random.Random(f"system-{profile['seed']}")
    return "You are the assistant of a logistics desk. " + words(rng, profile["system_len"])


def build(
    profile: Mapping[str, Any], round_number: int, images: list[Path], run: str = ""
) -> list[Conversation]:
    """The round's conversations: new ones each round and each run (`run`, the run's id, opens
    every first message), so no round finds another's conversations cached, only the shared
    system prompt, as with new users. The rest is the same for every run of a seed."""
    rng = random.Random(f"conversations-{profile['seed']}-{round_number}")
    found = []
    for index in range(profile["prompts"]):
        session = f"{run}-{round_number}-{index}"
        first = f"Case {session}: " + words(rng, profile["input_len"])
        follow = [words(rng, profile["input_len"]) + "?" for _ in range(profile["turns"] - 1)]
        image = None
        if images:
            data = images[index % len(images)].read_bytes()
            image = "data:image/png;base64," + base64.b64encode(data).decode()
        found.append(Conversation(index, session, first, follow, image))
    return found


def first_messages(system: str, conversation: Conversation) -> list[dict[str, Any]]:
    content: Any = conversation.first
    if conversation.image:
        content = [
            {"type": "text", "text": conversation.first},
            {"type": "image_url", "image_url": {"url": conversation.image}},
        ]
    return [{"role": "system", "content": system}, {"role": "user", "content": content}]


def request(
    url: str,
    model: str,
    messages: list[dict[str, Any]],
    output_len: int,
    session: str | None = None,
) -> Turn:
    """One streamed chat completion: time to its first token, to its end, and its tokens;
    `session` names the conversation in SESSION_HEADER, as a chat app that keeps one does."""
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": output_len,
        "min_tokens": output_len,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"Content-Type": "application/json"}
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    if session:
        headers[SESSION_HEADER] = session
    started = time.perf_counter()
    turn = Turn(ok=False)
    text: list[str] = []
    data = json.dumps(body).encode()
    try:
        call = urllib.request.Request(url + "/v1/chat/completions", data=data, headers=headers)
        with urllib.request.urlopen(call, timeout=TIMEOUT_SECONDS) as answer:
            for raw in answer:
                line = raw.decode().strip()
                if line == "data: [DONE]":
                    turn.ok = True  # the answer is whole: not waiting for the connection to close
                    break
                if not line.startswith("data:"):
                    continue
                chunk = json.loads(line[5:])
                choices = chunk.get("choices") or []
                if choices and not turn.ttft:
                    # vLLM's first chunk comes with the first token (its role, maybe no text)
                    turn.ttft = time.perf_counter() - started
                text.extend((c.get("delta") or {}).get("content") or "" for c in choices)
                usage = chunk.get("usage")
                if usage:
                    turn.output_tokens = int(usage.get("completion_tokens") or 0)
                    turn.input_tokens = int(usage.get("prompt_tokens") or 0)
    except (OSError, urllib.error.URLError, ValueError) as exc:
        turn.error = str(exc)[:300]
        return turn
    turn.e2el = time.perf_counter() - started
    if not turn.ok:
        turn.error = "the answer ended before data: [DONE]"
    messages.append({"role": "assistant", "content": "".join(text)})
    return turn


def run(plan: Mapping[str, Any], round_number: int, images: list[Path]) -> dict[str, Any]:
    """One round: every conversation open at once, as users are; each turn is sent when the
    last one's answer is in and the user has thought for about `think_time` seconds (0.5x to
    1.5x, seeded); at most `max_concurrency` requests in flight. So other conversations' turns
    come between a conversation's turns, as on a shared service. The result in vLLM's keys."""
    profile = plan["profile"]
    url = plan.get("load_url") or plan["base_url"]
    system = system_prompt(profile)
    conversations = build(profile, round_number, images, Path(plan["run_dir"]).parent.name)
    rng = random.Random(f"think-{profile['seed']}-{round_number}")
    # (ready at, conversation, its messages so far, its next turn)
    ready = [(0.0, c.index, first_messages(system, c), 0) for c in conversations]
    by_index = {c.index: c for c in conversations}
    turns: list[Turn] = []
    busy = [0]
    wake = threading.Condition()
    started = time.perf_counter()

    def take() -> tuple[float, int, list[dict[str, Any]], int] | None:
        with wake:
            while True:
                if not ready and not busy[0]:
                    return None
                now = time.perf_counter() - started
                due = min(ready, default=None)
                if due is not None and due[0] <= now:
                    ready.remove(due)
                    busy[0] += 1
                    return due
                wake.wait(None if due is None else due[0] - now)

    def worker() -> None:
        while (item := take()) is not None:
            _, index, messages, number = item
            conversation = by_index[index]
            if number:
                messages.append({"role": "user", "content": conversation.follow_ups[number - 1]})
            session = conversation.session if profile.get("session_header") else None
            turn = request(url, plan["served_model_name"], messages, profile["output_len"], session)
            with wake:
                turns.append(turn)
                busy[0] -= 1
                # a conversation cannot go on without its answer
                if turn.ok and number + 1 < profile["turns"]:
                    think = profile["think_time"] * rng.uniform(0.5, 1.5)
                    ready.append(
                        (time.perf_counter() - started + think, index, messages, number + 1)
                    )
                wake.notify_all()

    workers = [threading.Thread(target=worker) for _ in range(profile["max_concurrency"] or 1)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return result(turns, time.perf_counter() - started)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * share / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def result(turns: list[Turn], duration: float) -> dict[str, Any]:
    done = [t for t in turns if t.ok]
    found: dict[str, Any] = {
        "completed": len(done),
        "failed": len(turns) - len(done),
        "duration": duration,
        "request_throughput": len(done) / duration if duration else 0.0,
        "output_throughput": sum(t.output_tokens for t in done) / duration if duration else 0.0,
        "total_input_tokens": sum(t.input_tokens for t in done),
        "total_output_tokens": sum(t.output_tokens for t in done),
        "errors": sorted({t.error for t in turns if t.error})[:5],
    }
    figures = {
        "ttft": [t.ttft for t in done],
        "e2el": [t.e2el for t in done],
        "tpot": [(t.e2el - t.ttft) / (t.output_tokens - 1) for t in done if t.output_tokens > 1],
    }
    for name, seconds in figures.items():
        if not seconds:
            continue
        ms = [s * 1000 for s in seconds]
        found[f"mean_{name}_ms"] = statistics.fmean(ms)
        found[f"median_{name}_ms"] = statistics.median(ms)
        for share in PERCENTILES:
            found[f"p{share}_{name}_ms"] = percentile(ms, share)
    return found

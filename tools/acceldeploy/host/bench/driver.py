"""Runs on the host, in the service's own Python env: vLLM's `vllm bench serve` (its
`main()`, imported once for every round) against one systemd service, with a sampler thread
recording the service's memory (unitmemory.py, shipped beside it) and vLLM's `/metrics`
through every phase.

    python driver.py PLAN.json

Standard library at module level (it is shipped to hosts as one file; vLLM is imported only
to run the benchmark). It prints one `@@bench {json}` line per event on stdout for the
controller's live table; vLLM's own output goes to RUN_DIR/vllm-bench.log. The decisions it
makes (which rate next in an SLA search) are plain functions, tested on the controller.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

try:
    from ..unitmemory import process_tree_memory
    from . import conversations
except ImportError:  # on the host: shipped beside this file
    import conversations  # type: ignore[no-redef]
    from unitmemory import process_tree_memory  # type: ignore[no-redef]

EVENT = "@@bench "
INF = float("inf")
# /metrics series kept per sample (counters carry _total in the exposition): vLLM 0.12's names
# (planner.stacks.DEFAULT_METRICS); the runner sends the host's stack's names in the plan.
METRICS = {
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits",
    "vllm:mm_cache_queries_total": "mm_cache_queries",
    "vllm:mm_cache_hits_total": "mm_cache_hits",
}


def parse_metrics(text: str, wanted: Mapping[str, str] = METRICS) -> dict[str, float]:
    """The series of `wanted` ({series: key}) from a Prometheus exposition, summed over their
    labels."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        key = wanted.get(name)
        if key is None:
            continue
        try:
            found[key] = found.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
    return found


def sla_met(result: dict[str, Any], sla_ms: dict[str, float]) -> bool:
    """Every limit met, read from vLLM's result keys (`p99_ttft` -> `p99_ttft_ms`)."""
    if result.get("completed", 0) == 0 or result.get("failed", 0):
        return False
    return all(float(result.get(f"{key}_ms", INF)) <= limit for key, limit in sla_ms.items())


def sla_search(
    run: Callable[[float], bool], start: float, top: float, bisect_steps: int
) -> tuple[float | None, list[tuple[float, bool]]]:
    """The highest rate that met the SLA: one run at unlimited rate (met: that is the answer),
    then double from `start` until it fails or passes `top`, then bisect between the last
    pass and the first fail. Returns (best rate or None, every (rate, met) tried)."""
    tried: list[tuple[float, bool]] = []

    def attempt(rate: float) -> bool:
        met = run(rate)
        tried.append((rate, met))
        return met

    if attempt(INF):
        return INF, tried
    low, high, rate = None, None, start
    while rate <= top:
        if attempt(rate):
            low, rate = rate, rate * 2
        else:
            high = rate
            break
    if low is None or high is None:
        return low, tried
    for _ in range(bisect_steps):
        middle = round((low + high) / 2, 3)
        if attempt(middle):
            low = middle
        else:
            high = middle
    return low, tried


def emit(event: str, **data: Any) -> None:
    print(EVENT + json.dumps({"event": event, "t": time.time(), **data}), flush=True)


def run_cmd(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def read_memory(plan: dict[str, Any]) -> dict[str, Any]:
    """Raw memory reading: cpu in MiB here; smi output as text for the controller's parsers."""
    source = plan["memory_source"]
    if source == "process_tree":
        return process_tree_memory(plan["unit"])
    return {"raw": run_cmd(*plan["memory_command"])}


def http_get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


class Sampler(threading.Thread):
    """Memory and /metrics every `interval` seconds into samples.jsonl, tagged with the
    current phase. A sample is taken under `lock` and a phase changes under it, so every
    reading tagged with a phase was read inside it: a round's window never takes in the next
    round's first requests (reading a big server's smaps takes a second or more)."""

    def __init__(self, plan: dict[str, Any], out: Path) -> None:
        super().__init__(daemon=True)
        self.plan, self.out, self.phase = plan, out, "client start"
        self.halt = threading.Event()
        self.lock = threading.Lock()
        # set by mark(): every phase gets a sample at its start, however short it is
        self.wake = threading.Event()

    def sample(self) -> dict[str, Any]:
        row: dict[str, Any] = {"t": time.time(), "phase": self.phase}
        row["memory"] = read_memory(self.plan)
        try:
            text = http_get(self.plan["base_url"] + "/metrics")
            row["metrics"] = parse_metrics(text, self.plan.get("metrics") or METRICS)
        except (OSError, urllib.error.URLError):
            row["metrics"] = {}
        return row

    def run(self) -> None:
        with self.out.open("a") as f:
            while not self.halt.is_set():
                started = time.monotonic()
                with self.lock:
                    f.write(json.dumps(self.sample()) + "\n")
                    f.flush()
                self.wake.wait(
                    max(0.0, self.plan["sample_interval"] - (time.monotonic() - started))
                )
                self.wake.clear()


def mark(sampler: Sampler, phase: str, settle: float) -> None:
    """Enter `phase` (once the sample under way is written) and let the sampler record it for
    `settle` seconds."""
    with sampler.lock:
        sampler.phase = phase
    sampler.wake.set()
    emit("phase", phase=phase)
    time.sleep(settle)


def wait_healthy(base: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, urllib.error.URLError):
            http_get(base + "/health")
            return
        time.sleep(1.0)
    raise SystemExit(f"{base}/health did not answer within {timeout:.0f} s")


@contextlib.contextmanager
def image_server(directory: Path) -> Iterator[int]:
    """The generated images over HTTP on 127.0.0.1 (vLLM fetches image URLs; file:// needs a
    server flag the service does not have)."""
    handler = functools.partial(QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def bench_argv(plan: dict[str, Any], rate: float, result_dir: Path, run: int) -> list[str]:
    """vllm bench serve's flags for one run (parsed by vLLM's own parser)."""
    p = plan["profile"]
    load = plan.get("load_url") or plan["base_url"]  # a gateway's frontend, or the service
    argv = [
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
        "--base-url", load, "--model", plan["served_model_name"],
        "--tokenizer", plan["tokenizer"], "--num-prompts", str(p["prompts"]),
        "--request-rate", "inf" if rate == INF else str(rate), "--seed", str(p["seed"]),
        "--num-warmups", str(p["warmups"]), "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99", "--save-result", "--result-dir", str(result_dir),
        "--result-filename", f"run={run}.json", "--disable-tqdm",
        "--ready-check-timeout-sec", "0", "--label", plan["label"],
    ]  # fmt: skip
    if p["max_concurrency"]:
        argv += ["--max-concurrency", str(p["max_concurrency"])]
    if p.get("ignore_eos"):
        argv.append("--ignore-eos")
    if p["goodput_ms"]:
        argv += ["--goodput", *(f"{k}:{v:g}" for k, v in p["goodput_ms"].items())]
    dataset = p["dataset"]
    if dataset in ("images", "sharegpt"):
        argv += ["--dataset-name", "sharegpt", "--dataset-path", plan["dataset_file"]]
        argv += ["--sharegpt-output-len", str(p["output_len"])]
    elif dataset == "hf":
        argv += ["--dataset-name", "hf", "--dataset-path", p["dataset_path"]]
        argv += ["--hf-output-len", str(p["output_len"])]
        if p["hf_split"]:
            argv += ["--hf-split", p["hf_split"]]
    else:
        argv += ["--dataset-name", dataset, "--random-input-len", str(p["input_len"])]
        argv += ["--random-output-len", str(p["output_len"])]
        if dataset == "random-mm":
            buckets = {(h, w, 1): 1.0 / len(p["image_sizes"]) for w, h in p["image_sizes"]}
            argv += ["--random-mm-base-items-per-request", "1"]
            argv += ["--random-mm-limit-mm-per-prompt", json.dumps({"image": 1, "video": 0})]
            argv += ["--random-mm-bucket-config", str(buckets)]
    return argv


def own_load(plan: dict[str, Any]) -> bool:
    """The profile's load is conversations.py's, not vLLM's (profiles.CONVERSATIONS)."""
    return bool(plan["profile"]["dataset"] == "conversations")


def rate_dir(run_dir: Path, rate: float, prefix: str = "BENCH") -> Path:
    """vLLM's sweep layout (`vllm bench sweep plot` reads DIR/**/summary.json)."""
    return run_dir / f"{prefix}-request_rate={'inf' if rate == INF else f'{rate:g}'}"


def run_point(
    plan: dict[str, Any],
    sampler: Sampler,
    rate: float,
    rounds: int,
    log: Any,
    kind: str = "round",
    prefix: str = "BENCH",
) -> list[dict[str, Any]]:
    """`rounds` identical runs at one rate; an idle settle after each marks its memory. The
    phases are "<kind> N @ RATE" and "after <kind> N @ RATE" (the verdict reads "round").
    A conversations profile runs its own load (conversations.py), new conversations each round."""
    out = rate_dir(Path(plan["run_dir"]), rate, prefix)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    images = sorted((Path(plan["run_dir"]) / "images").glob("*.png"))
    for number in range(rounds):
        label = "inf" if rate == INF else f"{rate:g}"
        mark(sampler, f"{kind} {number + 1} @ {label}", 0)
        started = time.time()
        if own_load(plan):
            result = conversations.run(plan, number, images)
            (out / f"run={number}.json").write_text(json.dumps(result))
        else:
            from vllm.benchmarks import serve

            args = serve_parser(serve).parse_args(bench_argv(plan, rate, out, number))
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                result = serve.main(args)
        emit(
            "round", rate=label, round=number + 1, seconds=round(time.time() - started, 2),
            completed=result.get("completed"), failed=result.get("failed"),
            throughput=result.get("request_throughput"),
            p99_ttft_ms=result.get("p99_ttft_ms"),
        )  # fmt: skip
        results.append({**result, "run_number": number, "request_rate": label})
        mark(sampler, f"after {kind} {number + 1} @ {label}", plan["settle"])
    (out / "summary.json").write_text(json.dumps(results, indent=2))
    return results


def serve_parser(serve: Any) -> Any:
    import argparse

    parser = argparse.ArgumentParser(prog="vllm bench serve")
    serve.add_cli_args(parser)
    return parser


def check_argv(plan: dict[str, Any]) -> None:
    """vLLM's own parser on this profile's flags, before any request (exit 2 naming the flag).
    A conversations profile has none (its own load)."""
    if own_load(plan):
        return
    from vllm.benchmarks import serve

    rate = plan["profile"]["request_rate"]
    serve_parser(serve).parse_args(bench_argv(plan, INF if rate is None else rate, Path("."), 0))


def restart_unit(plan: dict[str, Any], sampler: Sampler) -> None:
    subprocess.run(["systemctl", "stop", plan["unit"]], check=True)
    mark(sampler, "before start", plan["settle"])
    subprocess.run(["systemctl", "start", plan["unit"]], check=True)
    wait_healthy(plan["base_url"], plan["start_timeout"])


def reset_caches(plan: dict[str, Any], sampler: Sampler) -> None:
    for path in ("/reset_mm_cache", "/reset_prefix_cache"):
        request = urllib.request.Request(plan["base_url"] + path, method="POST")
        with contextlib.suppress(OSError, urllib.error.URLError):
            urllib.request.urlopen(request, timeout=30).read()
        mark(sampler, f"after {path.lstrip('/')}", plan["settle"])


def main(plan_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text())
    run_dir = Path(plan["run_dir"])
    if plan.get("api_key_file"):
        # vllm bench serve's OpenAI backends read the key from here; never on a command line
        for line in Path(plan["api_key_file"]).read_text().splitlines():
            if line.startswith("VLLM_API_KEY="):
                os.environ["OPENAI_API_KEY"] = line.split("=", 1)[1].strip().strip('"')
    sampler = Sampler(plan, run_dir / "samples.jsonl")
    sampler.start()
    profile = plan["profile"]
    try:
        with contextlib.ExitStack() as stack:
            log = stack.enter_context((run_dir / "vllm-bench.log").open("a"))
            if profile["dataset"] == "images":
                port = stack.enter_context(image_server(run_dir / "images"))
                text = (run_dir / "dataset.template.json").read_text()
                (run_dir / "dataset.json").write_text(
                    text.replace("{IMAGES}", f"http://127.0.0.1:{port}")
                )
            check_argv(plan)
            if plan["restart"]:
                restart_unit(plan, sampler)
            wait_healthy(plan["base_url"], 60)
            mark(sampler, "ready", plan["idle_seconds"])
            sweep = profile["sweep"]
            if sweep:

                def attempt(rate: float) -> bool:
                    (result,) = run_point(plan, sampler, rate, 1, log, kind="sla point")
                    return sla_met(result, profile["sla_ms"])

                best, tried = sla_search(
                    attempt, sweep["start_rate"], sweep["max_rate"], sweep["bisect_steps"]
                )
                found = {
                    "limits_ms": profile["sla_ms"],
                    "best_rate": None if best is None else ("inf" if best == INF else best),
                    "tried": [["inf" if r == INF else r, m] for r, m in tried],
                }
                (run_dir / "sla.json").write_text(json.dumps(found))
                emit("sla", **found)
                if best is not None and profile["rounds"] > 1:
                    # identical rounds at the rate found: the memory verdict for it
                    run_point(plan, sampler, best, profile["rounds"], log, prefix="ROUNDS")
            else:
                rate = INF if profile["request_rate"] is None else float(profile["request_rate"])
                run_point(plan, sampler, rate, profile["rounds"], log)
            if plan["dev_mode"]:
                reset_caches(plan, sampler)
    finally:
        sampler.halt.set()
        sampler.wake.set()
        sampler.join()
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""The conversations bench dataset (host/bench/conversations.py): conversations whose turns extend
one another, new ones each round, one system prompt for all; the result in vLLM's keys; and the
fleet's prefix-cache hit rate from each server's counters (bench/runner.py). The lab runs it
for real through the gateway (tests/lab/test_gateway_affinity.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acceldeploy.bench import profiles, report, runner
from acceldeploy.host.bench import conversations
from acceldeploy.verify.api import png


def profile() -> dict:
    return profiles.pick(None, "conversations").to_dict()


def test_the_builtin_profile_is_a_multi_turn_image_chat() -> None:
    found = profiles.pick(None, "conversations")
    assert (found.dataset, found.turns, found.first_image) == ("conversations", 4, True)
    assert found.system_len > 0 and found.max_concurrency


def test_each_round_has_new_conversations_and_every_conversation_one_system_prompt(
    tmp_path: Path,
) -> None:
    image = tmp_path / "img-0000.png"
    image.write_bytes(png(32, 24, seed=1))
    first = conversations.build(profile(), 0, [image], "run-1")
    again = conversations.build(profile(), 0, [image], "run-1")
    assert first == again  # the same seed and run, the same load
    second = conversations.build(profile(), 1, [image], "run-1")
    assert {c.first for c in first}.isdisjoint({c.first for c in second})
    other_run = conversations.build(profile(), 0, [image], "run-2")
    assert {c.first for c in first}.isdisjoint({c.first for c in other_run})
    assert [c.follow_ups for c in first] == [c.follow_ups for c in other_run]
    assert len(first) == profile()["prompts"]
    assert all(len(c.follow_ups) == profile()["turns"] - 1 for c in first)
    system = conversations.system_prompt(profile())
    assert len(system.split()) > profile()["system_len"]
    opening = conversations.first_messages(system, first[0])
    assert opening[0] == {"role": "system", "content": system}
    text_part, image_part = opening[1]["content"]
    assert image_part["image_url"]["url"].startswith("data:image/png;base64,")
    assert text_part == {"type": "text", "text": first[0].first}


def test_with_session_header_every_turn_names_its_conversation(tmp_path: Path) -> None:
    """A chat server on loopback that answers every turn: with `session_header` each request
    carries X-Session-ID, one per conversation, the same on all of its turns; without it none."""
    import http.server
    import threading

    from acceldeploy.gateway import routing

    # the header the gateway's affinity keys on by default (conversations.py ships to the host
    # alone, so it cannot import routing)
    assert conversations.SESSION_HEADER.lower() == routing.Affinity.header
    seen: list[tuple[str | None, str]] = []

    class Chat(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            first_user = next(m for m in body["messages"] if m["role"] == "user")["content"]
            seen.append((self.headers.get(conversations.SESSION_HEADER), first_user))
            chunks = [{"choices": [{"delta": {"content": "ok"}}]},
                      {"choices": [], "usage": {"completion_tokens": 1, "prompt_tokens": 9}}]  # fmt: skip
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for chunk in chunks:
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Chat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for header in (True, False):
            seen.clear()
            shape = {**profile(), "prompts": 3, "turns": 2, "think_time": 0.0,
                     "session_header": header}  # fmt: skip
            plan = {"profile": shape, "base_url": f"http://127.0.0.1:{server.server_port}",
                    "run_dir": str(tmp_path / "run-7" / "m"), "served_model_name": "m"}  # fmt: skip
            result = conversations.run(plan, 0, [])
            assert (result["completed"], result["failed"]) == (6, 0)
            sessions = {first: session for session, first in seen}
            assert len(seen) == 6 and len(sessions) == 3
            if header:
                # one session per conversation, kept on its next turn
                assert sorted(sessions.values()) == ["run-7-0-0", "run-7-0-1", "run-7-0-2"]
                assert all(sessions[first] == session for session, first in seen)
            else:
                assert set(sessions.values()) == {None}
    finally:
        server.shutdown()


def test_the_result_has_vllms_keys() -> None:
    turns = [conversations.Turn(True, ttft=0.1 * i, e2el=0.5 + 0.1 * i, output_tokens=11,
                                input_tokens=100) for i in range(1, 11)]  # fmt: skip
    turns.append(conversations.Turn(False, error="HTTP Error 503"))
    found = conversations.result(turns, 5.0)
    assert (found["completed"], found["failed"]) == (10, 1)
    assert found["request_throughput"] == pytest.approx(2.0)
    assert found["output_throughput"] == pytest.approx(22.0)
    assert found["median_ttft_ms"] == pytest.approx(550.0)
    assert found["p99_ttft_ms"] == pytest.approx(991.0)
    assert found["median_tpot_ms"] == pytest.approx(50.0)
    assert found["errors"] == ["HTTP Error 503"]


def test_the_fleets_hit_rate_is_every_servers_hits_over_its_queries() -> None:
    before = {"lab1": {"prefix_cache_queries": 100.0, "prefix_cache_hits": 50.0},
              "lab2": {"prefix_cache_queries": 0.0, "prefix_cache_hits": 0.0}}  # fmt: skip
    after = {"lab1": {"prefix_cache_queries": 1100.0, "prefix_cache_hits": 850.0},
             "lab2": {"prefix_cache_queries": 1000.0, "prefix_cache_hits": 600.0}}  # fmt: skip
    fleet = runner.fleet_prefix_cache(before, after, ["lab1", "lab2"])
    assert fleet["hosts"]["lab1"] == {"queries": 1000.0, "hits": 800.0, "hit_rate": 0.8}
    assert (fleet["queries"], fleet["hits"], fleet["hit_rate"]) == (2000.0, 1400.0, 0.7)
    service = {"host": "gw", "service": "m", "fleet_prefix_cache": fleet}
    assert report.cache_words(service) == "; prefix cache hit 0.7 (lab1 0.8, lab2 0.6)"
    # a server that could not be read leaves the fleet's rate unknown, not too high
    partial = runner.fleet_prefix_cache(before, {"lab1": after["lab1"]}, ["lab1", "lab2"])
    assert partial["hit_rate"] is None and partial["hosts"]["lab2"] is None
    # a server restarted in the run (a rollout) counts from 0 again: its rise is unknown
    started = {h: {**v, runner.STARTED: 1.0} for h, v in before.items()}
    restarted = {**after, "lab2": {**after["lab2"], runner.STARTED: 2.0}}
    restarted["lab1"] = {**after["lab1"], runner.STARTED: 1.0}
    moved = runner.fleet_prefix_cache(started, restarted, ["lab1", "lab2"])
    assert moved["hosts"]["lab2"] is None and moved["hosts"]["lab1"]["hit_rate"] == 0.8
    assert moved["hit_rate"] is None


def test_the_summary_schema_knows_every_dataset() -> None:
    import json

    from acceldeploy.cli.bench import SCHEMA

    schema = json.loads(SCHEMA.read_text())
    assert tuple(schema["properties"]["profile"]["properties"]["dataset"]["enum"]) == (
        profiles.DATASETS
    )


def test_runs_compared_side_by_side(tmp_path: Path) -> None:
    import json

    from acceldeploy.bench import compare

    runs = {}
    for label, hit, rates in (
        ("least", 0.49, [6.1, 6.4, 6.9]),
        ("affinity", 0.70, [8.5, 9.4, 10.7]),
    ):
        run = tmp_path / label
        run.mkdir()
        service = {"points": [{"runs": [{"request_throughput": r, "median_ttft_ms": 200.0,
                                          "p99_ttft_ms": 900.0, "failed": 0} for r in rates]}],
                   "fleet_prefix_cache": {"hit_rate": hit}}  # fmt: skip
        (run / "summary.json").write_text(json.dumps({"services": [service]}))
        runs[label] = compare.read(run)
    lines = compare.table(runs)
    assert lines[2].startswith("| least | 0.49 | 6.4 [")
    assert lines[3].startswith("| affinity | 0.7 | 9.4 [")
    compare.plot(runs, tmp_path / "runs.png")
    assert (tmp_path / "runs.png").stat().st_size > 0


def test_another_profiles_dict_and_so_its_baselines_key_are_what_they_were() -> None:
    """The conversations fields appear on that dataset only: a baseline recorded before they
    existed keeps its profile hash (runner.run_key), so `--baseline` still compares."""
    smoke = profiles.pick(None, "smoke").to_dict()
    assert not set(profiles.CONVERSATION_FIELDS) & set(smoke)
    assert set(profiles.CONVERSATION_FIELDS) <= set(profile())


def test_the_driver_runs_its_own_load_for_the_conversations_dataset_only() -> None:
    from acceldeploy.host.bench import driver

    assert driver.own_load({"profile": profile()})
    assert not driver.own_load({"profile": profiles.pick(None, "smoke").to_dict()})

"""vllm-dp-watch (roles/vllm_service/files/), the watch a data-parallel group node's launcher
starts: it counts the established TCP connections of a process tree to the head's address,
read from this machine's real /proc, and ends a rank once they are gone after it joined; it
dials its peers, and ends the node once a peer that answered falls silent. A silent peer
(a dropped path) is proved on the isolated lab (tests/lab/test_dp_isolated.py)."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import Any

from acceldeploy.host.readiness import procnet

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "tools/acceldeploy/host/helpers/vllm-dp-watch"
HEAD = "127.0.0.31"  # a loopback address of its own, as the lab's nodes have


def helper() -> Any:
    loader = SourceFileLoader("vllm_dp_watch", str(HELPER))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_addresses_read_as_the_kernel_writes_them() -> None:
    assert procnet.endpoint("1F00007F:3421") == (HEAD, 0x3421)
    assert procnet.endpoint("0000000000000000FFFF00001F00007F:3421") == (HEAD, 0x3421)  # v4-mapped
    assert procnet.endpoint("00000000000000000000000001000000:0050") == ("::1", 80)


def test_it_counts_this_process_trees_connections_to_the_head() -> None:
    watch = helper()
    with socket.create_server((HEAD, 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        tree = watch.descendants(os.getpid())
        assert os.getpid() in tree
        assert watch.established_to(HEAD, watch.socket_inodes(tree)) == 1
        assert watch.established_to("127.0.0.32", watch.socket_inodes(tree)) == 0
        client.close()
        accepted.close()
    time.sleep(0.1)
    assert watch.established_to(HEAD, watch.socket_inodes(watch.descendants(os.getpid()))) == 0


def test_a_rank_whose_head_went_away_is_ended() -> None:
    """A stand-in rank (a child holding one connection to the head) under the real helper: the
    head closes; within its checks the helper sends SIGTERM to the rank."""
    server = socket.create_server((HEAD, 0))
    host, port = server.getsockname()
    rank = subprocess.Popen([sys.executable, "-c", (
        "import socket, time\n"
        f"s = socket.create_connection(({host!r}, {port}))\n"
        "time.sleep(120)\n")])  # fmt: skip
    accepted, _ = server.accept()
    watcher = subprocess.Popen(
        [sys.executable, str(HELPER), str(rank.pid), "0.2", "3", HEAD, "--head", HEAD],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(1.0)
        assert rank.poll() is None  # joined, the head there: left alone
        accepted.close()
        server.close()
        assert rank.wait(timeout=10) == -signal.SIGTERM
        _, err = watcher.communicate(timeout=10)
        assert f"no connection to the head {HEAD} (it restarted or went away), for 3 checks" in err
    finally:
        for proc in (rank, watcher):
            if proc.poll() is None:
                proc.kill()


def test_a_live_peer_answers_a_dial_whether_it_listens_or_resets() -> None:
    watch = helper()
    with socket.create_server((HEAD, 0)) as server:
        assert watch.answers(HEAD, port=server.getsockname()[1])
    assert watch.answers(HEAD, bind="127.0.0.32")  # nothing on DIAL_PORT: the kernel resets


def test_only_a_peer_that_answered_before_counts_as_gone(monkeypatch: Any) -> None:
    """Silence from a peer never seen (a node not up yet) is no reason to end this one; the same
    silence after it answered is."""
    watch = helper()
    live = {"127.0.0.32": False}
    monkeypatch.setattr(watch, "answers", lambda peer, bind="": live[peer])
    node = watch.Watch(os.getpid(), ["127.0.0.32"])
    assert node.problem() == ""
    live["127.0.0.32"] = True
    assert node.problem() == ""
    live["127.0.0.32"] = False
    assert node.problem().startswith("no answer from the group's node(s) 127.0.0.32")

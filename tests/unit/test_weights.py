"""Model weights: the controller's inputs and fan-out (acceldeploy.downloads.weights), and the hosts' side
(acceldeploy.host.fetch): manifest checks, plans, atomic publish, seed server and pulls, on local
directories (no hub: the downloader is a stand-in)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from acceldeploy.downloads import weights
from acceldeploy.errors import AcceldeployError
from acceldeploy.host.fetch import plan as fetch_plan
from acceldeploy.host.fetch.common import (
    GIB,
    MANIFEST,
    Layout,
    Listing,
    ModelSpec,
    RemoteFile,
    WeightsError,
    exact_pattern,
    hash_file,
    matches,
)
from acceldeploy.host.fetch.plan import ModelPlan, check_space
from acceldeploy.host.fetch.progress import Progress
from acceldeploy.host.fetch.publish import model_lock
from acceldeploy.host.fetch.run import (
    HostRequest,
    _scrub,
    converge_model,
    plan_host,
    request_from_params,
)
from acceldeploy.host.fetch.seed import (
    _http_request,
    make_seed_server,
    serve_until_idle,
    start_seed_server,
    stop_seed_server,
)

REV = "0123456789abcdef0123456789abcdef01234567"


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


FILES = {
    "config.json": b'{"a": 1}\n',
    "model.safetensors": os.urandom(300_000),
    "sub/extra[1].json": b"{}\n",
}


def listing(files: dict[str, bytes] = FILES, commit: str | None = REV) -> Listing:
    remote = []
    for path, data in sorted(files.items()):
        if path.endswith(".safetensors"):
            remote.append(RemoteFile(path, len(data), sha256=hashlib.sha256(data).hexdigest()))
        else:
            remote.append(RemoteFile(path, len(data), sha1_git=git_sha1(data)))
    return Listing("org/model", "hf", commit or "main", commit, tuple(remote))


def spec(**kw: Any) -> ModelSpec:
    return ModelSpec(
        model=kw.get("model", "org/model"),
        source=kw.get("source", "hf"),
        revision=kw.get("revision", REV),
        allow_patterns=kw.get("allow_patterns"),
    )


class FakeHub:
    """Writes the wanted files into staging, like a client would; counts bytes."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.bytes = 0
        self.calls: list[list[str]] = []

    def __call__(self, plan: ModelPlan, todo: list[RemoteFile], staging: Path) -> dict[str, Any]:
        self.calls.append([f.path for f in todo])
        for f in todo:
            target = staging / f.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.files[f.path])
            self.bytes += len(self.files[f.path])
        (staging / ".cache" / "huggingface").mkdir(parents=True, exist_ok=True)
        return {}


def converge(root: Path, hub: FakeHub, the_listing: Listing | None = None, verify="fast"):
    request = HostRequest(root=root, models=[spec()], mode="hub", verify=verify)
    the_listing = the_listing or listing(hub.files)
    (plan,) = plan_host(request, lister=lambda s: the_listing)
    return plan, converge_model(plan, request, downloader=hub)


# -- inputs ------------------------------------------------------------------------------------


def test_specs_defaults_dedup_and_patterns():
    specs = weights.model_specs(
        [
            {
                "name": "a",
                "model": "Qwen/Q",
                "source": "modelscope",
                "revision": "master",
                "allow_patterns": ["*.json"],
            },
            {
                "name": "b",
                "model": "Qwen/Q",
                "source": "modelscope",
                "revision": "master",
                "allow_patterns": "*.safetensors",
            },
            {"name": "c", "model": "org/x"},
        ],
        require_revision=False,
    )
    assert [s.dirname for s in specs] == ["Qwen/Q@master", "org/x@main"]
    assert specs[0].allow_patterns == ("*.json", "*.safetensors")
    assert specs[0].services == ("a", "b")
    assert specs[1].source == "hf" and specs[1].repo_revision == "main"
    assert ModelSpec("o/m", "modelscope", None).repo_revision == "master"


@pytest.mark.parametrize(
    ("raw", "require", "needle"),
    [
        (
            {"name": "q", "model": "o/m", "source": "github", "revision": REV},
            True,
            "acceldeploy_services[0] (q).source must be one of hf, modelscope, got 'github'",
        ),
        (
            {"name": "q", "model": "o/m"},
            True,
            "acceldeploy_services[0] (q).revision is not set and model_weights_require_revision",
        ),
        ({"name": "q", "model": "nope", "revision": REV}, True, "(q).model must look like"),
        ({"name": "q", "model": "o/m", "revision": "../x"}, True, "(q).revision must be"),
        (
            {"name": "q", "model": "o/m", "revision": REV, "allow_patterns": []},
            True,
            "(q).allow_patterns must be a non-empty list",
        ),
    ],
)
def test_bad_specs_name_the_variable(raw, require, needle):
    with pytest.raises(AcceldeployError) as info:
        weights.model_specs([raw], require_revision=require)
    assert needle in str(info.value)


def test_one_directory_one_source():
    with pytest.raises(WeightsError, match="one directory has one source"):
        weights.model_specs(
            [
                {"model": "o/m", "source": "hf", "revision": "x"},
                {"model": "o/m", "source": "modelscope", "revision": "x"},
            ],
            require_revision=True,
        )


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"strategy": "torrent"}, "model_weights_strategy must be one of each, seed"),
        ({"verify": "maybe"}, "model_weights_verify must be one of fast, full"),
        ({"root": "models"}, "model_weights_root (acceldeploy_models_root) must be an absolute"),
        ({"root": "/"}, "must be an absolute directory other than /"),
        ({"shared_storage": "yes"}, "model_weights_shared_storage must be true or false"),
    ],
)
def test_bad_settings(raw, needle):
    with pytest.raises(WeightsError) as info:
        weights.Settings.check(raw)
    assert needle in str(info.value)


def _hosts(strategy: str, shared: bool = False, seed: str = "") -> dict[str, Any]:
    settings = {"strategy": strategy, "seed_host": seed, "shared_storage": shared, "root": "/m"}
    return {
        "h1": {"specs": [spec().to_dict()], "settings": settings},
        "h2": {"specs": [spec().to_dict(), spec(model="org/b").to_dict()], "settings": settings},
        "store": {"specs": [], "settings": settings},
    }


def test_fanout_each():
    plan = weights.fanout(_hosts("each"), ["h1", "h2", "store"])
    assert [m["model"] for m in plan["h2"]["hub"]] == ["org/b", "org/model"]
    assert plan["h1"]["pull"] == [] and plan["h1"]["seed"] == ""


def test_fanout_seed_downloads_the_union_once():
    plan = weights.fanout(_hosts("seed", seed="store"), ["h1", "h2", "store"])
    assert [m["model"] for m in plan["store"]["hub"]] == ["org/b", "org/model"]
    assert [m["model"] for m in plan["store"]["serve"]] == ["org/b", "org/model"]
    assert plan["h1"]["hub"] == [] and [m["model"] for m in plan["h1"]["pull"]] == ["org/model"]
    assert plan["h2"]["seed"] == "store"
    default = weights.fanout(_hosts("seed"), ["h1", "h2", "store"])
    assert [m["model"] for m in default["h1"]["hub"]] == ["org/b", "org/model"]
    assert [m["model"] for m in default["h2"]["pull"]] == ["org/b", "org/model"]


def test_fanout_shared_storage_verifies_only():
    plan = weights.fanout(_hosts("seed", shared=True, seed="h1"), ["h1", "h2", "store"])
    assert [m["model"] for m in plan["h2"]["verify"]] == ["org/b", "org/model"]
    assert plan["h2"]["pull"] == []


def test_fanout_seed_must_be_in_the_play():
    with pytest.raises(WeightsError, match="model_weights_seed_host 'gone'"):
        weights.fanout(_hosts("seed", seed="gone"), ["h1", "h2", "store"])


def test_a_seed_refused_earlier_in_the_play_is_not_its_pullers_error():
    """Preflight refused the seed (say, its Python) before the fan-out: its pullers get no
    job and no error of their own; the run stops at preflight's summary naming the seed."""
    hosts = _hosts("seed", seed="store")
    del hosts["store"]
    plan = weights.fanout(hosts, ["h1", "h2"], refused=["store"])
    assert plan["h1"]["pull"] == [] and plan["h2"]["seed"] == ""
    with pytest.raises(WeightsError, match="model_weights_seed_host 'store'"):
        weights.fanout(hosts, ["h1", "h2"])


def test_patterns():
    assert matches("sub/a.json", ["sub/"])
    assert matches("x.safetensors", ["*.safetensors"])
    assert not matches("README.md", ["*.json"])
    assert matches("anything", None)
    import fnmatch

    pattern = exact_pattern("sub/extra[1].json")
    assert fnmatch.fnmatch("sub/extra[1].json", pattern)
    assert not fnmatch.fnmatch("sub/extra1.json", pattern)


def test_git_blob_sha1_is_the_hub_etag(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"hello\n")
    assert hash_file(path, "sha1_git") == "ce013625030ba8dba906f756967f9e9ca394464a"
    assert hash_file(path, "sha256") == hashlib.sha256(b"hello\n").hexdigest()


# -- converge, manifest, repair ----------------------------------------------------------------


def test_fetch_publish_then_nothing(tmp_path):
    hub = FakeHub(dict(FILES))
    plan, result = converge(tmp_path, hub)
    assert plan.action == "fetch" and result["changed"] and result["publish"] == "rename"
    published = tmp_path / f"org/model@{REV}"
    assert (published / "sub/extra[1].json").read_bytes() == b"{}\n"
    assert not (published / ".cache").exists()
    assert not (tmp_path / ".acceldeploy/staging/org" / f"model@{REV}").exists()
    manifest = json.loads((published / MANIFEST).read_text())
    assert manifest["commit"] == REV and set(manifest["files"]) == set(FILES)
    # A pinned, intact model: no hub listing, no hashing, nothing to do.
    request = HostRequest(root=tmp_path, models=[spec()], mode="hub")
    (again,) = plan_host(request, lister=lambda s: pytest.fail("asked the hub"))
    assert again.action == "none" and again.rehashed_bytes == 0


def flip_byte(path: Path, offset: int) -> None:
    """Inverts the byte at ``offset`` in place (the file's size and inode stay)."""
    with path.open("r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([byte ^ 0xFF]))


def put_mtime_back(path: Path, before: os.stat_result) -> None:
    """Restores the mtime as ``cp -p`` or ``rsync -t`` would, and returns once the ctime has
    left ``before``'s: utime(2) sets the ctime to the kernel's clock, which may still be in the
    tick of the write ``before`` saw (a coarse clock ticks every 1-10 ms)."""
    deadline = time.monotonic() + 5
    while True:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        if path.stat().st_ctime_ns != before.st_ctime_ns or time.monotonic() > deadline:
            break
        time.sleep(0.002)
    assert path.stat().st_ctime_ns != before.st_ctime_ns


def test_flipped_byte_with_a_new_mtime_is_repaired_and_only_that_file_refetched(tmp_path):
    hub = FakeHub(dict(FILES))
    converge(tmp_path, hub)
    shard = tmp_path / f"org/model@{REV}/model.safetensors"
    config_inode = (tmp_path / f"org/model@{REV}/config.json").stat().st_ino
    before = shard.stat()
    flip_byte(shard, 100)
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns - 10**9))
    assert shard.read_bytes() != FILES["model.safetensors"]
    hub.bytes = 0
    plan, result = converge(tmp_path, hub)
    assert plan.action == "repair" and "model.safetensors" in plan.bad
    assert hub.calls[-1] == ["model.safetensors"] and hub.bytes == len(FILES["model.safetensors"])
    assert result["publish"] in ("exchange", "two-renames")
    assert shard.read_bytes() == FILES["model.safetensors"]
    # Intact files were hard-linked into the new copy, not copied.
    assert (tmp_path / f"org/model@{REV}/config.json").stat().st_ino == config_inode
    assert not list((tmp_path / ".acceldeploy/trash").iterdir())
    # The old copy's removal moved the reused files' ctime; the stamp was taken after it.
    plan, result = converge(tmp_path, hub)
    assert plan.action == "none" and not result["changed"]


def test_write_with_the_mtime_put_back_is_caught_by_fast(tmp_path):
    hub = FakeHub(dict(FILES))
    converge(tmp_path, hub)
    shard = tmp_path / f"org/model@{REV}/model.safetensors"
    before = shard.stat()
    flip_byte(shard, 100)
    put_mtime_back(shard, before)
    assert shard.stat().st_mtime_ns == before.st_mtime_ns
    request = HostRequest(root=tmp_path, models=[spec()], mode="hub")
    (fast,) = plan_host(request, lister=lambda s: listing())
    assert fast.action == "repair" and list(fast.bad) == ["model.safetensors"]
    assert fast.rehashed_bytes == len(FILES["model.safetensors"])


def test_a_change_that_kept_the_whole_stamp_needs_full(tmp_path):
    """What fast cannot see: a write in the same clock tick as the stamp, or a change below the
    filesystem. The manifest is re-stamped after the flip to stand for it."""
    hub = FakeHub(dict(FILES))
    converge(tmp_path, hub)
    published = tmp_path / f"org/model@{REV}"
    flip_byte(published / "model.safetensors", 100)
    manifest_path = published / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    st = (published / "model.safetensors").stat()
    manifest["files"]["model.safetensors"].update(mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns)
    manifest_path.write_text(json.dumps(manifest))
    request = HostRequest(root=tmp_path, models=[spec()], mode="hub")
    (fast,) = plan_host(request, lister=lambda s: listing())
    assert fast.action == "none" and fast.rehashed_bytes == 0
    request.verify = "full"
    (full,) = plan_host(request, lister=lambda s: listing())
    assert full.action == "repair" and list(full.bad) == ["model.safetensors"]
    assert full.rehashed_bytes == sum(len(v) for v in FILES.values())


def test_a_manifest_without_ctime_is_still_trusted_by_fast(tmp_path):
    hub = FakeHub(dict(FILES))
    converge(tmp_path, hub)
    manifest_path = tmp_path / f"org/model@{REV}" / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    for entry in manifest["files"].values():
        assert entry.pop("ctime_ns")
    manifest_path.write_text(json.dumps(manifest))
    request = HostRequest(root=tmp_path, models=[spec()], mode="hub")
    (fast,) = plan_host(request, lister=lambda s: listing())
    assert fast.action == "none" and fast.rehashed_bytes == 0


def test_touched_intact_file_is_restamped_not_refetched(tmp_path):
    hub = FakeHub(dict(FILES))
    converge(tmp_path, hub)
    os.utime(tmp_path / f"org/model@{REV}/config.json", (1, 1))
    plan, result = converge(tmp_path, hub)
    assert plan.action == "restamp" and result["changed"] and len(hub.calls) == 1
    plan, result = converge(tmp_path, hub)
    assert plan.action == "none" and not result["changed"]


def test_moved_branch_updates_in_one_step(tmp_path):
    hub = FakeHub(dict(FILES))
    request = HostRequest(root=tmp_path, models=[spec(revision="main")], mode="hub")
    first = listing(commit="a" * 40)
    (plan,) = plan_host(request, lister=lambda s: first)
    converge_model(plan, request, downloader=hub)
    changed = {**FILES, "config.json": b'{"a": 2}\n'}
    hub.files = changed
    second = listing(changed, commit="b" * 40)
    (plan,) = plan_host(request, lister=lambda s: second)
    assert plan.action == "update" and [f.path for f in plan.fetch] == ["config.json"]
    converge_model(plan, request, downloader=hub)
    assert (tmp_path / "org/model@main/config.json").read_bytes() == b'{"a": 2}\n'


def test_bad_download_fails_after_a_retry_and_keeps_nothing_published(tmp_path):
    hub = FakeHub({**FILES, "model.safetensors": b"wrong"})
    with pytest.raises(WeightsError, match="failed verification twice"):
        converge(tmp_path, hub, the_listing=listing())
    assert len(hub.calls) == 2 and hub.calls[1] == ["model.safetensors"]
    assert not (tmp_path / f"org/model@{REV}").exists()


def test_files_finished_before_a_kill_are_not_fetched_again(tmp_path):
    staging = tmp_path / ".acceldeploy/staging/org" / f"model@{REV}"
    staging.mkdir(parents=True)
    (staging / "model.safetensors").write_bytes(FILES["model.safetensors"])
    hub = FakeHub(dict(FILES))
    plan, result = converge(tmp_path, hub)
    assert plan.partial_bytes == len(FILES["model.safetensors"])
    assert sorted(hub.calls[0]) == ["config.json", "sub/extra[1].json"]
    assert result["already_in_staging"] == ["model.safetensors"]


def test_not_enough_disk_names_the_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch_plan, "free_bytes", lambda path: 2 * GIB)
    request = HostRequest(root=tmp_path, models=[spec()], mode="hub")
    big = Listing("org/model", "hf", REV, REV, (RemoteFile("w", 3 * GIB),))
    plans = plan_host(request, lister=lambda s: big)
    with pytest.raises(WeightsError) as info:
        check_space(plans, tmp_path, GIB)
    text = str(info.value)
    assert "need 3.00 GiB" in text and "2.00 GiB is free" in text
    assert "model_weights_free_space_reserve_gib 1.00 GiB" in text


def test_lock_refuses_a_second_download(tmp_path):
    layout = Layout(tmp_path)
    with (
        model_lock(layout, spec()),
        pytest.raises(WeightsError, match="pid"),
        model_lock(layout, spec()),
    ):
        pass


def test_plan_round_trips_through_the_module(tmp_path):
    request = HostRequest(root=tmp_path, models=[spec()], mode="hub")
    (plan,) = plan_host(request, lister=lambda s: listing())
    again = ModelPlan.from_dict(json.loads(json.dumps(plan.to_dict())), spec())
    assert again.fetch == plan.fetch and again.listing == plan.listing
    params = {
        "root": str(tmp_path),
        "models": [spec().to_dict()],
        "plans": [plan.to_dict()],
        "tokens": {"hf": "secret", "modelscope": ""},
        "reserve_gib": 0.5,
    }
    built = request_from_params(params)
    assert built.tokens == {"hf": "secret"} and built.reserve_bytes == GIB // 2
    assert "secret" not in _scrub("token secret leaked", built)


# -- the seed server and pulls -----------------------------------------------------------------


@pytest.fixture
def seed(tmp_path):
    root = tmp_path / "seed"
    converge(root, FakeHub(dict(FILES)))
    token = "t0ken"
    server, touched = make_seed_server(root, "127.0.0.1", 0, token, [f"org/model@{REV}"])
    thread = threading.Thread(target=serve_until_idle, args=(server, touched, 30), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", token
    server.shutdown()
    thread.join(5)


def test_pull_from_seed_resumes_a_part_file(tmp_path, seed):
    url, token = seed
    root = tmp_path / "puller"
    request = HostRequest(
        root=root,
        models=[spec()],
        mode="pull",
        listings={f"org/model@{REV}": listing()},
        seed_url=url,
        seed_token=token,
    )
    staging = root / ".acceldeploy/staging/org" / f"model@{REV}"
    staging.mkdir(parents=True)
    half = FILES["model.safetensors"][:1000]
    (staging / "model.safetensors.part").write_bytes(half)
    (plan,) = plan_host(request)
    result = converge_model(plan, request)
    assert result["changed"]
    expected = sum(len(v) for v in FILES.values()) - len(half)
    assert result["pulled_bytes"] == expected
    assert (root / f"org/model@{REV}/model.safetensors").read_bytes() == FILES["model.safetensors"]


def test_seed_refuses_wrong_token_and_unlisted_files(seed):
    url, token = seed
    import urllib.error

    with pytest.raises(urllib.error.HTTPError) as info:
        _http_request(f"{url}/m/org/model@{REV}/config.json", "nope")
    assert info.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as info:
        _http_request(f"{url}/m/org/model@{REV}/../../../etc/passwd", token)
    assert info.value.code == 404
    with _http_request(f"{url}/m/org/model@{REV}/config.json", token) as resp:
        assert resp.read() == FILES["config.json"]


def test_progress_file(tmp_path):
    layout = Layout(tmp_path)
    layout.staging(spec()).mkdir(parents=True)
    (layout.staging(spec()) / "x").write_bytes(b"1" * 500)
    with Progress(spec(), layout, 1000, tmp_path / "log", 0.05, "hub"):
        time.sleep(0.15)
    data = json.loads(layout.progress(spec()).read_text())
    assert data["state"] == "done" and data["percent"] == 50.0 and data["pid"] == os.getpid()
    assert "50.0%" in (tmp_path / "log").read_text()


def test_seed_daemon_serves_after_start_returns_and_stops(tmp_path):
    """The module forks the server off itself (its payload is deleted when it exits): the
    daemon answers after start_seed_server returned, holds the token in memory only, and
    stop_seed_server ends exactly that process."""
    root = tmp_path / "seed"
    converge(root, FakeHub(dict(FILES)))
    layout = Layout(root)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    info = start_seed_server(layout, "127.0.0.1", port, "t0ken", [f"org/model@{REV}"], 30)
    try:
        assert info["pid"] != os.getpid() and info["port"] == port
        pid, started = (root / ".acceldeploy/run/seed-server.pid").read_text().split()
        assert int(pid) == info["pid"] and started.isdigit()
        url = f"http://127.0.0.1:{port}/m/org/model@{REV}/config.json"
        with _http_request(url, "t0ken") as resp:
            assert resp.read() == FILES["config.json"]
        assert not list((root / ".acceldeploy/run").glob("*token*"))
    finally:
        assert stop_seed_server(layout)
    assert not stop_seed_server(layout)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), 1).close()


def test_seed_daemon_that_cannot_listen_fails_with_the_reason(tmp_path):
    layout = Layout(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(WeightsError, match=f"did not listen on 127.0.0.1:{port}: .*in use"):
            start_seed_server(layout, "127.0.0.1", port, "t", [], 30)
    assert not (tmp_path / ".acceldeploy/run/seed-server.pid").exists()


def test_stop_leaves_a_reused_pid_alone(tmp_path):
    layout = Layout(tmp_path)
    run = tmp_path / ".acceldeploy/run"
    run.mkdir(parents=True)
    (run / "seed-server.pid").write_text(f"{os.getpid()} 1\n")  # our pid, another start time
    assert not stop_seed_server(layout)
    (run / "seed-server.pid").write_text(f"{os.getpid()}\n")  # an old pid file: checks argv
    assert not stop_seed_server(layout)


def test_a_seed_the_limit_leaves_out_leaves_its_pullers_to_fetch_or_verify_themselves():
    """`--limit h2` on a seeded fleet: h2's seed (h1) is in the inventory but not in the run,
    so nothing serves it: h2 fetches from the source itself (a complete model is only
    verified), or on shared storage only verifies. A seed in no inventory is still refused."""
    hosts = _hosts("seed", seed="h1")
    plan = weights.fanout({"h2": hosts["h2"]}, ["h2"], limited_out=["h1", "store"])
    assert [m["model"] for m in plan["h2"]["hub"]] == ["org/b", "org/model"]
    assert plan["h2"]["pull"] == [] and plan["h2"]["seed"] == ""
    shared = _hosts("seed", shared=True, seed="h1")
    plan = weights.fanout({"h2": shared["h2"]}, ["h2"], limited_out=["h1"])
    assert [m["model"] for m in plan["h2"]["verify"]] == ["org/b", "org/model"]
    with pytest.raises(WeightsError, match="model_weights_seed_host 'h1'"):
        weights.fanout({"h2": hosts["h2"]}, ["h2"], limited_out=["store"])

"""roles/model_weights on two lab hosts through the lab's mirrors (playbooks/models.yml).

- bad input (unknown source, missing revision, too little disk) fails before any download;
- ``each``: the HF mirror serves every byte twice; ``seed``: once, and both hosts end with the
  same verified files; a second run changes nothing, downloads nothing and re-hashes nothing;
  ``--check --diff`` changes nothing, and on a bare host creates nothing and shows no code;
- a download killed midway resumes on the next run (ModelScope path through msmirror, which
  honours Range; HF path through olah, which does not, so there the file restarts) and
  verifies;
- a byte flipped in a published file is found and repaired: ``verify: fast`` when the mtime
  moved and when it was put back (the ctime moved), ``verify: full`` when the whole stamp
  matches (the manifest re-stamped after the flip, as a write in the stamp's clock tick leaves
  it).

The models are made here (deterministic bytes, so deterministic commits) and published into the
mirror's root: $ACCELDEPLOY_TEST_MIRROR_ROOT (default /var/cache/acceldeploy/mirror), olah on
$ACCELDEPLOY_TEST_MIRROR_PORT (default 8090), msmirror on $ACCELDEPLOY_TEST_MSMIRROR_PORT
(default 8095). Hosts from $ACCELDEPLOY_TEST_INVENTORY.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_run import PlaybookRun, lab_hosts, run_playbook, ssh

from acceldeploy_lab import mirror as olah_mirror
from acceldeploy_lab import msmirror

pytestmark = pytest.mark.lab

PLAYBOOK = "playbooks/models.yml"
MODEL = "acceldeploy/weights-test-model"
BLOB = "acceldeploy/weights-test-blob"
BLOB_BYTES = 96 * 1024 * 1024
ROOT = "/srv/acceldeploy-test-models"
VENV = "/opt/acceldeploy/fetch-venv"
BARE = "/tmp/acceldeploy-test-bare"
MIB = 1024 * 1024


def _bytes(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def make_model(directory: Path) -> None:
    """Shards, JSON, a nested file and a name with glob characters: what a model repo has."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"model_type": "test", "layers": 2}) + "\n")
    (directory / "model-00001-of-00002.safetensors").write_bytes(_bytes(1, 6 * MIB))
    (directory / "model-00002-of-00002.safetensors").write_bytes(_bytes(2, 3 * MIB + 17))
    (directory / "tokenizer.json").write_text(json.dumps({"vocab": list(range(2000))}))
    (directory / "sub").mkdir(exist_ok=True)
    (directory / "sub" / "extra[1].json").write_text('{"nested": true}\n')
    (directory / "README.md").write_text("not wanted by allow_patterns\n")


def make_blob(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "blob.bin").write_bytes(_bytes(3, BLOB_BYTES))
    (directory / "config.json").write_text('{"model_type": "blob"}\n')


class Throttle:
    """A TCP proxy that slows server-to-client bytes, so a download can be killed midway."""

    def __init__(self, target_port: int, rate: int) -> None:
        self.target_port = target_port
        self.rate = rate
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                upstream = socket.create_connection(("127.0.0.1", outer.target_port))
                client = self.request

                def up() -> None:
                    try:
                        while data := client.recv(65536):
                            upstream.sendall(data)
                    except OSError:
                        pass
                    finally:
                        with contextlib.suppress(OSError):
                            upstream.shutdown(socket.SHUT_WR)

                threading.Thread(target=up, daemon=True).start()
                try:
                    while data := upstream.recv(65536):
                        client.sendall(data)
                        time.sleep(len(data) / outer.rate)
                except OSError:
                    pass
                finally:
                    upstream.close()

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def hosts() -> dict[str, dict[str, Any]]:
    found = lab_hosts()
    if len(found) < 2:
        pytest.skip(f"the lab has {len(found)} host(s); these tests need two")
    return dict(list(found.items())[:2])


@pytest.fixture(scope="module")
def mirrors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The lab's olah (left running: it is the lab's) and this module's own msmirror."""
    root = Path(
        os.environ.get("ACCELDEPLOY_TEST_MIRROR_ROOT") or olah_mirror.cache_dir() / "mirror"
    )
    hf = olah_mirror.Mirror(
        root=root, port=int(os.environ.get("ACCELDEPLOY_TEST_MIRROR_PORT") or 8090)
    )
    ms = msmirror.MsMirror(
        root=root, port=int(os.environ.get("ACCELDEPLOY_TEST_MSMIRROR_PORT") or 8095)
    )
    work = tmp_path_factory.mktemp("weights")
    make_model(work / "model")
    make_blob(work / "blob")
    model = olah_mirror.publish(work / "model", hf, MODEL)
    blob = olah_mirror.publish(work / "blob", hf, BLOB)
    olah_mirror.start(hf)
    msmirror.start(ms)
    yield {"hf": hf, "ms": ms, "model_rev": model["revision"], "blob_rev": blob["revision"]}
    msmirror.stop(ms)


def remote(hostvars: dict[str, Any], command: str, timeout: float = 120) -> str:
    result = ssh(hostvars, command, timeout=timeout)
    assert result.returncode == 0, f"{command}: {result.stderr}"
    return result.stdout


def wipe(hosts: dict[str, dict[str, Any]]) -> None:
    for hostvars in hosts.values():
        remote(hostvars, f"rm -rf {ROOT}")


def services(mirrors: dict[str, Any], *, source: str = "hf", blob: bool = True) -> list[dict]:
    found = [
        {
            "name": "test-model",
            "model": MODEL,
            "source": source,
            "revision": mirrors["model_rev"],
            "allow_patterns": ["*.safetensors", "*.json", "sub/"],
        }
    ]
    if blob:
        found.append(
            {"name": "test-blob", "model": BLOB, "source": source, "revision": mirrors["blob_rev"]}
        )
    return found


def extra(mirrors: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    data = {
        "acceldeploy_services": services(mirrors),
        "model_weights_root": ROOT,
        "model_weights_hf_endpoint": mirrors["hf"].endpoint,
        "model_weights_modelscope_endpoint": mirrors["ms"].endpoint,
        "model_weights_async_poll": 1,
        "model_weights_progress_interval": 0.5,
        "model_weights_seed_port": 8781,
    }
    data.update(overrides)
    return data


def converge(mirrors: dict[str, Any], **overrides: Any) -> tuple[PlaybookRun, dict[str, Any]]:
    """Runs the playbook; returns the run and what the HF mirror served meanwhile."""
    since = olah_mirror.served(mirrors["hf"])["lines"]
    limit = overrides.pop("limit", None)
    check = overrides.pop("check", False)
    run = run_playbook(
        PLAYBOOK, extra_vars=extra(mirrors, **overrides), limit=limit, check=check, diff=check
    )
    return run, olah_mirror.served(mirrors["hf"], since_line=since)


def file_bytes(served: dict[str, Any], repo: str) -> int:
    return sum(v["bytes"] for k, v in served["files"].items() if k.startswith(repo + "/"))


def tree(hostvars: dict[str, Any], directory: str) -> dict[str, str]:
    """{relative path: sha256} of every file of a published model but its (per host) manifest."""
    out = remote(
        hostvars,
        f"cd {ROOT}/{directory} && find . -type f ! -name .acceldeploy-manifest.json -print0"
        " | xargs -0 sha256sum",
    )
    return {line.split("  ", 1)[1][2:]: line.split()[0] for line in out.splitlines()}


def full_check(
    host: str, tmp_path: Path, model: str, source: str, revision: str
) -> dict[str, dict[str, Any]]:
    """model_weights_fetch (state: planned, mode: verify, verify: full) on one host: every file
    of the published copy re-hashed against its manifest, by the code the module ships."""
    task = {
        "name": "Check | Re-hash the published copy",
        "acceldeploy.fleet.model_weights_fetch": {
            "state": "planned",
            "mode": "verify",
            "verify": "full",
            "root": ROOT,
            "models": [{"model": model, "source": source, "revision": revision}],
        },
        "vars": {"ansible_python_interpreter": f"{VENV}/bin/python"},
    }
    playbook = tmp_path / "full-check.yml"
    playbook.write_text(json.dumps([{"hosts": host, "gather_facts": False, "tasks": [task]}]))
    run = run_playbook(playbook)
    assert run.ok, run.output
    return run.results("Check | Re-hash the published copy")


def failure_text(run: PlaybookRun) -> str:
    return "\n".join(str(r.get("msg") or "") for _t, _h, r in run.iter_results() if r.get("failed"))


def figures(name: str, **values: Any) -> None:
    """Printed with -s: the numbers the README and the report quote."""
    print(f"\n[model_weights] {name}: " + ", ".join(f"{k}={v}" for k, v in values.items()))


def test_bad_input_fails_before_any_download(hosts, mirrors):
    wipe(hosts)
    since = olah_mirror.served(mirrors["hf"])["lines"]
    unknown = services(mirrors, blob=False)
    unknown[0]["source"] = "github"
    unpinned = services(mirrors, blob=False)
    del unpinned[0]["revision"]
    cases = [
        ({"acceldeploy_services": unknown}, "acceldeploy_services[0] (test-model).source"),
        ({"acceldeploy_services": unpinned}, "model_weights_require_revision"),
        ({"model_weights_strategy": "torrent"}, "model_weights_strategy"),
        (
            {"model_weights_strategy": "seed", "model_weights_seed_host": "nowhere"},
            "model_weights_seed_host",
        ),
    ]
    for overrides, needle in cases:
        run = run_playbook(PLAYBOOK, extra_vars=extra(mirrors, **overrides))
        assert not run.ok, f"{overrides} should fail"
        assert needle in failure_text(run), failure_text(run)
        assert all(run.changed(h) == 0 for h in hosts), run.stats
    # Too little disk: fails at the plan, with the numbers, before any byte is downloaded.
    run = run_playbook(
        PLAYBOOK, extra_vars=extra(mirrors, model_weights_free_space_reserve_gib=10**6)
    )
    assert not run.ok
    text = failure_text(run)
    assert "not enough disk" in text and "GiB is free" in text and "GiB" in text, text
    assert "model_weights_free_space_reserve_gib" in text
    assert file_bytes(olah_mirror.served(mirrors["hf"], since_line=since), MODEL) == 0
    assert file_bytes(olah_mirror.served(mirrors["hf"], since_line=since), BLOB) == 0
    for hostvars in hosts.values():
        assert remote(hostvars, f"ls {ROOT}/acceldeploy 2>/dev/null | wc -l").strip() == "0"


def test_each_downloads_on_every_host(hosts, mirrors):
    wipe(hosts)
    started = time.monotonic()
    run, served = converge(mirrors, model_weights_strategy="each")
    seconds = time.monotonic() - started
    assert run.ok, run.output
    model_bytes, blob_bytes = file_bytes(served, MODEL), file_bytes(served, BLOB)
    figures("each", seconds=round(seconds, 1), model_bytes=model_bytes, blob_bytes=blob_bytes)
    assert blob_bytes == 2 * (BLOB_BYTES + 23)
    assert model_bytes > 2 * 9 * MIB
    for name in hosts:
        assert run.changed(name) >= 1


def test_second_run_changes_and_downloads_nothing(hosts, mirrors):
    started = time.monotonic()
    run, served = converge(mirrors, model_weights_strategy="each")
    seconds = time.monotonic() - started
    assert run.ok, run.output
    assert all(run.changed(h) == 0 for h in hosts), run.stats
    assert served["requests"] == 0, served  # pinned commits: not even a metadata call
    # The no-op path: one read-only call per host found nothing changed; nothing else ran.
    states = run.results("Anything changed since the last converge")
    assert sorted(states) == sorted(hosts), states
    assert all(state["drift"] == [] for state in states.values()), states
    assert not run.results("Plan | Models this host downloads from the hub")
    figures("second run", seconds=round(seconds, 1), bytes=served["bytes"])
    # What the no-op path stands in for: the full check finds every model in place.
    full, served = converge(mirrors, model_weights_strategy="each", acceldeploy_full_check=True)
    assert full.ok, full.output
    assert all(full.changed(h) == 0 for h in hosts), full.stats
    assert served["requests"] == 0, served
    plans = full.results("Plan | Models this host downloads from the hub")
    assert sorted(plans) == sorted(hosts), plans
    for name, result in plans.items():
        for plan in result["plans"]:
            assert plan["action"] == "none", (name, plan)
            assert plan["rehashed_bytes"] == 0, (name, plan)
    check = run_playbook(PLAYBOOK, extra_vars=extra(mirrors), check=True, diff=True)
    assert check.ok, check.output
    assert all(check.changed(h) == 0 for h in hosts), check.stats


def test_check_mode_on_a_bare_host_changes_nothing_and_ships_no_code(hosts, mirrors):
    """No venv, no wheels, no models: check mode reports what it would do, creates nothing,
    and no task shows a Python file as a diff (the module's code is never copied to hosts:
    it travels inside each model_weights_fetch call)."""
    for hostvars in hosts.values():
        remote(hostvars, f"rm -rf {BARE}")
    run = run_playbook(
        PLAYBOOK,
        extra_vars=extra(
            mirrors,
            model_weights_venv=f"{BARE}/venv",
            model_weights_host_wheels=f"{BARE}/wheels",
            model_weights_root=f"{BARE}/models",
        ),
        check=True,
        diff=True,
    )
    assert run.ok, run.output
    diffs = json.dumps([r["diff"] for _t, _h, r in run.iter_results() if r.get("diff")])
    assert "from __future__" not in diffs and "import " not in diffs, diffs[:2000]
    for hostvars in hosts.values():
        assert remote(hostvars, f"ls -A {BARE} 2>/dev/null | wc -l").strip() == "0"
        assert remote(hostvars, f"ls -A {VENV}/acceldeploy 2>/dev/null | wc -l").strip() == "0"


def test_seed_downloads_once_and_fans_out(hosts, mirrors):
    wipe(hosts)
    started = time.monotonic()
    run, served = converge(mirrors, model_weights_strategy="seed")
    seconds = time.monotonic() - started
    assert run.ok, run.output
    model_bytes, blob_bytes = file_bytes(served, MODEL), file_bytes(served, BLOB)
    figures("seed", seconds=round(seconds, 1), model_bytes=model_bytes, blob_bytes=blob_bytes)
    assert blob_bytes == BLOB_BYTES + 23
    first, second = hosts.values()
    for directory in (f"{MODEL}@{mirrors['model_rev']}", f"{BLOB}@{mirrors['blob_rev']}"):
        assert tree(first, directory) == tree(second, directory)
    model_files = tree(first, f"{MODEL}@{mirrors['model_rev']}")
    assert "sub/extra[1].json" in model_files and "README.md" not in model_files
    again, served = converge(mirrors, model_weights_strategy="seed")
    assert again.ok and all(again.changed(h) == 0 for h in hosts), again.stats
    assert served["bytes"] == 0


def test_flipped_byte_is_found_and_repaired(hosts, mirrors):
    (first_name, first), (second_name, second) = hosts.items()
    directory = f"{ROOT}/{MODEL}@{mirrors['model_rev']}"
    name = "model-00001-of-00002.safetensors"
    shard = f"{directory}/{name}"
    good = tree(first, f"{MODEL}@{mirrors['model_rev']}")
    flip = f"printf '\\x00' | dd of={shard} bs=1 seek=4096 conv=notrunc status=none"
    remote(first, flip)  # mtime moves
    remote(second, f"touch -r {shard} /tmp/mtime && {flip} && touch -r /tmp/mtime {shard}")
    run, served = converge(mirrors, model_weights_strategy="each")
    assert run.ok, run.output
    assert run.changed(first_name) >= 1 and run.changed(second_name) >= 1, run.stats
    for hostvars in (first, second):
        assert tree(hostvars, f"{MODEL}@{mirrors['model_rev']}") == good
    assert file_bytes(served, MODEL) == 2 * 6 * MIB  # only the bad shard came again, to each
    restamp = (
        "import json, os; m = json.load(open('.acceldeploy-manifest.json')); "
        f"st = os.stat('{name}'); "
        f"m['files']['{name}'].update(mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns); "
        "json.dump(m, open('.acceldeploy-manifest.json', 'w'))"
    )
    remote(second, f'{flip} && cd {directory} && python3 -c "{restamp}"')
    run, served = converge(mirrors, model_weights_strategy="each")
    assert run.ok, run.output
    assert run.changed(second_name) == 0, run.stats
    assert tree(second, f"{MODEL}@{mirrors['model_rev']}") != good  # the whole stamp matches
    run, served = converge(mirrors, model_weights_strategy="each", model_weights_verify="full")
    assert run.ok, run.output
    assert run.changed(second_name) >= 1 and run.changed(first_name) == 0, run.stats
    assert tree(second, f"{MODEL}@{mirrors['model_rev']}") == good
    figures("repair", refetched_bytes=file_bytes(served, MODEL))


def _kill_midway(hosts, mirrors, source: str, proxy_port: int) -> tuple[PlaybookRun, int]:
    name, hostvars = next(iter(hosts.items()))
    progress = f"{ROOT}/.acceldeploy/progress/{BLOB}@{mirrors['blob_rev']}.json"
    endpoints = {
        "model_weights_hf_endpoint": f"http://127.0.0.1:{proxy_port}",
        "model_weights_modelscope_endpoint": f"http://127.0.0.1:{proxy_port}",
    }
    box: dict[str, PlaybookRun] = {}
    blob_only = [s for s in services(mirrors, source=source) if s["model"] == BLOB]
    thread = threading.Thread(
        target=lambda: box.setdefault(
            "run",
            run_playbook(
                PLAYBOOK,
                extra_vars=extra(mirrors, acceldeploy_services=blob_only, **endpoints),
                limit=name,
            ),
        )
    )
    thread.start()
    killed_at = 0
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and thread.is_alive():
        result = ssh(hostvars, f"cat {progress} 2>/dev/null")
        if result.returncode == 0 and result.stdout.strip():
            state = json.loads(result.stdout)
            if state["state"] == "running" and state["bytes_present"] > BLOB_BYTES // 4:
                killed_at = state["bytes_present"]
                remote(hostvars, f"kill -9 {state['pid']}")
                break
        time.sleep(0.3)
    thread.join(timeout=300)
    assert killed_at, "the download finished before it could be killed"
    return box["run"], killed_at


@pytest.mark.parametrize("source", ["modelscope", "hf"])
def test_killed_download_resumes(hosts, mirrors, source, tmp_path):
    wipe(hosts)
    name, hostvars = next(iter(hosts.items()))
    target = mirrors["ms" if source == "modelscope" else "hf"]
    proxy = Throttle(target.port, rate=16 * MIB)
    try:
        counter = msmirror.served if source == "modelscope" else olah_mirror.served
        since = counter(target)["lines"]
        killed, killed_at = _kill_midway(hosts, mirrors, source, proxy.port)
        assert not killed.ok, "the killed run should fail"
        first = counter(target, since_line=since)
        since = first["lines"]
        blob_only = [s for s in services(mirrors, source=source) if s["model"] == BLOB]
        run = run_playbook(
            PLAYBOOK, extra_vars=extra(mirrors, acceldeploy_services=blob_only), limit=name
        )
        assert run.ok, run.output
        second = counter(target, since_line=since)
    finally:
        proxy.close()
    (result,) = run.results("Download | From the hub").values()
    (converged,) = result["results"]
    if source == "hf":
        # The killed run's partial was picked up and completed with the client's http_get.
        assert converged["resumed"] == ["blob.bin"], converged
    else:
        # modelscope's own snapshot_download resumed its <file>.incomplete with a Range request.
        assert converged["client_files"] == ["blob.bin"], converged
    blob_file = [v for k, v in second["files"].items() if k.endswith("blob.bin")]
    again = sum(v["bytes"] for v in blob_file)
    figures(f"resume {source}", killed_at=killed_at, rerun_blob_bytes=again)
    if source == "modelscope":
        # msmirror honours Range: the rerun fetched only what the killed run had not.
        assert again <= BLOB_BYTES - killed_at + 8 * MIB, (again, killed_at)
    else:
        # olah 0.5.4 ignores Range on its local mirrors (200, whole file): the client restarts.
        assert again <= BLOB_BYTES + 23
    (checked,) = full_check(name, tmp_path, BLOB, source, mirrors["blob_rev"]).values()
    (plan,) = checked["plans"]
    assert plan["action"] == "none" and plan["rehashed_bytes"] == BLOB_BYTES + 23, plan
    assert (
        remote(hostvars, f"sha256sum {ROOT}/{BLOB}@{mirrors['blob_rev']}/blob.bin").split()[0]
        == __import__("hashlib").sha256(_bytes(3, BLOB_BYTES)).hexdigest()
    )

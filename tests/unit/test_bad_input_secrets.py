"""The secrets rule, with planted credentials: every place a user could put one is either
refused before any host is contacted (naming the variable to use instead, never echoing the
value), or, for the service's api_key and the hub tokens, kept out of every unit, launcher,
argv, preview, `--check --diff` output and error."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from acceldeploy import secrets
from acceldeploy.errors import AcceldeployError
from acceldeploy.verify.model import Check

ROOT = Path(__file__).resolve().parents[2]
ASCEND = yaml.safe_load((ROOT / "inventory/examples/ascend-910b/group_vars/all.yml").read_text())
CLOSED = {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_connection": "ssh"}
PLANTED = "plantedSECRETx9f3"
HF = f"hf_{PLANTED}"
URL = f"https://mirror-user:{PLANTED}@mirror.example/"

# (case id, what the refusal must name, host variables changed, first service changed)
REFUSED: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("env-hf-token", "env.HF_TOKEN", {}, {"env": {"HF_TOKEN": HF}}),
    ("env-hub-token", "env.HUGGING_FACE_HUB_TOKEN", {},
     {"env": {"HUGGING_FACE_HUB_TOKEN": HF}}),
    ("env-ms-token", "env.MODELSCOPE_API_TOKEN", {}, {"env": {"MODELSCOPE_API_TOKEN": PLANTED}}),
    ("env-api-key", "env.VLLM_API_KEY", {}, {"env": {"VLLM_API_KEY": PLANTED}}),
    ("env-password", "env.S3_PASSWORD", {}, {"env": {"S3_PASSWORD": PLANTED}}),
    ("env-url", "env.HF_ENDPOINT", {}, {"env": {"HF_ENDPOINT": URL}}),
    ("arg-hf-token", "extra_args.hf-token", {}, {"extra_args": {"hf-token": HF}}),
    ("arg-hf-token-flag", "extra_args.--hf_token", {}, {"extra_args": {"--hf_token": HF}}),
    ("arg-api-key", "extra_args.api-key", {}, {"extra_args": {"api-key": PLANTED}}),
    ("arg-url", "extra_args.middleware", {}, {"extra_args": {"middleware": URL}}),
    ("model-url", ".model", {}, {"model": f"{URL}Qwen/Qwen3-VL-8B-Instruct"}),
    ("api-key-lines", ".api_key", {}, {"api_key": f"{PLANTED}\nsecond line"}),
    ("hf-endpoint", "model_weights_hf_token", {"model_weights_hf_endpoint": URL}, {}),
    ("ms-endpoint", "model_weights_modelscope_token",
     {"model_weights_modelscope_endpoint": URL}, {}),
    ("index-url", "python_env_index_url", {"python_env_index_url": f"{URL}simple"}, {}),
    ("find-links", "python_env_find_links[0]", {"python_env_find_links": [URL]}, {}),
    ("bench-dataset", "acceldeploy_bench_profiles.mine.dataset_path",
     {"acceldeploy_bench_profiles": {"mine": {"dataset": "hf", "dataset_path": URL,
                                              "prompts": 4}}}, {}),
    ("hub-token-type", "model_weights_hf_token", {"model_weights_hf_token": [HF]}, {}),
]  # fmt: skip


def host(change_vars: dict[str, Any], change_service: dict[str, Any]) -> dict[str, Any]:
    hv = {**copy.deepcopy(ASCEND), **CLOSED, **change_vars}
    if change_service:
        first = {**hv["acceldeploy_services"][0], **change_service}
        hv["acceldeploy_services"] = [first, *hv["acceldeploy_services"][1:]]
    return hv


def ansible(playbook: str, inventory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
         str(ROOT / playbook), *extra],
        capture_output=True, text=True, check=False, cwd=ROOT, timeout=600,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
             "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
             "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"},
    )  # fmt: skip


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    inventory = tmp_path_factory.mktemp("secrets") / "hosts.yml"
    hosts = {case: host(hv, sv) for case, _, hv, sv in REFUSED}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    proc = ansible("playbooks/preflight.yml", inventory, "-v")
    output = proc.stdout + proc.stderr
    return output, json.loads(proc.stdout[proc.stdout.index("{") :])


@pytest.mark.parametrize(("case", "named"), [c[:2] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_a_planted_credential_is_refused_naming_the_variable(
    case: str, named: str, refused: tuple[str, dict[str, Any]]
) -> None:
    output, data = refused
    stats = data["stats"][case]
    assert stats["unreachable"] == 0 and stats["changed"] == 0
    failed = [
        str(task["hosts"][case].get("msg", ""))
        for play in data["plays"]
        for task in play["tasks"]
        if task["hosts"].get(case, {}).get("failed")
    ]
    assert len(failed) == 1, f"{case} was not refused: {stats}"
    assert named in failed[0], failed[0]
    assert PLANTED not in output


def test_accepted_credentials_stay_out_of_the_preview_and_check_diff(tmp_path: Path) -> None:
    """The api_key and a hub token from the vault: site.yml --check --diff -v gets as far as
    the first contact (a closed port) and prints neither."""
    inventory = tmp_path / "hosts.yml"
    hv = host({"model_weights_hf_token": HF}, {"api_key": PLANTED})
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"npu-01": hv}}}))
    proc = ansible("site.yml", inventory, "--check", "--diff", "-v")
    data = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert data["stats"]["npu-01"]["unreachable"] == 1, proc.stdout[-3000:]
    shown = [
        t for p in data["plays"] for t in p["tasks"] if t["task"]["name"].startswith("Show what")
    ]
    assert shown and "vllm serve" in json.dumps(shown)  # the preview ran, with the argv
    assert PLANTED not in proc.stdout + proc.stderr


def test_the_api_key_is_in_no_rendered_unit_launcher_or_argv(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    hv = host({"model_weights_hf_token": HF}, {"api_key": PLANTED})
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"npu-01": hv}}}))
    for extra in (["--unit"], ["--json"], []):
        proc = plan("render", "-i", str(inventory), "--host", "npu-01", *extra)
        assert proc.returncode == 0, proc.stderr
        assert PLANTED not in proc.stdout + proc.stderr
    units = plan("render", "-i", str(inventory), "--host", "npu-01", "--unit").stdout
    assert "EnvironmentFile=-/etc/acceldeploy/secrets/qwen3-vl.env" in units or (
        "EnvironmentFile=/etc/acceldeploy/secrets/qwen3-vl.env" in units
    ), units


def plan(*args: str) -> subprocess.CompletedProcess[str]:
    return tool("plan.py", *args)


def tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / name), *args],
        capture_output=True, text=True, check=False, cwd=ROOT, timeout=300,
    )  # fmt: skip


INVENTORY = ("-i", "inventory/examples/ascend-910b")
REQUIRED = {
    "verify.py": INVENTORY,
    "bench.py": (*INVENTORY, "--profile", "smoke"),
    "tune.py": (*INVENTORY, "--host", "npu-01", "--service", "qwen3-vl", "--profile", "smoke",
                "--space", "max_num_seqs=4,8", "--sla", "p99_ttft=2s"),
    "plan.py": ("render", *INVENTORY, "--host", "npu-01"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_a_credential_on_a_command_line_is_not_echoed(name: str) -> None:
    proc = tool(name, *REQUIRED[name], "--api-key", PLANTED, f"--hf-token={HF}",
                "--header", f"Authorization: Bearer {PLANTED}")  # fmt: skip
    assert proc.returncode == 2
    assert "--api-key ***" in proc.stderr or "--hf-token=***" in proc.stderr, proc.stderr
    assert PLANTED not in proc.stdout + proc.stderr


def test_a_credential_in_a_bench_profile_is_refused_before_contact(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    profiles = {"mine": {"dataset": "hf", "dataset_path": URL, "prompts": 4}}
    hv = host({"acceldeploy_bench_profiles": profiles}, {})
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"npu-01": hv}}}))
    proc = tool("bench.py", "-i", str(inventory), "--profile", "mine", "--out", str(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "acceldeploy_bench_profiles.mine.dataset_path" in proc.stderr
    assert PLANTED not in proc.stdout + proc.stderr
    assert not any(tmp_path.iterdir()) or [p.name for p in tmp_path.iterdir()] == ["hosts.yml"]


@pytest.mark.parametrize(
    "text",
    [
        f"unrecognized arguments: --api-key {PLANTED}",
        f"--hf-token={HF}",
        f"model {URL}Qwen/x",
        f"Authorization: Bearer {PLANTED}",
        f"{{'api_key': '{PLANTED}', 'port': 8000}}",
        f'{{"token": "{PLANTED}"}}',
        f"HF_TOKEN={PLANTED} VLLM_API_KEY={PLANTED}",
        f"api_key: {PLANTED}",
        f"a token in text: {HF}",
    ],
)
def test_mask_hides_every_shape_of_credential(text: str) -> None:
    masked = secrets.mask(text)
    assert PLANTED not in masked and secrets.HIDDEN in masked, masked


@pytest.mark.parametrize(
    "text",
    [
        "env.HF_TOKEN is a hub token: the unit serves the local copy offline",
        "max_num_batched_tokens: 8192",
        "git@github.com:org/repo and user@example.com",
        "--max-num-seqs 8 --port 8000",
    ],
)
def test_mask_leaves_plain_text_alone(text: str) -> None:
    assert secrets.mask(text) == text


def test_errors_checks_and_remembered_values_are_masked() -> None:
    assert PLANTED not in str(AcceldeployError(f"cannot reach {URL}"))
    check = Check("h", "api", "fail", f"401: Bearer {PLANTED}", f"api_key: {PLANTED}")
    assert PLANTED not in check.detail + check.fix
    secrets.remember("a-vault-value-with-no-shape")
    assert secrets.mask("saw a-vault-value-with-no-shape here") == "saw *** here"

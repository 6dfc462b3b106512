"""acceldeploy.modelref: the one parser of a service's model keys and the one model-directory
rule, which the renderer's path and model_weights' published directory share."""

from __future__ import annotations

import pytest

from acceldeploy import modelref
from acceldeploy.errors import AcceldeployError
from acceldeploy.host.fetch.common import Layout, ModelSpec
from acceldeploy.modelref import ModelRef, ModelRefError, model_dir, model_dirname, parse_model_ref
from acceldeploy.serving.render import model_path
from acceldeploy.serving.service import parse_service

REV = "0123456789abcdef0123456789abcdef01234567"
WHERE = "acceldeploy_services[0] (q)"


def test_defaults():
    ref = parse_model_ref({"model": "org/m"}, WHERE)
    assert ref == ModelRef("org/m", "hf", None, None)
    assert ref.repo_revision == "main" and not ref.pinned
    ms = parse_model_ref({"model": "org/m", "source": "modelscope", "revision": ""}, WHERE)
    assert ms.revision is None and ms.repo_revision == "master"
    assert modelref.DEFAULT_REVISION == {"hf": "main", "modelscope": "master"}


def test_revision_patterns_and_pinning():
    ref = parse_model_ref(
        {"model": "org/m", "revision": REV, "allow_patterns": "*.json", "name": "x"}, WHERE
    )
    assert ref.pinned and ref.repo_revision == REV and ref.allow_patterns == ("*.json",)
    assert parse_model_ref({"model": "o/m", "revision": 1234}, WHERE).revision == "1234"
    assert not parse_model_ref({"model": "o/m", "revision": "v1.0"}, WHERE).pinned


@pytest.mark.parametrize(
    ("raw", "require", "message"),
    [
        ({"model": "nope"}, False, f"{WHERE}.model must look like 'org/name', got 'nope'"),
        ({"model": None}, False, f"{WHERE}.model must look like 'org/name', got None"),
        (
            {"model": "o/m", "source": "github"},
            False,
            f"{WHERE}.source must be one of hf, modelscope, got 'github'",
        ),
        (
            {"model": "o/m", "source": None},
            False,
            f"{WHERE}.source must be one of hf, modelscope, got None",
        ),
        (
            {"model": "o/m", "source": "modelscope"},
            True,
            f"{WHERE}.revision is not set and model_weights_require_revision is true: pin the "
            "commit id to deploy (or set model_weights_require_revision: false to follow "
            "'master')",
        ),
        ({"model": "o/m", "revision": "../x"}, False, f"{WHERE}.revision must be a commit id"),
        ({"model": "o/m", "revision": "a..b"}, False, f"{WHERE}.revision must be a commit id"),
        (
            {"model": "o/m", "allow_patterns": []},
            False,
            f"{WHERE}.allow_patterns must be a non-empty list of glob patterns such as "
            "['*.safetensors', '*.json'], got []",
        ),
        ({"model": "o/m", "allow_patterns": ["ok", ""]}, False, f"{WHERE}.allow_patterns must be"),
        ({"model": "o/m", "allow_patterns": {"a": 1}}, False, f"{WHERE}.allow_patterns must be"),
    ],
)
def test_messages_name_the_variable(raw, require, message):
    with pytest.raises(ModelRefError) as info:
        parse_model_ref(raw, WHERE, require_revision=require)
    assert str(info.value).startswith(message)
    assert isinstance(info.value, AcceldeployError)


def test_label():
    assert modelref.label("acceldeploy_services", 2, "qwen") == "acceldeploy_services[2] (qwen)"
    assert modelref.label("acceldeploy_services", 2) == "acceldeploy_services[2]"
    assert modelref.label("acceldeploy_services", 2, "") == "acceldeploy_services[2]"


def test_the_one_directory_rule():
    # Without a revision the directory is @main for both sources (today's layout on disk).
    assert model_dirname("org/m", None) == "org/m@main"
    assert model_dirname("org/m", "") == "org/m@main"
    assert model_dirname("org/m", "master") == "org/m@master"
    assert model_dir("/models/", "org/m", REV) == f"/models/org/m@{REV}"
    assert model_dir("/models", "org/m", None) == "/models/org/m@main"
    spec = ModelSpec("org/m", "modelscope", None)
    assert spec.dirname == "org/m@main" and spec.repo_revision == "master"


@pytest.mark.parametrize(
    "raw",
    [
        {"name": "q", "model": "Qwen/Qwen3-VL-8B-Instruct", "revision": REV},
        {"name": "q", "model": "org/other"},
        {"name": "q", "model": "org/other", "source": "modelscope"},
        {"name": "q", "model": "org/other", "source": "modelscope", "revision": "master"},
    ],
)
def test_renderer_path_is_the_published_directory(raw, tmp_path):
    """What the vLLM unit reads (render.model_path) is where model_weights publishes."""
    service = parse_service(raw, "cpu", 0)
    ref = parse_model_ref(raw, WHERE)
    spec = ModelSpec(ref.model, ref.source, ref.revision, ref.allow_patterns)
    assert model_path(str(tmp_path), service) == model_dir(str(tmp_path), ref.model, ref.revision)
    assert str(Layout(tmp_path).published(spec)) == model_path(str(tmp_path), service)

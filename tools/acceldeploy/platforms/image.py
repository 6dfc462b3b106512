"""The stack's container image on a host: where it comes from and whether it is there.

Both runtime roles that run vLLM in an image (gaudi_runtime always, ascend_runtime when the
host's python_env_manager is container) take the same inputs under their own prefix
(``<role>_image``, ``<role>_image_tarball``, ``<role>_image_registry``), judge the host the
same way and hand the commands to roles/container_image, which brings the image. Nothing is
pulled from the internet: a `docker save` tarball (on the host or at an internal URL) or an
internal registry.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.platforms.probe import CheckRun, probed_command

IMAGE_REFERENCE = re.compile(r"[a-z0-9][a-z0-9._/:@-]*")


def image_options(role: str, inputs: dict[str, Any], stack_entry: dict[str, Any]) -> dict[str, Any]:
    """The image inputs checked before any host is touched, failing naming ``role``'s
    variable: the image, the reference it is pulled by and where its tarball lands."""
    tarball = str(inputs.get("image_tarball") or "")
    if tarball and not tarball.startswith(("/", "http://", "https://")):
        raise AcceldeployError(
            f"{role}_image_tarball must be an absolute path or an http(s) URL: {tarball!r}"
        )
    registry = str(inputs.get("image_registry") or "")
    if registry and ("://" in registry or registry.endswith("/")):
        raise AcceldeployError(
            f"{role}_image_registry is a registry host[:port][/path] without scheme or "
            f"trailing slash, got {registry!r}"
        )
    image = str(inputs.get("image") or stack_entry.get("image") or "")
    if not IMAGE_REFERENCE.fullmatch(image):
        raise AcceldeployError(f"{role}_image {image!r} is not an image reference")
    download_dir = str(inputs.get("download_dir") or "/var/cache/acceldeploy/images")
    name = PurePosixPath(tarball.split("?", 1)[0]).name
    remote = tarball.startswith(("http://", "https://"))
    return {
        "image": image,
        "image_probe": image_probe(image),
        "pull_ref": f"{registry}/{image}" if registry else "",
        "tarball_path": f"{download_dir.rstrip('/')}/{name}" if remote else tarball,
    }


def image_probe(image: str) -> dict[str, list[str]]:
    """What a runtime role's probe runs for the image (``judge_image`` reads the answers)."""
    return {
        "docker_version": ["docker", "version", "--format", "{{.Server.Version}}"],
        "image_inspect": ["docker", "image", "inspect", "--format", "{{.Id}}", image],
    }


def _commands(image: str, options: dict[str, Any], source: str) -> list[list[str]]:
    """The commands that bring the image from its source (none when present or missing)."""
    if source == "tarball":
        path = str(options.get("tarball_path") or options.get("image_tarball") or "")
        return [["docker", "load", "--input", path]]
    if source == "registry":
        registry = str(options.get("image_registry") or "")
        pull = str(options.get("pull_ref") or f"{registry}/{image}")
        return [["docker", "pull", pull], ["docker", "tag", pull, image]]
    return []


def judge_image(host: CheckRun, role: str, image: str) -> dict[str, Any]:
    """Whether the image is on the host, else the tarball or registry it comes from (an
    error naming ``role``'s variables when neither is set): what roles/container_image takes.
    The probe's ``docker_version`` and ``image_inspect`` commands answer it."""
    inspect = probed_command(host.probe, "image_inspect")
    docker = probed_command(host.probe, "docker_version")
    present = bool(docker.get("found")) and int(inspect.get("rc", 1)) == 0
    host.detected["image_id"] = str(inspect.get("stdout") or "").strip() if present else ""
    options = host.options
    tarball = str(options.get("image_tarball") or "")
    registry = str(options.get("image_registry") or "")
    source = "present"
    if not present:
        if tarball:
            source = "tarball"
        elif registry:
            source = "registry"
        else:
            source = "missing"
            host.error(
                f"image {image} is not on this host: set {role}_image_tarball (a `docker "
                f"save` tarball on the host or an internal http(s) URL) or {role}_image_registry "
                "(an internal registry holding it)"
            )
    remote = source == "tarball" and tarball.startswith(("http://", "https://"))
    download = (
        {
            "url": tarball,
            "dest": str(options.get("tarball_path") or ""),
            "checksum": str(options.get("image_tarball_checksum") or ""),
        }
        if remote
        else {}
    )
    return {
        "ref": image,
        "present": present,
        "source": source,
        "commands": _commands(image, options, source),
        "download": download,
    }

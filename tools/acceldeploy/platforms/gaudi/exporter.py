"""Intel's metric exporter, the image ``monitor_gaudi_exporter_image`` (loaded from
``monitor_gaudi_exporter_image_tarball`` when given), run by ``gaudi-metric-exporter.service``
through docker."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.platforms.exporter import Exporter, ExporterInputs, exec_line

UNIT = "gaudi-metric-exporter.service"
CONTAINER = "acceldeploy-gaudi-exporter"
DOCKER = "/usr/bin/docker"
IMAGE = re.compile(r"[a-z0-9][a-z0-9._/:@-]*")


def _image(inputs: ExporterInputs) -> str:
    image = inputs.text("monitor_gaudi_exporter_image")
    if not IMAGE.fullmatch(image):
        raise AcceldeployError(
            f"monitor_gaudi_exporter_image {image!r} is not an image reference; name it as "
            "docker does, e.g. vault.habana.ai/gaudi-metric-exporter/metric-exporter:1.23.0-695"
        )
    return image


def _plan(inputs: ExporterInputs) -> dict[str, Any]:
    if not inputs.text("monitor_gaudi_exporter_image"):
        raise AcceldeployError(
            f"{inputs.host}: monitor_gaudi_exporter_image_tarball is set but "
            "monitor_gaudi_exporter_image is empty: name the image the tarball holds"
        )
    image = _image(inputs)
    tarball = None
    if inputs.text("monitor_gaudi_exporter_image_tarball"):
        tarball = inputs.artefact(
            "monitor_gaudi_exporter_image_tarball",
            "monitor_gaudi_exporter_image_tarball_checksum",
            f"a `docker save` tarball of {image}",
        )
    address = inputs.address()
    port = int(inputs.value("monitor_gaudi_exporter_port"))
    bind = f"[{address}]" if ":" in address else address
    # Intel's documented run, but its port published on the private address alone: with
    # --network=host it would answer on every interface (it takes no address).
    argv = [DOCKER, "run", "--rm", "--name", CONTAINER, "--pull=never", "--privileged",
            "-v", "/dev:/dev", "-p", f"{bind}:{port}:{port}",
            image, "--port", str(port)]  # fmt: skip
    load = [DOCKER, "load", "--input", tarball.path] if tarball else [DOCKER, "pull", image]
    return {
        "exporter": GAUDI.job,
        "unit": GAUDI.unit,
        "tasks": GAUDI.tasks,
        "address": address,
        "image": image,
        "tarball": tarball.to_dict() if tarball else None,
        "load_argv": load,
        "container": CONTAINER,
        "argv": argv,
    }


def _directives(
    planned: Mapping[str, Any], scrapers: Sequence[str], found_nodes: Sequence[str]
) -> dict[str, Any]:
    return {
        "exec_start_pre": f"-{DOCKER} rm -f {planned['container']}",
        "exec_start": exec_line(planned["argv"]),
        "exec_stop": f"{DOCKER} stop {planned['container']}",
    }


GAUDI = Exporter(
    job="gaudi",
    name="Intel's metric exporter",
    port_variable="monitor_gaudi_exporter_port",
    variables=("monitor_gaudi_exporter_image", "monitor_gaudi_exporter_image_tarball"),
    settings=("monitor_gaudi_exporter_image_tarball_checksum",),
    unit=UNIT,
    tasks="gaudi_exporter.yml",
    plan=_plan,
    files=lambda planned: [],  # the image is docker's
    directives=_directives,
)

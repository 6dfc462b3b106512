"""Record what an engine reads and exports, for the upgrade advisor
(acceldeploy.planner.enginefacts reads it): the environment variables its ``envs.py`` declares
(the keys of its ``environment_variables`` mapping, read from the source without importing
it: a wheel, an sdist or a plugin's tree) and, where a start of it was recorded, the metric
families its ``/metrics`` exposed (the ``# TYPE`` lines)::

    python3 -m acceldeploy_lab.enginefacts --version 0.12.0 \\
        --env-source /var/cache/acceldeploy/wheels/vllm-0.12.0+cpu-cp311-...whl \\
        --metrics tests/data/recorded/vllm-0.12.0-cpu-metrics.txt

An Ascend or Gaudi stack adds its plugin's ``envs.py`` (``--plugin-env-source``, a directory
or an archive and the path of the file inside). acceldeploy_lab.stackrecord writes a cpu
stack's facts as its last step.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

from acceldeploy.planner.enginefacts import FACTS_DIR

FAMILY = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)
ENV_TABLES = ("environment_variables", "env_variables")


def read_member(source: Path, inner: str) -> str:
    """``inner`` (a path ending, e.g. vllm/envs.py) from a wheel, an sdist or a directory."""
    if source.is_dir():
        found = sorted(source.rglob(Path(inner).name))
        matches = [p for p in found if p.as_posix().endswith(inner)]
        if not matches:
            raise SystemExit(f"enginefacts: no {inner} under {source}")
        return min(matches, key=lambda p: len(p.parts)).read_text()
    if source.suffix == ".whl":
        with zipfile.ZipFile(source) as zf:
            names = [n for n in zf.namelist() if n.endswith(inner)]
            if names:
                return zf.read(min(names, key=len)).decode()
    elif tarfile.is_tarfile(source):
        with tarfile.open(source) as tf:
            members = [m for m in tf.getmembers() if m.name.endswith(inner)]
            if members:
                file = tf.extractfile(min(members, key=lambda m: len(m.name)))
                if file is not None:
                    return file.read().decode()
    raise SystemExit(f"enginefacts: no {inner} in {source}")


def env_names(envs_py: str) -> list[str]:
    """The keys of the module's environment-variable table, a dict literal."""
    for node in ast.parse(envs_py).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        )  # fmt: skip
        if isinstance(target, ast.Name) and target.id in ENV_TABLES:
            value = node.value if isinstance(node, (ast.AnnAssign, ast.Assign)) else None
            if isinstance(value, ast.Dict):
                return sorted(str(k.value) for k in value.keys if isinstance(k, ast.Constant))
    raise SystemExit(f"enginefacts: no {' or '.join(ENV_TABLES)} dict literal found")


def metric_families(exposition: str, prefix: str = "vllm:") -> dict[str, str]:
    """The engine's own families (name -> type) of a /metrics text, ``_created`` left out."""
    return {
        name: kind
        for name, kind in FAMILY.findall(exposition)
        if name.startswith(prefix) and not name.endswith("_created")
    }


def facts(version: str, env: dict[str, Any], metrics: dict[str, Any] | None) -> dict[str, Any]:
    document: dict[str, Any] = {"engine": "vllm", "version": version, "env": env}
    if metrics is not None:
        document["metrics"] = metrics
    return document


def write_whole(path: Path, text: str) -> Path:
    """The file whole or not at all: written beside it, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def write(version: str, document: dict[str, Any], out_dir: Path = FACTS_DIR) -> Path:
    text = json.dumps(document, indent=1, sort_keys=True) + "\n"
    return write_whole(out_dir / f"vllm-{version}.json", text)


def record(
    version: str,
    env_source: Path,
    metrics_file: Path | None,
    plugin: tuple[Path, str] | None = None,
    out_dir: Path = FACTS_DIR,
) -> Path:
    names = env_names(read_member(env_source, "vllm/envs.py"))
    env: dict[str, Any] = {"names": names, "source": f"vllm/envs.py of {env_source.name}"}
    if plugin is not None:
        tree, inner = plugin
        env["plugin_names"] = env_names(read_member(tree, inner))
        env["plugin_source"] = f"{inner} of {tree.name}"
    metrics: dict[str, Any] | None = None
    if metrics_file is not None:
        families = metric_families(metrics_file.read_text())
        metrics = {
            "families": families,
            "source": f"/metrics of a started engine, {metrics_file.name}",
        }
    return write(version, facts(version, env, metrics), out_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m acceldeploy_lab.enginefacts",
                                     description=(__doc__ or "").splitlines()[0])  # fmt: skip
    parser.add_argument("--version", required=True, help="the vLLM version, e.g. 0.23.0")
    parser.add_argument("--env-source", type=Path, required=True,
                        help="vLLM's wheel, sdist or source tree (its vllm/envs.py)")  # fmt: skip
    parser.add_argument("--metrics", type=Path, help="a /metrics text of that engine, started")
    parser.add_argument("--plugin-env-source", type=Path, help="the plugin's sdist or tree")
    parser.add_argument("--plugin-envs", default="", help="its envs.py, e.g. vllm_ascend/envs.py")
    args = parser.parse_args(argv)
    plugin = (args.plugin_env_source, args.plugin_envs) if args.plugin_env_source else None
    path = record(args.version, args.env_source, args.metrics, plugin)
    print(path, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

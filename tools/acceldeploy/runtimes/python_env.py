"""The Python environment a host gets: where it lives (``env_prefix``), the exact commands that
build it for venv / conda / container (``python_env_plan``), the key that decides whether it
is rebuilt, and the check of what it holds afterwards (``python_env_verify``).

A venv or conda environment is never built in place: each key gets its own directory beside
the environment's path (``<path>-<key[:12]>``, the staging directory), and the path itself is a
symlink moved onto it atomically once the install and the version check passed. The
directory the link pointed to before stays (the running service's, and the way back).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import targets
from acceldeploy.planner import defects
from acceldeploy.planner.platforms import get_platform
from acceldeploy.planner.stacks import host_stack, installer_pin, lock_requirements
from acceldeploy.platforms import find, for_name
from acceldeploy.platforms.versions import normalize_name

# Bumped when the way an environment is built changes (not its pins): forces a rebuild.
PLAN_FORMAT = 2
# <path>-<this many characters of the key>: the directory an environment is built in.
STAGING_KEY_CHARS = 12
RECORD_NAME = "acceldeploy-env.json"
VLLM_VERSION_CHECK = "import importlib.metadata as m, vllm; print(m.version('vllm'))"
REQUIREMENTS_NAME = "acceldeploy-requirements.txt"
CONSTRAINTS_NAME = "acceldeploy-constraints.txt"
DEFAULT_VENV = "/opt/acceldeploy/venv"
DEFAULT_CONDA_ROOT = "/opt/miniforge3"

PIP = ["-m", "pip"]
# --no-compile: pip byte-compiles on one core; the build's last step does it on every core.
PIP_WHEEL_QUIET = [
    "--disable-pip-version-check",
    "--no-input",
    "--no-cache-dir",
    "--progress-bar",
    "off",
]
PIP_QUIET = [*PIP_WHEEL_QUIET, "--no-compile"]
# uv installs a lock pinning it: no cache kept (its temporary one is under the step's TMPDIR,
# beside the environment, so that uv hard-links from it), no bytecode (as pip's --no-compile).
UV_INSTALL = ["pip", "install", "--quiet", "--no-deps", "--no-cache", "--no-progress"]
# The workaround amx_tile_permission (planner/defects.py): a .pth line runs as each of the
# environment's Pythons starts, spawned workers included, and asks Linux for the AMX tile state
# (arch_prctl = syscall 158 on x86_64, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18).
# On a CPU without AMX the kernel answers ENOTSUP and nothing changes.
AMX_PTH_NAME = "acceldeploy-amx-tile-permission.pth"
AMX_PTH_LINE = (
    "import os; os.uname().machine == 'x86_64' and "
    "__import__('ctypes').CDLL(None).syscall(158, 0x1023, 18)\n"
)
WRITE_PTH = (
    "import pathlib, sys, sysconfig; "
    "pathlib.Path(sysconfig.get_paths()['purelib'], sys.argv[1]).write_text(sys.argv[2])"
)
# Every .py of the environment byte-compiled on every core, as pip would have (a file that does
# not compile, such as a test written for another Python, is skipped as pip skips it), so the
# service, which cannot write into the environment, does not compile at each start.
COMPILE_ALL = "import compileall, sys; compileall.compile_dir(sys.argv[1], quiet=2, workers=0)"
CREDENTIALS = re.compile(r"(?<=://)[^/@\s:]+(?::[^/@\s]*)?@")
# The version an interpreter's name shows: python2.7, python3, python3.13t.
PYTHON_NAME = re.compile(r"python(\d+)(?:\.(\d+))?[a-z]*")
# vllm-ascend's build links against the CANN toolkit's devlib.
ASCEND_DEVLIB = "/usr/local/Ascend/ascend-toolkit/latest/$(uname -m)-linux/devlib"
# vllm-ascend's setup.py (v0.23.0.post1, gen_build_info): the chips its kernels are built for
# by SOC_VERSION, Atlas A2 and A3 (310P and A5 are not served by acceldeploy).
SOC_VERSIONS = (
    "ascend910b1", "ascend910b2", "ascend910b2c", "ascend910b3", "ascend910b4", "ascend910b4-1",
    "ascend910_9391", "ascend910_9381", "ascend910_9372", "ascend910_9392", "ascend910_9382",
    "ascend910_9362",
)  # fmt: skip
# What compiles vllm-ascend's kernels on the host (cmake comes with its build requirements).
SOURCE_BUILD_TOOLS = ("gcc", "g++", "make")
# The package whose build compiles kernels for one chip (SOC_VERSION).
ASCEND_KERNELS = "vllm-ascend"
# The build's own directory of the wheels it built from sdists.
BUILT_WHEELS_DIR = "acceldeploy-built-wheels"

# --------------------------------------------------------------------------------------------
# Inputs


def _as_list(value: Any) -> list[str]:
    if value in (None, ""):
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _chosen(options: Mapping[str, Any]) -> str:
    """The host's acceldeploy_stack (python_env_stack), empty for the platform's default."""
    return str(options.get("stack") or "")


def _stack(platform: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The stack the host runs (versions/stacks.yml or python_env_stacks_file)."""
    return host_stack(platform, _chosen(options), options.get("stacks_file") or None)


def _platform_and_manager(options: Mapping[str, Any]) -> tuple[str, str]:
    """acceldeploy_platform and python_env_manager (default: the platform's ``runtime`` in
    data/platforms.yml), checked to fit each other and the stack (planner.platforms)."""
    platform = str(options.get("platform") or "")
    manager = str(options.get("manager") or "")
    chosen = get_platform(platform, options.get("stacks_file") or None, _chosen(options), manager)
    return platform, chosen.runtime


def wheelhouse_only(platform: str) -> bool:
    """python_env_no_index's default: a platform whose stacks are wheel locks installs from
    the wheelhouse alone (the lab's lock needs its wheelhouse); another platform, or none or
    an unknown one (refused by the plan, naming the variable), from the indexes as well."""
    behaviour = find(platform)
    return bool(behaviour and behaviour.wheel_lock)


def _check_url_or_path(name: str, value: str) -> None:
    if value and not (value.startswith(("http://", "https://", "file://", "/"))):
        raise AcceldeployError(f"{name} must be an absolute path or an http(s) URL, got {value!r}")


def _check_sources(options: Mapping[str, Any]) -> None:
    """find-links, index and extra indexes are absolute paths or URLs; no_index has links."""
    for name in ("find_links", "index_url"):
        for value in _as_list(options.get(name)):
            _check_url_or_path(f"python_env_{name}", value)
    for value in _as_list(options.get("extra_index_urls")):
        _check_url_or_path("python_env_extra_index_urls", value)
    if options.get("no_index") and not _as_list(options.get("find_links")):
        raise AcceldeployError(
            "python_env_no_index is true but python_env_find_links is empty: point it at the "
            "wheelhouse (a directory on the host or an http(s) URL the controller serves)"
        )


def _extra_packages(options: Mapping[str, Any]) -> list[str]:
    extra = [str(x) for x in options.get("extra_packages") or []]
    for pin in extra:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._\[\],-]*==\S+", pin):
            raise AcceldeployError(f"python_env_extra_packages: {pin!r} is not name==version")
    return extra


def _pip_source_args(options: Mapping[str, Any]) -> list[str]:
    args: list[str] = []
    if options.get("no_index"):
        args.append("--no-index")
    for link in _as_list(options.get("find_links")):
        args += ["--find-links", link]
    if options.get("index_url") and not options.get("no_index"):
        args += ["--index-url", str(options["index_url"])]
    if not options.get("no_index"):
        for url in _as_list(options.get("extra_index_urls")):
            args += ["--extra-index-url", url]
    for host in _as_list(options.get("trusted_hosts")):
        args += ["--trusted-host", host]
    return args


def _check_venv_python(
    options: Mapping[str, Any], entry: Mapping[str, Any], platform: str, manager: str
) -> None:
    """python_env_venv_python refused before any host is contacted when its name shows a
    version (python2.7, /usr/bin/python3.8) outside what the toolkit supports on a host
    (data/targets.yml) or, for a venv, what the stack needs; preflight's first contact checks
    the interpreter itself (targets.stack_interpreter_errors)."""
    given = str(options.get("venv_python") or "")
    match = PYTHON_NAME.fullmatch(posixpath.basename(given))
    if not match:
        return
    minimums = targets.table()["minimums"]
    low, high = Version(str(minimums["python"])), Version(str(minimums["python_max"]))
    requires = str(entry.get("requires_python") or f"=={entry.get('python')}.*")
    stack = manager == "venv"
    if match[2] is None:
        shown, fits = f"Python {match[1]}", match[1] == "3"
    else:
        version = Version(f"{match[1]}.{match[2]}")
        shown = f"Python {version}"
        fits = low <= version <= high
        fits = fits and (not stack or Version(f"{version}.0") in SpecifierSet(requires))
    if fits:
        return
    needs = f"acceldeploy needs Python {low} to {high} on the host"
    if stack:
        needs += (
            f" and stack {entry['name']} (vLLM {entry['vllm']}) needs Python {requires}"
            f"{entry.get('requires_python_why') or ''}"
        )
    default = (
        f" for /usr/bin/python{entry['python']}, or set python_env_manager: conda (it installs "
        f"the stack's Python {entry['python']} itself, on any release)"
        if stack
        else ""
    )
    raise AcceldeployError(
        f"python_env_venv_python is {given}, {shown} by its name; {needs}: set "
        f"python_env_venv_python to such an interpreter on the host, or leave it empty{default}"
    )


# --------------------------------------------------------------------------------------------
# Where the environment lives


def _conda_root(options: Mapping[str, Any]) -> str:
    return str(options.get("conda_root") or DEFAULT_CONDA_ROOT)


def _prefix(manager: str, entry: Mapping[str, Any], options: Mapping[str, Any]) -> str:
    """The directory of a venv or conda environment, checked to be a dedicated one."""
    if manager == "venv":
        env = str(options.get("venv_path") or DEFAULT_VENV)
        var = "python_env_venv_path"
    else:
        env_name = entry.get("env_name") or "acceldeploy"
        env = str(options.get("conda_env_path") or f"{_conda_root(options)}/envs/{env_name}")
        var = (
            "python_env_conda_env_path"
            if options.get("conda_env_path")
            else ("python_env_conda_root")
        )
    if not env.startswith("/") or env.rstrip("/") in ("", "/opt", "/usr", "/usr/local"):
        raise AcceldeployError(
            f"{var}: the environment path {env!r} must be a dedicated absolute directory"
        )
    return env


def build_dir(env: str, key: str) -> str:
    """The directory one key's environment is built in, beside the environment's path."""
    return f"{env.rstrip('/')}-{key[:STAGING_KEY_CHARS]}"


def built_prefix(prefix: str | None, fact: Mapping[str, Any] | None) -> str | None:
    """The build a host's environment path points to, from python_env's fact (``env``,
    ``key``): units run it by that path, so a later build moving the link does not change what
    a running service imports, and each service moves to a new build only when serve restarts
    it. The path itself without a fact for that path (a plan made from the inventory alone)."""
    fact = fact or {}
    if not prefix or fact.get("env") != prefix or not fact.get("key"):
        return prefix
    return build_dir(prefix, str(fact["key"]))


def env_prefix(options: Mapping[str, Any]) -> str | None:
    """The directory the Python environment lives in for python_env_plan's ``options``
    (platform, manager, venv_path, conda_root, conda_env_path, stacks_file): venv_path
    (default /opt/acceldeploy/venv) for venv, conda_env_path or
    <conda_root>/envs/<the stack's env_name> for conda, None for container."""
    platform, manager = _platform_and_manager(options)
    if manager == "container":
        return None
    entry = _stack(platform, options) if manager == "conda" else {}
    return _prefix(manager, entry, options)


# --------------------------------------------------------------------------------------------
# Build steps


def _sourced(scripts: list[str], argv: list[str], ld_extra: str = "") -> list[str]:
    """argv run after sourcing the Ascend environment scripts (bash -c '...; exec "$@"')."""
    lines = ["set -e"] + [f"source {shlex.quote(s)}" for s in scripts]
    if ld_extra:
        lines.append(f'export LD_LIBRARY_PATH="${{LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}}{ld_extra}"')
    lines.append('exec "$@"')
    return ["bash", "-c", "; ".join(lines), "bash", *argv]


def _step(name: str, argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "argv": argv, "env": env or {}}


def _create_argv(manager: str, python: str, env: str, options: Mapping[str, Any]) -> list[str]:
    """The command that creates the empty venv or conda environment."""
    if manager == "venv":
        return [str(options.get("venv_python") or f"/usr/bin/python{python}"), "-m", "venv", env]
    channels = _as_list(options.get("conda_channels")) or ["conda-forge"]
    return [
        f"{_conda_root(options)}/bin/conda",
        "create",
        "--yes",
        "--quiet",
        "--prefix",
        env,
        "--override-channels",
        *(a for c in channels for a in ("-c", c)),
        f"python={python}",
        "pip",
    ]


@dataclass
class _Build:
    """What a venv / conda plan installs: the paths and sources the steps use, then the pins,
    the steps and the check that follow from the platform: its stack's wheel lock
    (``wheel_lock``), else vllm-ascend's pins built with the env scripts sourced."""

    env: str
    options: Mapping[str, Any]
    entry: dict[str, Any]
    extra: list[str]
    wheel_lock: bool
    env_scripts: list[str]
    source: list[str] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    expect: dict[str, str] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    verify_argv: list[str] = field(default_factory=list)
    # The pins built from their sdists on the host (sdist_pins), and the chip vllm-ascend's
    # kernels are compiled for when it is one of them.
    from_sdist: list[str] = field(default_factory=list)
    soc_version: str = ""

    @property
    def python(self) -> str:
        return f"{self.env}/bin/python"

    @property
    def requirements_path(self) -> str:
        return f"{self.env}/{REQUIREMENTS_NAME}"

    @property
    def constraints_path(self) -> str:
        return f"{self.env}/{CONSTRAINTS_NAME}"

    @property
    def built_dir(self) -> str:
        """The wheels built here from sdists: kept in the build, so they fan out with it."""
        return f"{self.env}/{BUILT_WHEELS_DIR}"

    @property
    def wheel_requirements(self) -> list[str]:
        """The pins installed from the sources' wheels: all but those built from sdists."""
        return [pin for pin in self.requirements if pin not in self.from_sdist]

    def expect_extra(self) -> None:
        for pin in self.extra:
            name, _, version = pin.partition("==")
            self.expect[normalize_name(name)] = version


def _cpu_pins(build: _Build) -> None:
    """The cpu stack: its complete lock (and the extras), each pin expected as written."""
    build.requirements = lock_requirements(build.entry) + build.extra
    for pin in build.requirements:
        name, _, version = pin.partition("==")
        build.expect[normalize_name(name)] = version


def _uv_source_args(pip_source: list[str]) -> list[str]:
    """pip's source options as uv spells them: uv has no --trusted-host, and with several
    indexes it takes each package from the first that has it unless told to choose as pip does
    (the best match across all of them)."""
    args = ["--allow-insecure-host" if a == "--trusted-host" else a for a in pip_source]
    if "--extra-index-url" in args:
        args += ["--index-strategy", "unsafe-best-match"]
    return args


def uv_install_argv(env: str, pip_source: list[str], requirements: str) -> list[str]:
    """The uv installed in ``env`` installing ``requirements`` (--no-deps) into env's Python,
    from pip's sources."""
    python = f"{env}/bin/python"
    uv = [f"{env}/bin/uv", *UV_INSTALL, "--python", python, *_uv_source_args(pip_source)]
    return [*uv, "-r", requirements]


def _cpu_install(build: _Build, manager: str) -> None:
    """The lock installed with --no-deps: by uv when the lock pins it and the environment is a
    venv (uv unpacks the wheels on every core; pip, one at a time, took 2.5 times as long for
    the lab's 4.2 GB), by pip otherwise."""
    pip = [build.python, *PIP, "install", *PIP_QUIET, "--no-deps", *build.source]
    uv = installer_pin(build.requirements)
    if build.from_sdist:
        build.steps.append(_sdist_build(build))
    if uv is None or manager != "venv":
        build.steps.append(
            _step(
                "install the pinned set (--no-deps: the lock is complete)",
                [*pip, "-r", build.requirements_path],
            )
        )
    else:
        build.steps.append(_step("install the lock's installer (uv)", [*pip, uv]))
        build.steps.append(
            _step(
                "install the pinned set with uv (--no-deps: the lock is complete)",
                uv_install_argv(build.env, build.source, build.requirements_path),
            )
        )
    if build.from_sdist:
        build.steps.append(_install_built(build))


def sdist_names(entry: Mapping[str, Any]) -> list[str]:
    """The packages the stack publishes as an sdist only (its ``sdist_only``): pip builds them
    on the host."""
    return [str(name) for name in entry.get("sdist_only") or []]


def sdist_pins(
    entry: Mapping[str, Any], options: Mapping[str, Any], requirements: list[str]
) -> list[str]:
    """The pins built from their sdists on one host of each class: the stack's sdist_only
    packages and python_env_build_from_sdist's, each one the stack (or its extras) pins."""
    pins = {normalize_name(pin.partition("==")[0]): pin for pin in requirements}
    chosen = [str(name) for name in options.get("build_from_sdist") or []]
    unknown = [name for name in chosen if normalize_name(name) not in pins]
    if unknown:
        raise AcceldeployError(
            f"python_env_build_from_sdist names {', '.join(unknown)}, which stack "
            f"{entry['name']} does not pin: name packages of its pins (`acceldeploy plan "
            "stacks`) or of python_env_extra_packages"
        )
    names = {normalize_name(name) for name in [*sdist_names(entry), *chosen]}
    return sorted(pins[name] for name in names if name in pins)


def soc_version(options: Mapping[str, Any], entry: Mapping[str, Any]) -> str:
    """SOC_VERSION, the chip vllm-ascend's kernels are compiled for: python_env_soc_version,
    else the one npu-smi names on the host (ascend_runtime's record: 910B1 -> ascend910b1);
    refused when neither says, or when they disagree."""
    chips = sorted({str(n).lower() for n in options.get("npu_names") or [] if n})
    found = [f"ascend{c}" for c in chips if c.startswith("910b")]
    given = str(options.get("soc_version") or "")
    build = f"stack {entry['name']} builds vllm-ascend {entry['vllm_ascend']} from its sdist"
    if not given and len(found) != 1:
        named = f"npu-smi names {', '.join(chips)}" if chips else "no NPU is recorded yet"
        raise AcceldeployError(
            f"python_env_soc_version is empty and {named}: {build}, whose kernels are compiled "
            "for one chip; set it (Atlas 800 A2 with 910B1: ascend910b1)"
        )
    soc = given or found[0]
    if soc not in SOC_VERSIONS:
        raise AcceldeployError(
            f"python_env_soc_version {soc!r} is not a chip vllm-ascend builds for; use one of "
            f"{', '.join(SOC_VERSIONS)}"
        )
    if given and found and given not in found:
        raise AcceldeployError(
            f"python_env_soc_version {given} but npu-smi on the host names {', '.join(chips)}: "
            f"{build} for the host's own chip; set it to {found[0]} or leave it empty"
        )
    return soc


def _kernel_checks(build: _Build) -> dict[str, Any]:
    """Before vllm-ascend's kernels are compiled: the CANN toolkit's environment and the
    compilers."""
    tools = " ".join(SOURCE_BUILD_TOOLS)
    check = (
        f'for t in {tools}; do command -v "$t" >/dev/null || '
        '{ echo "$t not found: vllm-ascend is built from its sdist here; install it" >&2; '
        "exit 1; }; done; "
        'test -n "${ASCEND_HOME_PATH:-}" || { echo "ASCEND_HOME_PATH is not set by the CANN '
        'environment scripts" >&2; exit 1; }'
    )
    return _step(
        "check the source build's inputs (the CANN toolkit, the compilers)",
        _sourced(build.env_scripts, ["bash", "-c", check]),
    )


def _sdist_build(build: _Build) -> dict[str, Any]:
    """The wheels of the pins published as (or chosen as) sdists, built here from the sources'
    sdists into the build's own directory; vllm-ascend's kernels for the host's chip, with the
    CANN environment sourced."""
    names = ",".join(pin.partition("==")[0] for pin in build.from_sdist)
    constraints = ["-c", build.constraints_path] if build.constraints else []
    verbose = ["-v"] if build.soc_version else []
    # --use-pep517: a project without pyproject.toml is built in pip's isolated environment
    # from the sources too (pip 23.0, Debian 12's, would run its setup.py with the venv's own
    # setuptools, which lacks bdist_wheel).
    argv = [build.python, *PIP, "wheel", *PIP_WHEEL_QUIET, *verbose, *constraints, "--use-pep517"]
    argv += ["--no-deps"]
    argv += ["--no-binary", names, "-w", build.built_dir, *build.source, *build.from_sdist]
    argv = _unless_built(build, argv)
    what = ", ".join(build.from_sdist)
    if not build.soc_version:
        return _step(f"build {what} from the sdist (a wheel, kept in the build)", argv)
    return _step(
        f"build {what} from the sdist, its kernels for SOC_VERSION={build.soc_version}",
        _sourced(build.env_scripts, argv, ASCEND_DEVLIB),
        {"SOC_VERSION": build.soc_version},
    )


def wheel_stem(pin: str) -> str:
    """The start of a wheel's file name for ``name==version`` (``vllm_ascend-0.23.0.post1``)."""
    name, _, version = pin.partition("==")
    return f"{normalize_name(name).replace('-', '_')}-{Version(version)}"


def built_store(options: Mapping[str, Any], key: str) -> str:
    """The controller's directory of the wheels a build made from sdists (one per build key):
    under python_env_built_store, else the wheel cache the hosts install from (an offline
    bundle's, when deploying from one), else the controller's cache."""
    cache = str(options.get("wheel_cache") or options.get("controller_cache") or "")
    root = str(options.get("built_store") or f"{cache.rstrip('/')}/built")
    return f"{root.rstrip('/')}/{key}"


def _unless_built(build: _Build, argv: list[str]) -> list[str]:
    """``argv`` run unless the build's directory already holds a wheel of every pin: the ones
    the controller kept from this build's earlier run, or the offline bundle carries."""
    held = " && ".join(f"ls {build.built_dir}/{wheel_stem(pin)}-*.whl" for pin in build.from_sdist)
    kept = "echo kept: the wheels this build made before, from the controller"
    return ["bash", "-c", f'{{ {held}; }} >/dev/null 2>&1 && {kept} || exec "$@"', "bash", *argv]


def _install_built(build: _Build) -> dict[str, Any]:
    """The wheels built from sdists installed from the build's own directory, nothing else."""
    argv = [build.python, *PIP, "install", *PIP_QUIET, "--no-deps", "--no-index"]
    argv += ["--find-links", build.built_dir, *build.from_sdist]
    return _step("install the wheels built from sdists", argv)


def _ascend_pins(build: _Build) -> None:
    entry = build.entry
    build.constraints = [f"torch=={entry['torch']}", f"torch-npu=={entry['torch_npu']}"]
    build.requirements = [
        f"vllm=={entry['vllm']}",
        f"vllm-ascend=={entry['vllm_ascend']}",
        *build.constraints,
        f"ray=={entry['ray']}",
        *build.extra,
    ]
    build.expect = {
        "torch": str(entry["torch"]),
        "torch-npu": str(entry["torch_npu"]),
        "vllm-ascend": str(entry["vllm_ascend"]),
        "vllm": str(entry["vllm"]),
        "ray": str(entry["ray"]),
    }
    build.expect_extra()


def _pip_install(build: _Build) -> list[str]:
    return [build.python, *PIP, "install", *PIP_QUIET, "-c", build.constraints_path, *build.source]


def _remove_triton(build: _Build) -> dict[str, Any]:
    return _step(
        "remove triton (vllm-ascend's Dockerfile: it does not work on Ascend)",
        [build.python, *PIP, "uninstall", "--yes", "--disable-pip-version-check", "triton"],
    )


def _built_links(build: _Build) -> list[str]:
    """pip's source for the wheels built here: pip takes a wheel before an sdist of a version."""
    return ["--find-links", build.built_dir] if build.from_sdist else []


def _ascend_wheel_steps(build: _Build) -> list[dict[str, Any]]:
    requirements = ["-r", build.requirements_path, *build.from_sdist]
    install = [*_pip_install(build), *_built_links(build), *requirements]
    built = [_sdist_build(build)] if build.from_sdist else []
    what = "the wheels built here and the pre-built" if built else "pre-built wheels"
    return [
        *built,
        _step(
            f"install vllm, vllm-ascend, torch, torch-npu ({what})",
            _sourced(build.env_scripts, install, ASCEND_DEVLIB),
        ),
        _remove_triton(build),
    ]


def _clone(ref: str, repo: str, dest: str) -> list[str]:
    return ["git", "clone", "--quiet", "--depth", "1", "--branch", ref, repo, dest]


def _ascend_source_steps(build: _Build) -> list[dict[str, Any]]:
    """vllm-ascend's Dockerfile: vllm without a device backend, then vllm-ascend built with
    the CANN environment."""
    entry, options, pip_install = build.entry, build.options, _pip_install(build)
    src = f"{build.env}/src"
    vllm_repo = str(options.get("vllm_repo") or entry["vllm_repo"])
    ascend_repo = str(options.get("vllm_ascend_repo") or entry["vllm_ascend_repo"])
    ascend = f"{src}/vllm-ascend"
    submodules = ["submodule", "update", "--init", "--recursive", "--depth", "1"]
    if build.from_sdist:
        pin = f"vllm-ascend=={entry['vllm_ascend']}"
        install = [*_pip_install(build), *_built_links(build), pin]
        vllm_ascend = [
            _sdist_build(build),
            _step(
                "install vllm-ascend (the wheel built here)",
                _sourced(build.env_scripts, install, ASCEND_DEVLIB),
            ),
        ]
    else:
        vllm_ascend = [
            _step(
                f"clone vllm-ascend {entry['vllm_ascend_ref']}",
                _clone(str(entry["vllm_ascend_ref"]), ascend_repo, ascend),
            ),
            _step("fetch vllm-ascend's submodules", ["git", "-C", ascend, *submodules]),
            _step(
                "build and install vllm-ascend with the CANN environment",
                _sourced(build.env_scripts, [*pip_install, "-v", "-e", ascend], ASCEND_DEVLIB),
            ),
        ]
    steps = [
        _step(
            f"clone vllm {entry['vllm_ref']}",
            _clone(str(entry["vllm_ref"]), vllm_repo, f"{src}/vllm"),
        ),
        _step(
            "install vllm without a device backend (VLLM_TARGET_DEVICE=empty)",
            [*pip_install, "-v", "-e", f"{src}/vllm"],
            {"VLLM_TARGET_DEVICE": "empty"},
        ),
        _remove_triton(build),
        *vllm_ascend,
    ]
    if build.extra:
        steps.append(_step("install the extra packages", [*pip_install, *build.extra]))
    return steps


def _install_from(options: Mapping[str, Any]) -> str:
    install_from = str(options.get("install_from") or "source")
    if install_from not in ("source", "wheels"):
        raise AcceldeployError(
            f"python_env_install_from {install_from!r} is unknown; use source or wheels"
        )
    return install_from


def _ascend_install(build: _Build) -> None:
    """The ascend stack: vllm, vllm-ascend, torch, torch-npu from source or wheels; a
    vllm-ascend published as an sdist only is built from it, its inputs checked first."""
    if build.soc_version:
        build.steps.insert(0, _kernel_checks(build))
    if _install_from(build.options) == "wheels":
        build.steps += _ascend_wheel_steps(build)
    else:
        build.steps += _ascend_source_steps(build)
    build.verify_argv = _sourced(build.env_scripts, build.verify_argv)


# --------------------------------------------------------------------------------------------
# The plan


def redact(text: str) -> str:
    """user:password@ in URLs (internal mirrors) replaced by ***@ for what is shown or recorded."""
    return CREDENTIALS.sub("***@", text)


def _command_line(step: dict[str, Any]) -> str:
    env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted((step.get("env") or {}).items()))
    line = shlex.join(str(a) for a in step["argv"])
    return redact(f"{env} {line}" if env else line)


def _finished(steps: list[dict[str, Any]], options: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every step with TMPDIR set and its (redacted) command line."""
    # pip unpacks every wheel under TMPDIR before installing: /tmp is often a small tmpfs.
    tmp = str(options.get("tmp_dir") or "/var/tmp")
    steps = [{**s, "env": {"TMPDIR": tmp, **s["env"]}} for s in steps]
    return [{**s, "command": _command_line(s)} for s in steps]


def _key(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _plan(
    platform: str, manager: str, env: str, build: _Build, identity: dict[str, Any]
) -> dict[str, Any]:
    """The plan python_env_plan returns for a venv or conda environment: ``env`` is the stable
    path (a symlink), ``build`` the steps that build the keyed directory it will point to."""
    entry, py = build.entry, f"{env}/bin/python"
    key = _key(identity)
    flavour = f"lock {entry['lock']}" if build.wheel_lock else f"vllm-ascend {entry['vllm_ascend']}"
    steps = _finished(build.steps, build.options)
    env_scripts = build.env_scripts
    return {
        "platform": platform,
        "manager": manager,
        "stack": {k: v for k, v in entry.items() if k != "file"},
        "stack_name": str(entry["name"]),
        "env": env,
        "prefix": env,
        "python": py,
        # Where the steps build, install and check; env is moved onto it afterwards.
        "staging": build.env,
        "staging_python": build.python,
        # Siblings of the staging directory, for the role to find and prune old builds.
        "staging_pattern": f"{env.rstrip('/').rsplit('/', 1)[-1]}-{'?' * STAGING_KEY_CHARS}",
        "python_version": identity["python"],
        # What preflight checks python_env_venv_python against
        # (tools/acceldeploy/inventory/targets.py), before any install.
        "requires_python": str(entry.get("requires_python") or f"=={identity['python']}.*"),
        "requires_python_why": str(entry.get("requires_python_why") or ""),
        "install_from": identity["install_from"],
        # The glibc the stack's wheels are built for, when it is installed from them.
        "requires_glibc": str(entry.get("wheel_glibc") or "")
        if identity["install_from"] in ("lock", "wheels")
        else "",
        "creator": str(build.steps[0]["argv"][0]) if manager == "venv" else "",
        "key": key,
        "record_path": f"{build.env}/{RECORD_NAME}",
        "requirements_path": build.requirements_path,
        # What the install step takes from the sources' wheels (not the pins built here).
        "requirements_text": "\n".join(build.wheel_requirements) + "\n",
        "from_sdist": build.from_sdist,
        # The wheels built from sdists: in the build, and kept on the controller by key.
        "built_dir": build.built_dir,
        "built_store": built_store(build.options, key) if build.from_sdist else "",
        "constraints_path": build.constraints_path,
        "constraints_text": "\n".join(build.constraints) + "\n" if build.constraints else "",
        "steps": steps,
        "commands": [s["command"] for s in steps],
        "expect": build.expect,
        "vllm_version": str(entry["vllm"]),
        "verify_argv": build.verify_argv,
        "env_scripts": env_scripts,
        "summary": f"{manager} {env} for {platform}: vLLM {entry['vllm']} ({flavour}), "
        f"key {key[:12]}",
        "record": {"key": key, **identity, "commands": [s["command"] for s in steps]},
        "fact": {
            "platform": platform,
            "manager": manager,
            "env": env,
            "python": py,
            "key": key,
            "vllm": str(entry["vllm"]),
            "env_scripts": env_scripts,
        },
    }


def python_env_plan(options: dict[str, Any]) -> dict[str, Any]:
    """The environment a host gets: where it lives, the exact commands that build it, what it
    must contain afterwards, and the key (pins + way of building) that decides a rebuild.

    Sources (index, mirror, find-links) are not part of the key: moving the mirror does not
    rebuild anything."""
    platform, manager = _platform_and_manager(options)
    entry = _stack(platform, options)
    _check_sources(options)
    extra = _extra_packages(options)
    _check_venv_python(options, entry, platform, manager)
    if manager == "container":
        if options.get("build_from_sdist"):
            raise AcceldeployError(
                "python_env_build_from_sdist is set but python_env_manager is container: the "
                "image holds the environment; empty it, or use conda or venv"
            )
        return _container_plan(platform, entry, options)

    python = str(entry["python"])
    env = _prefix(manager, entry, options)
    lock = for_name(platform).wheel_lock
    scripts = options.get("env_scripts") or entry.get("env_scripts") or []
    env_scripts = [] if lock else [str(s) for s in scripts]

    # The pins and the key first: the key names the staging directory the steps build in.
    build = _Build("", options, entry, extra, lock, env_scripts, source=_pip_source_args(options))
    if lock:
        _cpu_pins(build)
    else:
        _ascend_pins(build)
    build.from_sdist = sdist_pins(entry, options, build.requirements)
    if any(pin.startswith(f"{ASCEND_KERNELS}==") for pin in build.from_sdist):
        build.soc_version = soc_version(options, entry)
    create = _create_argv(manager, python, "", options)
    identity = {
        "format": PLAN_FORMAT,
        "platform": platform,
        "manager": manager,
        "python": python,
        # The interpreter a venv is made from decides its ABI (cp311, cp313).
        "creator": create[0] if manager == "venv" else f"python={python}",
        "env": env,
        "requirements": build.requirements,
        "constraints": build.constraints,
        "install_from": "lock" if lock else _install_from(options),
    }
    fixes = defects.workarounds(entry)
    if fixes:  # a stack without any keeps the key it had
        identity["workarounds"] = fixes
    if build.from_sdist:  # a build of its own (the key of a stack without any stays)
        identity["from_sdist"] = build.from_sdist
    if build.soc_version:  # kernels built for one chip: another chip is another build
        identity["soc_version"] = build.soc_version
    build.env = build_dir(env, _key(identity))
    build.steps.append(
        _step(f"create the {manager}", _create_argv(manager, python, build.env, options))
    )
    # What `vllm --version` prints (the CLI reads the "vllm" distribution's metadata), after
    # importing vllm: a misnamed or broken install fails here, not at the first `vllm serve`.
    # The CLI itself imports every subcommand (~10-30 s), too slow for every run.
    build.verify_argv = [build.python, "-c", VLLM_VERSION_CHECK]
    if lock:
        _cpu_install(build, manager)
    else:
        _ascend_install(build)
    if "amx_tile_permission" in fixes:
        build.steps.append(
            _step(
                "let every Python of the environment use AMX tiles (known defect)",
                [build.python, "-c", WRITE_PTH, AMX_PTH_NAME, AMX_PTH_LINE],
            )
        )
    build.steps.append(
        _step("byte-compile on every core", [build.python, "-c", COMPILE_ALL, build.env])
    )
    return _plan(platform, manager, env, build, identity)


def _container_plan(
    platform: str, entry: dict[str, Any], options: dict[str, Any]
) -> dict[str, Any]:
    image = str(options.get("image") or entry["image"])
    run = ["docker", "run", "--rm", *[str(a) for a in entry["docker_run_args"]]]
    check = [
        "docker",
        "run",
        "--rm",
        "--entrypoint",
        "python3",
        image,
        "-c",
        "import importlib.metadata as m; print(m.version('vllm'))",
    ]
    key = _key({"format": PLAN_FORMAT, "image": image, "run": run})
    loader = for_name(platform).runtime_role or "the runtime role"
    missing = (
        f"image {image} is not on this host: run playbooks/runtime.yml ({loader} loads it "
        f"from {loader}_image_tarball or {loader}_image_registry)"
    )
    return {
        "platform": platform,
        "manager": "container",
        "stack": {k: v for k, v in entry.items() if k != "file"},
        "stack_name": str(entry["name"]),
        "env": "",
        "prefix": None,
        "python": "",
        "key": key,
        "image": image,
        "run_argv": [*run, image],
        "run_command": shlex.join([*run, image]),
        "summary": f"container {image} for {platform}: stack {entry['name']}, vLLM {entry['vllm']}",
        "image_missing": missing,
        "verify_argv": check,
        "verify_command": shlex.join(check),
        "steps": [],
        "commands": [],
        "expect": {},
        "vllm_version": "",
        "env_scripts": [],
        "fact": {
            "platform": platform,
            "manager": "container",
            "image": image,
            "run_argv": [*run, image],
            "key": key,
        },
    }


# --------------------------------------------------------------------------------------------
# After the build


def python_env_verify(
    plan: dict[str, Any], pip_list: str, vllm_version_output: str = ""
) -> dict[str, Any]:
    """Checks ``pip list --format=json`` against the plan's pins (and vLLM's reported version);
    raises naming every missing or different package."""
    try:
        installed = {
            normalize_name(str(d["name"])): str(d["version"]) for d in json.loads(pip_list or "[]")
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise AcceldeployError(f"cannot read pip list --format=json output: {exc}") from None
    problems = []
    for name, version in sorted(plan.get("expect", {}).items()):
        have = installed.get(name)
        # vllm built from source carries a local label (0.12.0+empty): PEP 440 '==' ignores it.
        if have is None:
            problems.append(f"{name} is not installed (want {version})")
        elif have != version and have.split("+", 1)[0] != version:
            problems.append(f"{name} is {have}, want {version}")
    reported = (
        vllm_version_output.strip().splitlines()[-1].strip() if vllm_version_output.strip() else ""
    )
    want = str(plan.get("vllm_version") or "")
    if vllm_version_output and want and reported.split("+", 1)[0] != want:
        problems.append(f"the installed vllm reports {reported!r}, want {want}")
    if problems:
        raise AcceldeployError(
            f"the environment {plan.get('env')} does not hold the pinned stack: "
            + "; ".join(problems)
            + " (rerun with -e python_env_force_rebuild=true to recreate it)"
        )
    return {"packages": len(installed), "vllm": reported, "ok": True, "installed": installed}


def last_line(output: str) -> str:
    lines = [ln.strip() for ln in (output or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def python_env_fact(plan: dict[str, Any], vllm_output: str = "") -> dict[str, Any]:
    """The local fact the launcher reads: the plan's fact plus the vLLM version reported."""
    return {**plan.get("fact", {}), "vllm_reported": last_line(vllm_output)}


def python_env_state_spec(plan: dict[str, Any], fact_file: str) -> dict[str, list[str]]:
    """What the no-op path compares with the last converge (acceldeploy.host.state.drift): the
    path's symlink, the build's record, pip's inputs, the local fact, the interpreter, and every
    installed distribution's RECORD (what ``pip list`` and an install or uninstall change).
    Empty for a container: the image is checked every run."""
    if plan.get("manager") not in ("venv", "conda"):
        return {"files": []}
    staging = str(plan["staging"])
    files = [
        plan["env"],
        plan["staging_python"],
        plan["record_path"],
        plan["requirements_path"],
        fact_file,
        f"{staging}/lib/python*/site-packages/*.dist-info/RECORD",
    ]
    if plan.get("constraints_text"):
        files.append(plan["constraints_path"])
    if plan["manager"] == "conda":
        files.append(f"{staging}/conda-meta/*.json")
    return {"files": [str(f) for f in files]}


def record_key(record_text: str) -> str:
    """The key stored in an environment's record ('' when absent or unreadable)."""
    try:
        return str(json.loads(record_text or "{}").get("key") or "")
    except ValueError:
        return ""

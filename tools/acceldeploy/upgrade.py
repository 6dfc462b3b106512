"""The upgrade advisor: what moving hosts to another stack (versions/stacks.yml) would change or
break, before anything changes. On the controller, from the inventory alone. Per host and
service:

- option: an ``extra_args`` key, or a flag the project renders, that the target's recorded
  ``vllm serve`` parser rejects (the deploy would refuse it: blocking);
- env: a variable the service starts with that the current engine reads and the target's does
  not (its ``envs.py``, and its plugin's where recorded: data/engine-facts/);
- metric: a series the bench, the monitor, ``top`` and ``report`` read (the stack's metric
  names) that the target's recorded ``/metrics`` lacks, or that it names differently;
- version: the Python, torch, driver, CANN or Gaudi software the hosts move to;
- runtime: what the host's runtime needs for the move: a CANN change blocks unless the
  ascend_runtime role installs the target's CANN (then its install steps, in order);
- defect: the known defects (versions/stacks.yml) the move fixes, and the ones it brings;
- kv: the planner's KV figures under each stack.

What could not be checked (an engine nobody recorded) is said as such, never passed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from acceldeploy.errors import AcceldeployError
from acceldeploy.inventory import bounds, groups, roledefaults
from acceldeploy.planner import defects, enginefacts, stacks
from acceldeploy.planner.engineopts import EngineOptions, platform_engine
from acceldeploy.planner.platforms import get_platform, runs_in_image
from acceldeploy.platforms import versions
from acceldeploy.platforms.ascend import runtime as ascend
from acceldeploy.runtimes import python_env, stacklock
from acceldeploy.serving.hostplan import host_launches
from acceldeploy.serving.service import parse_services
from acceldeploy.serving.values import Launch

# Stack keys whose change is a move on the host, with how the advice names them.
MOVES = (
    ("vllm", "vLLM"),
    ("python", "Python"),
    ("requires_python", "Python range"),
    ("torch", "torch"),
    ("torch_npu", "torch-npu"),
    ("cann", "CANN"),
    ("cann_compatible_drivers", "driver families CANN accepts"),
    ("software", "Intel Gaudi software"),
    ("image", "container image"),
)
KV_FIGURES = ("kv_cache_tokens", "max_concurrency", "num_blocks")


@dataclass(frozen=True)
class Finding:
    host: str
    service: str
    kind: str  # option, env, metric, version, kv, unchecked, checked
    what: str
    detail: str
    blocking: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def target_stack(name: str, platform: str) -> dict[str, Any]:
    every = stacks.load_stacks()
    if name not in every:
        raise AcceldeployError(
            f"--to {name}: no such stack; use one of {', '.join(sorted(every))} "
            "(`acceldeploy plan stacks`)"
        )
    entry = every[name]
    if not stacks.runs_on(entry, platform):
        raise AcceldeployError(
            f"--to {name} is a {entry['platform']} stack and these hosts are {platform}; use one "
            f"of {', '.join(stacks.platform_stacks(platform, every))}"
        )
    return entry


def version_moves(
    host: str, current: Mapping[str, Any], target: Mapping[str, Any], in_image: bool = True
) -> list[Finding]:
    """What the move changes of the stack's parts; the image only where the host runs it."""
    moves = []
    for key, label in MOVES:
        if key == "image" and not in_image:
            continue
        before, after = current.get(key), target.get(key)
        if after is not None and before != after:
            moves.append(Finding(host, "", "version", label, f"{_text(before)} -> {_text(after)}"))
    return moves


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none recorded"
    return str(value)


def cann_findings(
    host: str,
    hostvars: Mapping[str, Any],
    current: Mapping[str, Any],
    target: Mapping[str, Any],
    in_image: bool,
) -> list[Finding]:
    """A move to another CANN: blocking unless the role will install it, naming the variables;
    else the steps the role will run, in order."""
    if not target.get("cann") or current.get("cann") == target.get("cann"):
        return []
    move = f"CANN {current.get('cann')} -> {target['cann']}"
    if in_image:
        drivers = ", ".join(target.get("cann_compatible_drivers") or []) or "not recorded"
        detail = (
            f"{move} comes with the image {target['image']}: give it as "
            "ascend_runtime_image_tarball (or _image_registry); the host's CANN is left alone, "
            f"its driver must be one CANN {target['cann']} supports ({drivers})"
        )
        return [Finding(host, "", "runtime", "CANN", detail)]
    role = {
        name: roledefaults.value(hostvars, f"ascend_runtime_{name}")
        for name in ("cann_install", "home", "cann_download_dir", "cann_install_args")
    }
    inputs = {
        "cann_install": bounds.flag(role["cann_install"], "ascend_runtime_cann_install"),
        "cann_packages": {
            kind: roledefaults.value(hostvars, f"ascend_runtime_cann_{kind}_package")
            for kind in ascend.CANN_KINDS
        },
        "ascend_home": role["home"],
        "cann_download_dir": role["cann_download_dir"],
        "cann_install_args": role["cann_install_args"],
    }
    blocks, steps = ascend.cann_move(inputs, target)
    if blocks:
        return [Finding(host, "", "runtime", "CANN", f"{move}: {'; '.join(blocks)}", True)]
    listed = "; ".join(f"{i}. {step}" for i, step in enumerate(steps, 1))
    detail = f"{move}: the ascend_runtime role installs it (toolkit, kernels, nnal): {listed}"
    return [Finding(host, "", "runtime", "CANN", detail)]


# (host, its variables, a read-only sh script) -> the script's stdout; raises to say why not
HostReader = Callable[[str, Mapping[str, Any], str], str]


def installed_findings(
    host: str,
    hostvars: Mapping[str, Any],
    target: Mapping[str, Any],
    in_image: bool,
    read: HostReader,
) -> tuple[list[Finding], str]:
    """What the host holds (driver, firmware, CANN; hl-smi on Gaudi), read-only by the first
    contact's probe, judged against the target stack by the runtime check's own checks: one
    finding of what was read, a blocking one per refusal. Also the CANN found ('' if none)."""
    inputs = stacklock.inventory_inputs(hostvars, str(target["platform"]), target, in_image)
    if not inputs:
        return [], ""
    try:
        stdout = read(host, hostvars, stacklock.probe_script(inputs))
    except AcceldeployError as exc:
        return [Finding(host, "", "installed", "read", f"not read: {exc}", True)], ""
    seen = stacklock.read_for_move(stdout, inputs)
    detected = seen["detected"]
    read_text = ", ".join(f"{k} {v}" for k, v in detected.items() if v) or "nothing recorded"
    found = [Finding(host, "", "installed", "read from the host", read_text)]
    found += [Finding(host, "", "installed", "runtime check", e, True) for e in seen["errors"]]
    found += [Finding(host, "", "installed", "runtime check", w) for w in seen["warnings"]]
    return found, str(detected.get("cann") or "")


def source_build_findings(
    host: str, hostvars: Mapping[str, Any], target: Mapping[str, Any]
) -> list[Finding]:
    """A target whose vllm-ascend is an sdist only: built on one host of each class, for the
    chip python_env_soc_version names (else the one ascend_runtime recorded)."""
    if python_env.ASCEND_KERNELS not in python_env.sdist_names(target):
        return []
    given = str(hostvars.get("python_env_soc_version") or "")
    chip = f"SOC_VERSION={given}" if given else (
        "the chip ascend_runtime recorded (set python_env_soc_version on a host it has not read)"
    )  # fmt: skip
    tools = ", ".join(python_env.SOURCE_BUILD_TOOLS)
    detail = (
        f"vllm-ascend {target['vllm_ascend']} is published as an sdist only: python_env builds "
        f"it on one host of each host class ({tools} and the CANN toolkit there, checked "
        f"first; {chip}) and copies the environment to the others"
    )
    return [Finding(host, "", "runtime", "source build", detail)]


def defect_findings(
    host: str, current: Mapping[str, Any], target: Mapping[str, Any]
) -> list[Finding]:
    """The known defects (by id) the move leaves behind, and the ones it brings."""
    before = {d.id: d for d in defects.known_defects(current)}
    after = {d.id: d for d in defects.known_defects(target)}
    found = [
        Finding(host, "", "defect", i, f"fixed by the move: {d.what} ({d.component}; {d.source})")
        for i, d in before.items() if i not in after
    ]  # fmt: skip
    for i, d in after.items():
        if i not in before:
            fix = " ".join(filter(None, [d.fix, d.applied()]))
            found.append(Finding(host, "", "defect", i, f"brought by the move: {d.what} Fix: "
                                 f"{fix} ({d.component}; {d.source})"))  # fmt: skip
    return found


def option_findings(
    host: str, service: Any, launch: Launch | None, options: EngineOptions
) -> list[Finding]:
    """extra_args the target refuses (each with the parser's own message), and the flags the
    project renders that the target's parser lacks."""
    found = []
    for key, value in service.extra_args.items():
        try:
            options.check({key: value}, f"{service.where}.extra_args")
        except AcceldeployError as exc:
            found.append(Finding(host, service.name, "option", str(key), str(exc), True))
    if launch is not None:
        rendered = [a for a in launch.argv if a.startswith("--")]
        for flag in rendered:
            if flag not in options.options and flag.lstrip("-") not in service.extra_args:
                detail = f"rendered by acceldeploy; not an option of vLLM {options.version}"
                found.append(Finding(host, service.name, "option", flag, detail, True))
    return found


def env_findings(
    host: str,
    service: str,
    env: Iterable[str],
    before: enginefacts.EngineFacts | None,
    after: enginefacts.EngineFacts | None,
) -> list[Finding]:
    """Variables the current engine (or its recorded plugin) reads and the target does not."""
    if after is None:
        return [Finding(host, service, "unchecked", "env", "the target's envs.py is not recorded")]
    if before is None:
        return [Finding(host, service, "unchecked", "env", "the current engine is not recorded")]
    found = []
    for name in sorted(env):
        if name in before.env and name not in after.env:
            if after.plugin_env is not None and name in after.plugin_env:
                continue
            detail = (
                f"vLLM {before.version} reads it, vLLM {after.version} does not "
                f"({after.env_source})"
            )
            found.append(Finding(host, service, "env", name, detail))
        elif (
            before.plugin_env
            and name in before.plugin_env
            and after.plugin_env is not None
            and name not in after.plugin_env
            and name not in after.env
        ):
            detail = f"the plugin of vLLM {before.version} reads it, the target's does not"
            found.append(Finding(host, service, "env", name, detail))
    return found


def metric_findings(
    host: str,
    current: Mapping[str, Any],
    target: Mapping[str, Any],
    after: enginefacts.EngineFacts | None,
) -> list[Finding]:
    """The series the project reads on the target: missing from its recorded /metrics, or
    named otherwise than on the current stack (the monitor selects each target's by stack)."""
    names_before, names_after = stacks.metric_names(current), stacks.metric_names(target)
    found = []
    for role, series in names_after.items():
        if names_before[role] != series:
            detail = f"{names_before[role]} -> {series} (rules and dashboards follow each stack)"
            found.append(Finding(host, "", "metric", role, detail))
    if after is None or after.metrics is None:
        version = target.get("vllm")
        detail = (
            f"no recorded /metrics of vLLM {version}: the series the project reads are unchecked"
        )
        return [*found, Finding(host, "", "unchecked", "metrics", detail)]
    for role, series in names_after.items():
        if series not in after.metrics:
            detail = f"{series} is not among vLLM {after.version}'s series ({after.metrics_source})"
            found.append(Finding(host, "", "metric", role, detail, True))
    return found


def kv_findings(host: str, before: list[Launch], after: list[Launch]) -> list[Finding]:
    targets = {launch.name: launch for launch in after}
    found = []
    for launch in before:
        moved = targets.get(launch.name)
        if moved is None:
            continue
        changes = [
            f"{key} {launch.kv.get(key)} -> {moved.kv.get(key)}"
            for key in KV_FIGURES
            if launch.kv.get(key) != moved.kv.get(key)
        ]
        detail = "; ".join(changes) or f"unchanged ({launch.kv.get('kv_cache_tokens')} tokens)"
        found.append(Finding(host, launch.name, "kv", "planner", detail))
    return found


def advise_host(
    host: str, hostvars: Mapping[str, Any], to: str, read: HostReader | None = None
) -> list[Finding]:
    platform_name = str(hostvars.get("acceldeploy_platform") or "")
    current = stacks.host_stack(platform_name, str(hostvars.get("acceldeploy_stack") or ""))
    target = target_stack(to, platform_name)
    if current["name"] == target["name"]:
        return [Finding(host, "", "version", "stack", f"already on {to}")]
    manager = str(roledefaults.value(hostvars, "python_env_manager") or "")
    in_image = runs_in_image(platform_name, manager, target)
    found = version_moves(host, current, target, in_image)
    installed, cann = (
        installed_findings(host, hostvars, target, in_image, read) if read else ([], "")
    )
    if cann and target.get("cann") and versions.same_version(cann, str(target["cann"])):
        found.append(Finding(host, "", "runtime", "CANN", f"CANN {cann} is on the host already"))
    else:
        found += cann_findings(host, hostvars, current, target, in_image)
    found += installed
    found += source_build_findings(host, hostvars, target)
    found += defect_findings(host, current, target)
    before_launches = host_launches(hostvars)
    moved = {**hostvars, "acceldeploy_stack": to}
    try:
        after_launches: list[Launch] | None = host_launches(moved)
    except AcceldeployError:
        after_launches = None  # the option findings say why
    platform = get_platform(platform_name, None, to)
    options = platform_engine(platform)
    services = parse_services(hostvars.get("acceldeploy_services") or [], platform_name)
    by_name = {launch.name: launch for launch in after_launches or []}
    before_facts = enginefacts.engine_facts(str(current["vllm"]))
    after_facts = enginefacts.engine_facts(str(target["vllm"]))
    for service in services:
        found += option_findings(host, service, by_name.get(service.name), options)
    for launch in before_launches:
        found += env_findings(host, launch.name, launch.env, before_facts, after_facts)
    found += metric_findings(host, current, target, after_facts)
    if after_launches is not None:
        found += kv_findings(host, before_launches, after_launches)
    args = sum(len(s.extra_args) for s in services)
    env = len({name for launch in before_launches for name in launch.env})
    series = len(stacks.metric_names(target))
    against = "its /metrics" if after_facts and after_facts.metrics else "nothing (none recorded)"
    checked = (
        f"{args} extra_args and each rendered flag against vLLM {target['vllm']}'s parser; "
        f"{env} env variables against its envs.py; {series} series against {against}"
    )
    return [*found, Finding(host, "", "checked", "what was compared", checked)]


def advise(
    every: Mapping[str, Mapping[str, Any]], to: str, read: HostReader | None = None
) -> list[Finding]:
    """The findings of every serving host of ``every`` (outside the gateways and monitors);
    with ``read``, what each host holds too (nothing is read without it)."""
    serving = {h: v for h, v in every.items() if groups.serves(v)}
    if not serving:
        raise AcceldeployError("--limit selects no serving host (all are gateways or monitors)")
    return [f for host, hostvars in serving.items() for f in advise_host(host, hostvars, to, read)]

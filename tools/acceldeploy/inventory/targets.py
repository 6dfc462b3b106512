"""The operating systems acceldeploy deploys to (data/targets.yml) and preflight's first contact
with each host: one read-only shell probe (``probe_script``, run with Ansible's ``raw`` so it
needs no Python on the host) gives the release, systemd's version, the architecture, glibc and
the version of every interpreter a stage will use, and reads the files and runs the read-only
commands a caller names (the runtime's version files and tools, for the stack lock in
acceldeploy.runtimes.stacklock) into the shape the runtime roles' probe module returns;
``check`` refuses an unsupported target naming the variable and the fix, and returns what
later stages need (the fetch wheel set).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from acceldeploy.data_files import load
from acceldeploy.errors import AcceldeployError

MARK = "== "
PYTHON_VERSION = "import sys; print('%d.%d.%d' % sys.version_info[:3])"
# The first body line of a file or command section: "@ <path>[ rc=<n>]" found, "@- <path>" not.
FOUND, ABSENT = "@ ", "@- "
# Where a command is looked up after PATH, and how long it may take: as the runtime roles'
# probe module (plugins/modules/acceldeploy_probe.py) does.
SEARCH_DIRS = ("/usr/local/bin", "/usr/local/sbin", "/usr/sbin", "/sbin")
COMMAND_TIMEOUT = 60
GLOB = re.compile(r"(\*|\?|\[[^\]/]+\])")


def table() -> dict[str, Any]:
    return load("targets")


def glob_word(pattern: str) -> str:
    """A path pattern as one sh word: its glob characters (``*``, ``?``, ``[...]``) stay
    active, everything else is quoted."""
    parts = GLOB.split(pattern)
    return "".join(p if i % 2 else shlex.quote(p) for i, p in enumerate(parts) if p)


def file_lines(name: str, patterns: Sequence[str]) -> str:
    """sh reading the first existing file that matches one of ``patterns`` (in order, each
    glob's matches sorted), as the probe module's ``files`` do."""
    words = " ".join(glob_word(p) for p in patterns)
    first = shlex.quote(f"{ABSENT}{patterns[0] if patterns else ''}")
    return (
        f"echo '{MARK}file {name}'; found=; "
        f'for f in {words}; do if [ -f "$f" ]; then found=$f; break; fi; done; '
        f'if [ -n "$found" ]; then printf \'{FOUND}%s\\n\' "$found"; cat "$found"; echo; '
        f"else printf '%s\\n' {first}; fi"
    )


def command_lines(name: str, argv: Sequence[str]) -> str:
    """sh running one read-only command (looked up on PATH, then in SEARCH_DIRS, as the probe
    module does; at most COMMAND_TIMEOUT seconds where ``timeout`` exists), its output after
    ``@ <path> rc=<n>``; ``@- <name>`` when the binary is not there."""
    binary = shlex.quote(str(argv[0]))
    args = " ".join(shlex.quote(str(a)) for a in argv[1:])
    search = " ".join(f"{d}/{binary}" for d in SEARCH_DIRS)
    lookup = (
        f"b=; if [ -x {binary} ]; then b={binary}; fi"
        if "/" in str(argv[0])
        else f"b=$(command -v {binary} 2>/dev/null); "
        f'case "$b" in /*) ;; *) b=; for c in {search}; do '
        f'if [ -x "$c" ]; then b=$c; break; fi; done;; esac'
    )
    run = (
        f"t=; command -v timeout >/dev/null 2>&1 && t='timeout {COMMAND_TIMEOUT}'; "
        f'out=$($t "$b" {args} 2>&1); rc=$?; '
        f'printf \'{FOUND}%s rc=%s\\n\' "$b" "$rc"; printf \'%s\\n\' "$out"'
    )
    absent = shlex.quote(f"{ABSENT}{argv[0]}")
    return (
        f"echo '{MARK}command {name}'; {lookup}; "
        f"if [ -n \"$b\" ]; then {run}; else printf '%s\\n' {absent}; fi"
    )


def probe_script(
    pythons: Mapping[str, str],
    files: Mapping[str, Sequence[str]] | None = None,
    commands: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """POSIX sh printing one ``== name`` section per fact; ``pythons`` is label -> command,
    ``files`` name -> path patterns (the first existing match is read), ``commands`` name ->
    argv of a read-only command."""
    lines = [
        f"echo '{MARK}os-release'; cat /etc/os-release 2>/dev/null",
        f"echo '{MARK}systemd'; systemctl --version 2>/dev/null | head -n 1",
        f"echo '{MARK}arch'; uname -m",
        f"echo '{MARK}glibc'; getconf GNU_LIBC_VERSION 2>/dev/null",
    ]
    for label, command in pythons.items():
        exe = shlex.quote(command)
        lines.append(
            f"echo '{MARK}python {label}'; "
            f"if command -v {exe} >/dev/null 2>&1; "
            f"then {exe} -c {shlex.quote(PYTHON_VERSION)} 2>&1; else echo 'not found'; fi"
        )
    lines += [file_lines(name, list(patterns)) for name, patterns in (files or {}).items()]
    lines += [command_lines(name, list(argv)) for name, argv in (commands or {}).items()]
    return "\n".join(lines) + "\n"


def _sections(stdout: str) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line.startswith(MARK):
            current = found.setdefault(line[len(MARK) :].strip(), [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(body).strip() for name, body in found.items()}


def _os_release(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip("\"'")
    return values


def _status(text: str) -> tuple[str | None, str, str]:
    """A file or command section -> (its path when found, else None; rc; the text after)."""
    first, _, rest = text.partition("\n")
    if first.startswith(FOUND):
        path, _, rc = first[len(FOUND) :].partition(" rc=")
        return path.strip(), rc.strip(), rest
    return None, "", first[len(ABSENT) :].strip() if first.startswith(ABSENT) else ""


def _probed_files(sections: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``== file <name>`` sections as the probe module's ``files``: {path, exists, content}."""
    found: dict[str, dict[str, Any]] = {}
    for name, text in sections.items():
        if name.startswith("file "):
            path, _, rest = _status(text)
            where = path if path is not None else rest
            content = rest + "\n" if path is not None else None
            found[name[5:]] = {"path": where, "exists": path is not None, "content": content}
    return found


def _probed_commands(sections: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``== command <name>`` sections as the probe module's ``commands`` (stderr is in stdout:
    the probe runs the command with 2>&1)."""
    found: dict[str, dict[str, Any]] = {}
    for name, text in sections.items():
        if name.startswith("command "):
            path, rc, rest = _status(text)
            found[name[8:]] = {
                "found": path is not None,
                "path": path or "",
                "rc": int(rc) if rc.isdigit() else None,
                "stdout": rest + "\n" if path is not None else "",
                "stderr": "",
            }
    return found


def _python_version(text: str) -> str | None:
    match = re.fullmatch(r"(\d+)\.(\d+)\.\d+", text.strip())
    return f"{match[1]}.{match[2]}" if match else None


@dataclass(frozen=True)
class Facts:
    """What the probe read on one host."""

    os_id: str
    version_id: str
    pretty_name: str
    systemd: int | None
    arch: str
    glibc_minor: int | None
    pythons: dict[str, str | None] = field(default_factory=dict)
    # What the probe read for a caller, in the runtime probe module's shape (not in to_dict).
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    commands: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def parse(cls, stdout: str) -> Facts:
        sections = _sections(stdout)
        release = _os_release(sections.get("os-release", ""))
        systemd = re.match(r"systemd (\d+)", sections.get("systemd", ""))
        glibc = re.search(r"glibc 2\.(\d+)", sections.get("glibc", ""))
        return cls(
            os_id=release.get("ID", ""),
            version_id=release.get("VERSION_ID", ""),
            pretty_name=release.get("PRETTY_NAME") or release.get("NAME") or "an unknown OS",
            systemd=int(systemd[1]) if systemd else None,
            arch=sections.get("arch", "").strip(),
            glibc_minor=int(glibc[1]) if glibc else None,
            pythons={
                name.removeprefix("python "): _python_version(text)
                for name, text in sections.items()
                if name.startswith("python ")
            },
            files=_probed_files(sections),
            commands=_probed_commands(sections),
        )

    def probe(self) -> dict[str, Any]:
        """What the runtime checks read (acceldeploy.platforms.probe): arch, files, commands."""
        return {"arch": self.arch, "files": self.files, "commands": self.commands}

    def to_dict(self) -> dict[str, Any]:
        return {
            "os_id": self.os_id,
            "version_id": self.version_id,
            "pretty_name": self.pretty_name,
            "systemd": self.systemd,
            "arch": self.arch,
            "glibc_minor": self.glibc_minor,
            "pythons": dict(self.pythons),
        }


def _row(rows: list[dict[str, Any]], facts: Facts) -> dict[str, Any] | None:
    for row in rows:
        if str(row["id"]).lower() == facts.os_id.lower() and str(row["version"]) == str(
            facts.version_id
        ):
            return row
    return None


def release_errors(facts: Facts, allow_untested: bool) -> list[str]:
    """The release against the table: refused rows and unlisted releases."""
    data = table()
    refused = _row(data["refused"], facts)
    where = f"{facts.pretty_name} (ID={facts.os_id} VERSION_ID={facts.version_id})"
    if allow_untested or _row(data["supported"], facts):
        return []
    if refused:
        return [f"{where} is refused: {refused['reason']}; fix: {refused['fix']}"]
    return [
        f"{where} is not a release acceldeploy supports (README: Supported targets); "
        "set acceldeploy_allow_untested_os: true to try it anyway (the systemd and Python "
        "minimums still apply)"
    ]


def systemd_errors(facts: Facts) -> list[str]:
    minimum = int(table()["minimums"]["systemd"])
    if facts.systemd is None:
        return [
            "no systemd on this host (systemctl --version printed nothing): acceldeploy runs "
            f"every service as a systemd unit and needs systemd {minimum} or newer"
        ]
    if facts.systemd < minimum:
        return [
            f"systemd {facts.systemd} on {facts.pretty_name} is older than {minimum}, the "
            "oldest release with every hardening directive the unit uses (ProtectProc=, "
            "ProcSubset=); upgrade the OS to a supported release (README: Supported targets)"
        ]
    return []


def interpreter_errors(facts: Facts, variable: str, command: str, purpose: str) -> list[str]:
    """A host interpreter a stage runs (Ansible's modules, the hub clients) is there and
    within the minimums."""
    low, high = (Version(table()["minimums"][k]) for k in ("python", "python_max"))
    version = facts.pythons.get(variable)
    if version is None:
        return [
            f"{variable}: {command} is not on this host; {purpose} needs Python {low} to "
            f"{high}: install python3 or set {variable} to such an interpreter"
        ]
    if not low <= Version(version) <= high:
        return [
            f"{variable}: {command} is Python {version}; {purpose} needs Python {low} to "
            f"{high}: set {variable} to such an interpreter on the host"
        ]
    return []


def modelscope_errors(facts: Facts, sources: list[str]) -> list[str]:
    """ModelScope's file listing (modelscope_hub, fetch/hub.py) needs Python 3.10 or newer."""
    version = facts.pythons.get("model_weights_venv_python")
    if "modelscope" not in sources or version is None or Version(version) >= Version("3.10"):
        return []
    return [
        f"model_weights_venv_python is Python {version}: a service here downloads from "
        "ModelScope, whose file listing (modelscope_hub) needs Python 3.10 or newer; set "
        "model_weights_venv_python to a python3.10+ on the host, or use source: hf"
    ]


def stack_interpreter_errors(facts: Facts, spec: Mapping[str, Any]) -> list[str]:
    """python_env's venv interpreter against the stack's Requires-Python, before any install."""
    if spec.get("manager") != "venv":
        return []
    creator = str(spec["creator"])
    requires = str(spec["requires_python"])
    try:
        allowed = SpecifierSet(requires)
    except InvalidSpecifier as exc:
        raise AcceldeployError(f"versions/stacks.yml: requires_python {requires!r}: {exc}") from exc
    version = facts.pythons.get("python_env_venv_python")
    name = spec.get("stack_name") or f"of {spec['platform']}"
    stack = f"stack {name} (vLLM {spec['vllm_version']}) needs Python {requires}"
    why = str(spec.get("requires_python_why") or "")
    fix = (
        "fix: set python_env_venv_python to such an interpreter on the host, or "
        "python_env_manager: conda (it installs the stack's Python "
        f"{spec['python_version']} itself, on any release)"
    )
    system = facts.pythons.get("ansible_python_interpreter")
    has = f"{facts.pretty_name} ships Python {system}" if system else facts.pretty_name
    if version is None:
        found = f"is not on this host ({has})"
    elif Version(f"{version}.0") not in allowed:
        found = f"is Python {version}"
    else:
        return []
    return [f"python_env_venv_python: {creator} {found}; {stack}{why}; {fix}"]


def stack_glibc_errors(facts: Facts, spec: Mapping[str, Any]) -> list[str]:
    """The host's glibc against what the stack's wheels are built for (manylinux_2_NN), before
    any install."""
    required = str(spec.get("requires_glibc") or "")
    if not required or facts.glibc_minor is None:
        return []
    minor = int(required.split(".")[1])
    if facts.glibc_minor >= minor:
        return []
    name = spec.get("stack_name") or f"of {spec['platform']}"
    how = "python_env_install_from: source, or " if spec.get("install_from") == "wheels" else ""
    return [
        f"acceldeploy_stack: stack {name}'s wheels are built for glibc {required} "
        f"(manylinux_2_{minor}) and {facts.pretty_name} has glibc 2.{facts.glibc_minor}; fix: "
        f"{how}a stack whose wheels this release runs (acceldeploy plan stacks), or a release "
        f"with glibc {required} or newer"
    ]


def wheel_set(facts: Facts, label: str) -> dict[str, Any] | None:
    """The (Python, architecture, glibc) wheels are needed for, for the interpreter named by
    ``label`` (model_weights_venv_python: the hub clients; python_env_venv_python: the stack)."""
    python = facts.pythons.get(label)
    if python is None or facts.glibc_minor is None or not facts.arch:
        return None
    return {
        "key": f"cp{python.replace('.', '')}-{facts.arch}-glibc2.{facts.glibc_minor}",
        "python": python,
        "arch": facts.arch,
        "glibc": facts.glibc_minor,
    }


def ansible_python(inputs: Mapping[str, Any]) -> str:
    """ansible_python_interpreter, or python3 where Ansible discovers it (auto, auto_silent)."""
    configured = str(inputs.get("ansible_python") or "")
    return "python3" if configured.startswith("auto") or not configured else configured


def probe_pythons(inputs: Mapping[str, Any]) -> dict[str, str]:
    """label (the variable that names it) -> command, for every interpreter a stage uses."""
    pythons = {"ansible_python_interpreter": ansible_python(inputs)}
    if inputs.get("hub_python"):
        pythons["model_weights_venv_python"] = str(inputs["hub_python"])
    spec = inputs.get("python_env") or {}
    if spec.get("manager") == "venv":
        pythons["python_env_venv_python"] = str(spec["creator"])
    return pythons


def check(stdout: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The probe's output checked against the table and the stages' needs: the facts, what
    later stages use (``fetch_wheels``) and ``errors``, every refusal naming the fix."""
    facts = Facts.parse(stdout)
    errors = release_errors(facts, bool(inputs.get("allow_untested")))
    errors += systemd_errors(facts)
    errors += interpreter_errors(
        facts,
        "ansible_python_interpreter",
        ansible_python(inputs),
        "Ansible (ansible-core 2.19) on the host",
    )
    if inputs.get("hub_python"):
        errors += interpreter_errors(
            facts,
            "model_weights_venv_python",
            str(inputs["hub_python"]),
            "the hub clients' venv (versions/fetch.txt)",
        )
        errors += modelscope_errors(facts, inputs.get("hub_sources") or [])
    errors += stack_interpreter_errors(facts, inputs.get("python_env") or {})
    errors += stack_glibc_errors(facts, inputs.get("python_env") or {})
    wheels = wheel_set(facts, "model_weights_venv_python") if inputs.get("hub_python") else None
    if inputs.get("hub_python") and wheels is None and not errors:
        errors.append(
            f"no glibc found on {facts.pretty_name} (getconf GNU_LIBC_VERSION): the hub clients' "
            "wheels are manylinux wheels, which need glibc 2.17 or newer"
        )
    stack = wheel_set(facts, "python_env_venv_python") if not errors else None
    return {**facts.to_dict(), "fetch_wheels": wheels, "stack_wheels": stack, "errors": errors}

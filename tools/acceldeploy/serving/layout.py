"""Where a serving unit's files live on a host: the one layout every unit builder (a service's,
a Ray node's, a headless rank's), removal and the no-op state spec read.

A value type at the bottom of serving: it imports nothing else of serving. The directories the
role's variables move (vllm_service_launcher_dir, _secret_dir, _last_good_dir) are its fields;
the rest are fixed.
"""

from __future__ import annotations

from dataclasses import dataclass

UNIT_DIR = "/etc/systemd/system"
STATE_ROOT = "/var/lib/acceldeploy-vllm"
CACHE_ROOT = "/var/cache/acceldeploy-vllm"
# The role's helpers beside the launchers (roles/vllm_service/files).
READY, DRAIN, RAY_WAIT, WATCH = "vllm-ready", "vllm-drain", "ray-wait", "vllm-dp-watch"


def state_dir(name: str) -> str:
    """A service's state directory (the unit's StateDirectory; Ray's session files too)."""
    return f"{STATE_ROOT}/{name}"


def cache_dir(name: str) -> str:
    return f"{CACHE_ROOT}/{name}"


@dataclass(frozen=True)
class UnitLayout:
    launcher_dir: str = "/usr/local/libexec/acceldeploy"
    secret_dir: str = "/etc/acceldeploy/secrets"
    last_good_dir: str = "/var/lib/acceldeploy/vllm-last-good"

    @staticmethod
    def unit(name: str) -> str:
        return f"{UNIT_DIR}/{name}.service"

    def launcher(self, name: str) -> str:
        return f"{self.launcher_dir}/{name}.launch"

    def secrets(self, name: str) -> str:
        return f"{self.secret_dir}/{name}.env"

    def helper(self, helper: str) -> str:
        return f"{self.launcher_dir}/{helper}"

    def files(self, name: str, argcheck: bool = True) -> list[str]:
        """The files the vllm_service role keeps for the unit named ``name`` (a service's or a
        node unit of its group): the unit, its launcher and secrets, and in last_good_dir the
        rollback copies of the unit and launcher with, when ``argcheck`` (the unit has a parser
        check), the check's digest. The no-op path watches them; remove.yml deletes them."""
        good = f"{self.last_good_dir}/{name}"
        files = [self.unit(name), self.launcher(name), self.secrets(name),
                 f"{good}.service", f"{good}.launch"]  # fmt: skip
        return [*files, f"{good}.argcheck"] if argcheck else files

    def launch_globs(self) -> list[str]:
        """Every launcher, deployed and kept for a rollback (what holds a model revision)."""
        return [f"{self.launcher_dir}/*.launch", f"{self.last_good_dir}/*.launch"]

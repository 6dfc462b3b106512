"""tools/acceldeploy/inventory/varcheck.py: the variables site.yml accepts and what it says of others."""

from __future__ import annotations

from pathlib import Path

from acceldeploy.inventory import varcheck

ROLES = Path(__file__).resolve().parents[2] / "roles"


def test_the_tools_inventory_variables_are_known_and_a_typo_is_named() -> None:
    # an inventory with bench profiles (tools/bench.py, tools/tune.py) is a site.yml inventory
    assert varcheck.unknown_variables(
        ROLES,
        ["acceldeploy_bench_profiles", "vllm_service_drain_timeout", "vllm_service_rollback",
         "python_env_keep"]
    ) == []  # fmt: skip
    (message,) = varcheck.unknown_variables(ROLES, ["vllm_service_drain_timout"])
    assert "vllm_service_drain_timout" in message and "vllm_service_drain_timeout" in message
    assert varcheck.type_errors(ROLES, {"acceldeploy_bench_profiles": ["smoke"]}) == [
        "acceldeploy_bench_profiles must be a mapping (key: value), got ['smoke']"
    ]

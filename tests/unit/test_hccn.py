"""The Ascend part of the multi-node readiness gate (readiness/hccn.py) on recorded output:
hccn_tool's address and ping and /etc/hccn.conf captured on an 8 x 910B1 host, and the link
and net-health lines the tool prints (its source's format; tests/data/recorded/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acceldeploy.errors import AcceldeployError
from acceldeploy.host.readiness import hccn

RECORDED = Path(__file__).resolve().parents[1] / "data/recorded"


def recorded(name: str) -> str:
    """A recording without its `# source:` line."""
    return (RECORDED / name).read_text().split("\n", 1)[1]


def lines(name: str) -> list[str]:
    return recorded(name).splitlines()


UP, DOWN = lines("hccn-tool-link-g-format.txt")
HEALTH = lines("hccn-tool-net-health-g-format.txt")


def report(device: int = 0, **changes: object) -> hccn.DeviceReport:
    base = {"device": device, "link": UP, "health": HEALTH[0],
            "ip": "ipaddr:29.1.137.205\nnetmask:255.255.0.0\n",
            "pings": {"29.1.170.143": recorded("hccn-tool-ping-910b1.txt")}}  # fmt: skip
    return hccn.DeviceReport(**{**base, **changes})  # type: ignore[arg-type]


def test_the_recorded_output_reads() -> None:
    assert hccn.address(recorded("hccn-tool-ip-g-910b1.txt")) == ("29.1.112.213", "255.255.0.0")
    assert hccn.conf(recorded("hccn-conf-910b1.txt")) == {
        0: {"address": "29.1.137.205", "netmask": "255.255.0.0", "netdetect": "29.1.0.1",
            "gateway": "29.1.0.1", "send_arp_status": "1"},
        7: {"address": "29.1.170.143", "netmask": "255.255.0.0", "netdetect": "29.1.0.1",
            "gateway": "29.1.0.1", "send_arp_status": "1"},
    }  # fmt: skip
    assert hccn.ping(recorded("hccn-tool-ping-910b1.txt")) == hccn.Ping(3, 3, ())
    assert (hccn.link(UP), hccn.link(DOWN)) == ("UP", "DOWN")
    assert [hccn.health(line) for line in HEALTH] == [
        "Success", "Socket fail", "Receive timeout", "Unreachable", "Time exceeded", "Fault",
        "Init", "Thread error", "Detect ip set", "Unknown"]  # fmt: skip


def test_a_healthy_device_whose_address_matches_its_conf_passes() -> None:
    conf = recorded("hccn-conf-910b1.txt")
    assert hccn.node_errors("npu-01", [report(0)], conf) == []


def test_a_down_link_is_refused_naming_host_device_and_fix() -> None:
    (error,) = hccn.node_errors("npu-02", [report(3, link=DOWN)], "")
    assert error.startswith("npu-02: NPU 3: link status DOWN (hccn_tool -i 3 -link -g)")
    assert "cable or switch port" in error


@pytest.mark.parametrize("status", HEALTH[1:])
def test_every_net_health_but_success_is_refused(status: str) -> None:
    (error,) = hccn.node_errors("npu-01", [report(0, health=status)], "")
    assert f"net health status {status.split(': ', 1)[1]}" in error


def test_an_address_that_differs_from_hccn_conf_is_refused() -> None:
    # device 0's conf address, but the address recorded from device 3
    (error,) = hccn.node_errors(
        "npu-01", [report(0, ip=recorded("hccn-tool-ip-g-910b1.txt"))],
        recorded("hccn-conf-910b1.txt"),
    )  # fmt: skip
    assert "address_0=29.1.137.205" in error and "29.1.112.213/255.255.0.0" in error
    assert "hccn_tool -i 0 -ip -s address 29.1.137.205 netmask 255.255.0.0" in error


def test_a_peer_that_does_not_answer_is_refused() -> None:
    # the tool's own failure marker, in the recorded run's shape, one reply lost
    lost = recorded("hccn-tool-ping-910b1.txt").replace(
        "recv seq=0,time=1.418000ms", "recv time out seq:0").replace(
        "3 received, 0.00%", "2 received, 33.33%")  # fmt: skip
    (error,) = hccn.node_errors("npu-01", [report(0, pings={"29.1.170.143": lost})], "")
    assert "cannot reach the peer device address 29.1.170.143" in error
    assert "recv time out seq:0" in error


def test_output_that_is_not_the_tools_is_an_error_not_a_pass() -> None:
    with pytest.raises(AcceldeployError, match="link status: not in hccn_tool's output"):
        hccn.link("hccn_tool: command not found")

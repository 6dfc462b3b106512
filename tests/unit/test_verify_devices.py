"""verify's device check on recorded npu-smi output (parser: acceldeploy.runtimes)."""

from pathlib import Path
from types import SimpleNamespace

from acceldeploy.verify import hoststate

ROOT = Path(__file__).resolve().parents[2]


def test_devices_from_recorded_npu_smi():
    recorded = ROOT / "tests/data/recorded"
    text = next(p for p in sorted(recorded.glob("npu-smi-info-910b1-x8.txt"))).read_text()

    launch = SimpleNamespace(devices=[0, 1])
    smi = {"npu-smi": {"rc": 0, "out": text}}
    checks = hoststate.judge_devices("npu-01", "ascend", smi, [launch])
    assert checks[0].status == "pass", checks[0].detail
    missing = hoststate.judge_devices("npu-01", "ascend", {}, [launch])
    assert missing[0].status == "fail" and "npu-smi not found" in missing[0].detail

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# acceldeploy (tools/) and the lab's acceldeploy_lab (lab/) from this checkout
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "lab")]

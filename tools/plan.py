#!/usr/bin/env python3
"""`acceldeploy plan`: size KV caches, explain vLLM start-up logs, render services (-h)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from acceldeploy.cli import main

sys.exit(main(["plan", *sys.argv[1:]], prog="plan.py"))

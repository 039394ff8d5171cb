"""The fuzz suite: bounded runs of every input kind's cases through a real ingest."""

from __future__ import annotations

import sys
from pathlib import Path

# The driver and the case modules are plain modules beside this file, shared with
# benchmarks/fuzz.py, which puts this folder on the path the same way.
sys.path.insert(0, str(Path(__file__).resolve().parent))

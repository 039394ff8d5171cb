"""Servers under test: ``serving`` beside this file (a plain module) starts them; this
folder is put on the path for it, as the security suite does for its kit."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

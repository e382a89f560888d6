"""Standalone C driver program (<name>_driver.c) for running an artifact on a target.  (Stub.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_driver(out_dir: Path, name: str, manifest: dict[str, Any]) -> list[str]:
    """Write <name>_driver.c; returns the file names written."""
    return []

"""C++ convenience header (<name>.hpp) over the C API.  (Stub: filled in by the hermetic-artifacts work.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_cpp_header(out_dir: Path, name: str, manifest: dict[str, Any]) -> list[str]:
    """Write <name>.hpp; returns the file names written."""
    return []

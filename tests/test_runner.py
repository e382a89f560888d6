"""The ctypes runner's buffers for weights and workspace."""

from __future__ import annotations

import mmap
import sys

import numpy as np

from pt2c.runtime.runner import _big_buffer


def test_big_buffers_start_on_huge_page_boundaries() -> None:
    for nbytes in (100, 64 << 10, (2 << 20) + 12345, 9 << 20):
        b = _big_buffer(nbytes)
        assert b.dtype == np.uint8 and b.nbytes == nbytes and b.flags.writeable
        assert b.ctypes.data % 64 == 0
        assert not b.any()  # zero-filled, as the numpy buffer it replaces
        if nbytes >= 2 << 20 and sys.platform.startswith("linux") and hasattr(mmap, "MADV_HUGEPAGE"):
            assert b.ctypes.data % (2 << 20) == 0  # THP can back it from its first byte
        b[-1] = 7  # the whole range is ours
        assert b[-1] == 7

"""Peak resident memory of a job process, per cell (the cells of a batch share the process)."""

from __future__ import annotations

import resource
from pathlib import Path


def reset_peak() -> bool:
    """Reset this process's peak resident memory (Linux: ``5`` into /proc/self/clear_refs
    resets VmHWM), so that each cell of a batch reports its own peak. False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_mb() -> float:
    """Peak resident memory of this process since the last :func:`reset_peak` (MiB): VmHWM of
    /proc/self/status, else ru_maxrss (the whole process's life; Linux reports it in KiB)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def rss_mb() -> float:
    """Resident memory of this process now (MiB): VmRSS of /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError("/proc/self/status has no VmRSS")

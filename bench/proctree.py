"""Processes as /proc shows them, for the soak: a process tree, its CPU and RSS, and whether a
pid still names the process it named (the pump and its offload helper, or a Dagster run worker)."""

from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after "(comm)": state, ppid, pgrp, ... (None: gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Running, a zombie (exited, not yet reaped) is not."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def started_at(pid: int) -> int | None:
    """When the process started (clock ticks since boot): with the pid, it names one process even
    after the pid is reused."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def descendants(root: int) -> list[int]:
    """``root`` and every process under it (by parent pid)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = stat_fields(int(entry.name))
            if fields is not None and len(fields) > 1:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def tree_cpu_seconds(root: int) -> float:
    """utime + stime of ``root`` and its descendants."""
    total = 0
    for pid in descendants(root):
        fields = stat_fields(pid)
        if fields is not None and len(fields) > 12:
            total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0

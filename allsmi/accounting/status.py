"""The node_exporter textfile that tells monitoring how the last export went."""

from __future__ import annotations

import os

from allsmi.atomic import write_atomic


def status_text(timestamp: float, success: bool, coverage: float | None,
                period_end: float | None = None) -> str:
    """Prometheus text exposition of the last export's status (unknown coverage is omitted)."""
    lines = [
        "# HELP allsmi_export_last_run_timestamp_seconds When allsmi export last ran, unix seconds.",
        "# TYPE allsmi_export_last_run_timestamp_seconds gauge",
        f"allsmi_export_last_run_timestamp_seconds {timestamp:.3f}",
        "# HELP allsmi_export_success Whether the last export wrote its file with complete data "
        "(coverage at or above the threshold).",
        "# TYPE allsmi_export_success gauge",
        f"allsmi_export_success {1 if success else 0}",
    ]
    if coverage is not None:
        lines += ["# HELP allsmi_export_coverage_ratio Observed device time over expected device "
                  "time in the last export's window.",
                  "# TYPE allsmi_export_coverage_ratio gauge",
                  f"allsmi_export_coverage_ratio {coverage:.6f}"]
    if period_end is not None:
        lines += ["# HELP allsmi_export_period_end_timestamp_seconds End of the last export's "
                  "window, unix seconds.",
                  "# TYPE allsmi_export_period_end_timestamp_seconds gauge",
                  f"allsmi_export_period_end_timestamp_seconds {period_end:.0f}"]
    return "\n".join(lines) + "\n"


def write_status(path: str | os.PathLike[str], timestamp: float, success: bool,
                 coverage: float | None, period_end: float | None = None) -> None:
    """Write the status file atomically; node_exporter needs it world-readable (0644)."""
    write_atomic(path, status_text(timestamp, success, coverage, period_end), mode=0o644)

"""The node_exporter textfile that tells monitoring how the last export went."""

from __future__ import annotations

import os

from allsmi.support.atomic import write_atomic


#: Why an export failed, as the ``reason`` label of ``allsmi_export_failure_info``.
REASONS = ("config", "source", "output", "textfile", "coverage", "interrupted", "internal")


def _comment(message: str) -> str:
    """``message`` as one exposition comment line: printable, single-line, capped."""
    text = "".join(c if c.isprintable() else " " for c in message)
    return "# " + (text[:497] + "..." if len(text) > 500 else text)


def status_text(timestamp: float, success: bool, coverage: float | None,
                period_end: float | None = None, reason: str | None = None,
                message: str | None = None) -> str:
    """Prometheus text exposition of the last export's status (unknown coverage is omitted).

    A failed run carries ``allsmi_export_failure_info{reason="..."} 1`` (one of
    :data:`REASONS`) and its error message as a comment line.
    """
    lines = [_comment(f"allsmi export failed ({reason}): {message}")] if message else []
    lines += [
        "# HELP allsmi_export_last_run_timestamp_seconds When allsmi export last ran, unix seconds.",
        "# TYPE allsmi_export_last_run_timestamp_seconds gauge",
        f"allsmi_export_last_run_timestamp_seconds {timestamp:.3f}",
        "# HELP allsmi_export_success Whether the last export wrote its file with complete data "
        "(coverage at or above the threshold).",
        "# TYPE allsmi_export_success gauge",
        f"allsmi_export_success {1 if success else 0}",
    ]
    if not success and reason:
        if reason not in REASONS:
            raise ValueError(f"unknown failure reason {reason!r}")
        lines += ["# HELP allsmi_export_failure_info Why the last export failed: reason is one "
                  f"of {', '.join(REASONS)}.",
                  "# TYPE allsmi_export_failure_info gauge",
                  f'allsmi_export_failure_info{{reason="{reason}"}} 1']
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
                 coverage: float | None, period_end: float | None = None,
                 reason: str | None = None, message: str | None = None) -> None:
    """Write the status file atomically; node_exporter needs it world-readable (0644)."""
    write_atomic(path, status_text(timestamp, success, coverage, period_end, reason, message),
                 mode=0o644)

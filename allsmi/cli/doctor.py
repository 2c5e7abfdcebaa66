"""``allsmi doctor``: which backends were found, which not and why, versions, permissions."""

from __future__ import annotations

import glob
import grp
import json
import os
import platform
import sys
from typing import Any

import click

from allsmi import __version__
from allsmi.backend_api import Backend
from allsmi.cli.common import build_collector, common_options, settings

def device_node_patterns(backend: Backend) -> tuple[str, ...]:
    """The device-node globs ``backend`` declares (a third-party backend adds its own)."""
    return backend.declaration().device_nodes


def declared_environment(backend: Backend) -> dict[str, str]:
    """The environment variables ``backend`` declares that are set, with their values (a tool
    override that points nowhere explains an absent vendor)."""
    return {var: os.environ[var] for var in backend.declaration().env_vars if var in os.environ}


def _nodes(patterns: tuple[str, ...]) -> list[dict[str, Any]]:
    """Missing or unreadable device nodes explain most failures: list them with their access."""
    found = []
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            found.append({"path": path, "readable": os.access(path, os.R_OK),
                          "writable": os.access(path, os.W_OK)})
    return found


def _groups() -> list[str]:
    names = []
    for gid in os.getgroups():
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.append(str(gid))
    return names


def probe_report(result: Any) -> dict[str, Any]:
    """A backend's :class:`ProbeResult` as the report shows it, whatever a plug-in put in it:
    ``details`` an object of text keys whose values are what a device's details may hold
    (:func:`allsmi.schema.text.clean_detail`: NaN and infinities ``null``), anything else shown as its
    text; ``details`` that are no mapping are said as one entry; ``reason`` text, ``available``
    true or false. So both the text and the ``--json`` report are written whole (doctor never
    dies of what it diagnoses)."""
    details = getattr(result, "details", None)
    try:
        items = list(details.items()) if details else []
    except Exception:  # noqa: BLE001 - not a mapping: said in the report, never a crash
        items = [("(details)", f"not a mapping: {type(details).__name__}")]
    reason = getattr(result, "reason", "")
    return {"available": bool(getattr(result, "available", False)),
            "reason": reason if isinstance(reason, str) else ("" if reason is None else str(reason)),
            "details": {str(key): _detail(value) for key, value in items}}


def _detail(value: Any) -> Any:
    """A probe detail: :func:`~allsmi.schema.text.clean_detail`'s value, or the cleaned text of what
    that has none for (bytes, a path, another object)."""
    from allsmi.schema.text import clean_detail, clean_text
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    cleaned = clean_detail(value)
    if cleaned is None and value is not None and not isinstance(value, float):
        return clean_text(str(value))
    return cleaned


def diagnose(**opts: Any) -> dict[str, Any]:
    """Probe every backend and run one collection cycle; return the report (every problem of
    the config file in ``config_problems``; the diagnosis uses what its valid keys say)."""
    problems: list[Any] = []
    s = settings(**opts, problems=problems)
    collector = build_collector(s)
    probes: dict[str, dict[str, Any]] = {}
    nodes: dict[str, list[dict[str, Any]]] = {}
    environment: dict[str, dict[str, str]] = {}
    try:
        # The probe runs on each backend's own worker thread, inside the cycle and its
        # timeout: a vendor library that hangs cannot hang doctor.
        snap = collector.collect_once()
        for runner in collector.runners:
            nodes[runner.name] = _nodes(device_node_patterns(runner.backend))
            environment[runner.name] = declared_environment(runner.backend)
            result = runner.probe_result
            if result is None:
                probes[runner.name] = {"available": None, "details": {},
                                       "reason": "probe did not finish within the timeout"}
            else:
                probes[runner.name] = probe_report(result)
    finally:
        collector.close_within(1.0)
    # Whole devices and partitions counted apart, as everywhere ("8 devices + 3 partitions").
    per_backend: dict[str, int] = {}
    partitions: dict[str, int] = {}
    for dev in snap.devices:
        counts = partitions if dev.parent is not None else per_backend
        counts[dev.backend] = counts.get(dev.backend, 0) + 1
    backends = []
    for status in snap.backends:
        probe = probes.get(status.name, {})
        backends.append({
            "name": status.name, "status": status.status, "message": status.message,
            "duration_seconds": status.duration_seconds, "devices": per_backend.get(status.name, 0),
            "partitions": partitions.get(status.name, 0),
            "probe": probe, "device_nodes": nodes.get(status.name, []),
            "environment": environment.get(status.name, {})})
    return {
        "allsmi_version": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": snap.host.hostname,
        "user": {"uid": os.getuid(), "groups": _groups()},
        "config": str(s.config.path) if s.config.path else None,
        "config_problems": [{"file": str(p.path) if p.path else None, "line": p.line, "key": p.key,
                             "message": p.message, "text": str(p)}
                            for p in sorted(problems, key=lambda p: p.line or 0)],
        "default_resource_group": s.config.default_group,
        "simulate": s.simulate,
        "backends": backends,
        "attribution": [{"name": a.name, "status": a.status, "message": a.message,
                         "duration_seconds": a.duration_seconds} for a in snap.attribution],
        "kubelet": _kubelet(s),
        "host_signals": _host_signals(s, collector),
        "pid_namespace": pid_namespaces(s, collector),
        "stuck_backends": collector.stuck,
    }


def _host_signals(s: Any, collector: Any) -> dict[str, Any]:
    """Which host signals the waiting classification can read here (docs/activity.md), and
    what the cycle just run could not read."""
    step = collector.waiting
    if not step.settings.enabled:
        return {"enabled": False, "signals": [], "problems": []}
    if s.simulate:
        return {"enabled": True, "signals": [{"name": "simulated", "readable": True,
                                              "detail": "the simulation's host evidence"}],
                "problems": list(step.problems)}
    from allsmi.hostactivity.probe import host_signals
    return {"enabled": True,
            "signals": [{"name": x.name, "readable": x.readable, "detail": x.detail}
                        for x in host_signals(cgroup_root=step.settings.cgroup_root)],
            "problems": list(step.problems)}


def pid_namespaces(s: Any, collector: Any) -> list[dict[str, Any]]:
    """Whether the ``/proc`` the per-process readers use (the cgroup attribution source's
    ``proc_root``, the waiting classification's ``/proc``, the backends' process owners')
    shows the host's pids, which the drivers report (docs/attribution.md); none under
    ``--simulate`` (no pid is this machine's)."""
    if s.simulate:
        return []
    from allsmi.collection import registry
    from allsmi.attribution import attribution_settings
    from allsmi.support.pidns import pid_view
    roots: dict[str, list[str]] = {}
    attribution = attribution_settings(s.config, os.environ, registry.declarations())
    if "cgroup" in attribution.sources:
        roots.setdefault(str(attribution.proc_root), []).append("attribution")
    source = collector.waiting.source  # a sampler of /proc, or psutil's (no /proc: no pids)
    if collector.waiting.settings.enabled and getattr(source, "portable", True) is False:
        roots.setdefault(str(source.proc_root), []).append("waiting")
    # the backends' owners and command lines of device processes (psutil: this /proc)
    roots.setdefault("/proc", []).append("process owners")
    out = []
    for root, users in roots.items():
        view = pid_view(root)
        out.append({"proc_root": root, "host": view.host, "detail": view.detail,
                    "problem": view.problem, "used_by": users})
    return out


def pid_namespace_line(ns: dict[str, Any]) -> str:
    """One line of :func:`pid_namespaces`' entry ``ns``: whether per-process readings are
    made, and if not, why and what to do."""
    *rest, last = ns["used_by"]
    users = f"{', '.join(rest)} and {last}" if rest else last
    if ns["host"]:
        return f"[+] pid namespace {ns['proc_root']} ({users}): the host's ({ns['detail']})"
    return f"[!] pid namespace ({users}): device processes not read by pid: {ns['problem']}"


def _kubelet(s: Any) -> dict[str, Any] | None:
    """The kubelet's allocatable accelerator resources (``GetAllocatableResources``), when
    its pod-resources socket exists; ``None`` otherwise. Bounded by the attribution timeout."""
    from allsmi.attribution import attribution_settings
    from allsmi.attribution.kubernetes import KubeletSource
    from allsmi.attribution.model import SourceError, SourceUnavailable
    from allsmi.collection import registry
    # validated already by build_collector
    settings = attribution_settings(s.config, os.environ, registry.declarations())
    if "kubernetes" not in settings.sources or not os.path.exists(settings.kubelet_socket):
        return None
    report: dict[str, Any] = {"socket": str(settings.kubelet_socket), "allocatable": None,
                              "error": None}
    source = KubeletSource(settings.kubelet_socket, settings, settings.timeout_seconds)
    try:
        report["allocatable"] = [{"resource_name": name, "device_ids": list(ids)}
                                 for name, ids in source.allocatable()]
    except (SourceError, SourceUnavailable) as exc:
        report["error"] = str(exc) or type(exc).__name__
    except Exception as exc:  # doctor explains; it never dies of what it diagnoses
        report["error"] = f"internal error: {type(exc).__name__}: {exc}"
    finally:
        source.close()
    return report


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@common_options
def doctor(as_json: bool, **opts: Any) -> None:
    """Explain which accelerators were found, and why the others were not.

    Probes every backend, runs one collection cycle, and reports library and
    tool versions, device nodes and their permissions, each attribution source's
    status and, when the kubelet's pod-resources socket exists, the accelerator
    resources it can allocate. Every problem of the config file is listed (each key to blame
    left out, the rest diagnosed); with any, doctor exits 2 after the report.
    """
    from allsmi.cli.snapshot_run import OriginalStdout, leave_now, say_unexpected
    out = OriginalStdout()  # before any backend runs; see allsmi/cli/snapshot.py
    report = diagnose(**opts)
    code = 2 if report["config_problems"] else 0
    try:
        # Built as a string, not printed through sys.stdout, which a library call on
        # another thread may have swapped out for the moment.
        out.write(_render(report, as_json))
        for problem in report["config_problems"]:
            click.echo(f"allsmi: {problem['text']}", err=True)
    except BaseException as exc:
        code = 1  # never "exit 0 with nothing on stdout", even when leaving early
        say_unexpected(exc)
        raise
    finally:
        if report["stuck_backends"]:  # a thread stuck in a vendor library
            leave_now(code, report["stuck_backends"])
    if code:
        raise SystemExit(code)


def _render(report: dict[str, Any], as_json: bool) -> str:
    if as_json:
        return json.dumps(report, indent=2, allow_nan=False) + "\n"
    from allsmi.schema.text import escaped
    lines: list[str] = []

    def echo(line: str) -> None:  # paths, environment and tool text shown, never obeyed
        lines.append(escaped(line))
    echo(f"allsmi {report['allsmi_version']}  Python {report['python']}  {report['platform']}")
    echo(f"host {report['hostname']}  uid {report['user']['uid']}  "
         f"groups {', '.join(report['user']['groups']) or '-'}")
    echo(f"config {report['config'] or '(none: defaults)'}  "
         f"default resource group {report['default_resource_group']!r}")
    if report["config_problems"]:
        echo(f"config problems: {len(report['config_problems'])} (exit 2); each key named was "
             "left out of this diagnosis")
        for problem in report["config_problems"]:
            echo(f"  {problem['text']}")
    if report["simulate"]:
        echo(f"simulating scenario {report['simulate']!r}")
    echo("")
    for b in report["backends"]:
        mark = {"ok": "+", "unavailable": "-", "error": "!", "timeout": "!"}.get(b["status"], "?")
        parts = f" + {b['partitions']} partition(s)" if b.get("partitions") else ""
        echo(f"[{mark}] {b['name']:<12} {b['status']:<12} {b['devices']} device(s){parts}")
        if b["message"]:
            echo(f"      {b['message']}")
        for key, value in sorted(b["probe"].get("details", {}).items()):
            echo(f"      {key}: {'N/A' if value is None else value}")
        for var, value in sorted(b["environment"].items()):
            echo(f"      {var}={value}")
        for node in b["device_nodes"]:
            access = ("r" if node["readable"] else "-") + ("w" if node["writable"] else "-")
            echo(f"      {node['path']} [{access}]")
    echo("")
    if not report["attribution"]:
        echo("attribution: no source configured")
    for a in report["attribution"]:
        mark = {"ok": "+", "unavailable": "-", "error": "!", "timeout": "!"}.get(a["status"], "?")
        echo(f"[{mark}] attribution {a['name']:<12} {a['status']}")
        if a["message"]:
            echo(f"      {a['message']}")
    kubelet = report["kubelet"]
    if kubelet is not None:
        echo(f"kubelet {kubelet['socket']}: allocatable accelerator resources")
        if kubelet["error"]:
            echo(f"      {kubelet['error']}")
        for item in kubelet["allocatable"] or ():
            echo(f"      {item['resource_name']}: {len(item['device_ids'])} device(s) "
                 f"{', '.join(item['device_ids'])}")
        if kubelet["allocatable"] == []:
            echo("      (none)")
    echo("")
    signals = report["host_signals"]
    if not signals["enabled"]:
        echo("host signals: off ([activity] enabled = false): no waiting classification")
    for sig in signals["signals"]:
        echo(f"[{'+' if sig['readable'] else '-'}] host {sig['name']}")
        if sig["detail"]:
            echo(f"      {sig['detail']}")
    for problem in signals["problems"]:
        echo(f"[!] host {problem}")
    for ns in report["pid_namespace"]:
        echo(pid_namespace_line(ns))
    return "".join(line + "\n" for line in lines)

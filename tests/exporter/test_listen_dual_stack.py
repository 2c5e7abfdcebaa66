"""``--listen :PORT`` (all interfaces) answers over IPv4 and IPv6, as Go exporters do;
``0.0.0.0:PORT``, written out, is IPv4's interfaces only.

``:PORT`` bound ``0.0.0.0`` only: a Prometheus scraping the node's or the pod's IPv6 address (an
IPv6 or dual-stack Kubernetes cluster; the image sets ``ALLSMI_SERVE_LISTEN=:9477``) was
refused. node_exporter's ``:9100`` (Go's ``net.Listen("tcp", ...)`` on a wildcard address)
listens on both families with one dual-stack socket.

Listening on every interface must never expose a test server: the exporter and its client run
in a network namespace of their own (``unshare --user --net``), whose only interface is the
loopback one; there, ``127.0.0.1`` and ``::1`` are both "every interface".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Run inside the namespace (fixed ports: nothing else lives in it, so none can collide): the
# loopback interface up, the exporter on a wildcard address, one
# request over each family; prints "<listen> <family> <status or error>" lines.
_PROBE = r"""
import os, socket, subprocess, sys, time, urllib.request
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
results = []
for listen, port in (sys.argv[1], 19477), (sys.argv[2], 19478):
    env = {**os.environ, "ALLSMI_CONFIG": os.devnull}
    proc = subprocess.Popen([sys.executable, "-m", "allsmi", "serve", "--simulate", "mixed",
                             "--listen", listen.replace("PORT", str(port))], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        listening = False
        while not listening and time.monotonic() < deadline and proc.poll() is None:
            for host in ("127.0.0.1", "::1"):  # whichever it listens on
                try:
                    socket.create_connection((host, port), timeout=0.5).close()
                    listening = True
                except OSError:
                    pass
            time.sleep(0.05)
        for family, host in (("ipv4", "127.0.0.1"), ("ipv6", "[::1]")):
            try:
                with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=5) as r:
                    results.append(f"{listen} {family} {r.status}")
            except OSError as exc:
                results.append(f"{listen} {family} {exc}")
    finally:
        proc.terminate()
        proc.wait(15)
print("\n".join(results))
"""


def in_network_namespace(probe_code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -c probe_code ARGS`` in a private network namespace of its own (``unshare
    --user --net``: only a loopback interface), this checkout importable; skipped with the
    reason where no such namespace can be made."""
    unshare = shutil.which("unshare")
    if unshare is None or shutil.which("ip") is None:
        pytest.skip("unshare or ip not found (util-linux, iproute2): no private network namespace")
    probe = subprocess.run([unshare, "--user", "--map-root-user", "--net", "true"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"no private network namespace here (unshare: {probe.stderr.strip()})")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([unshare, "--user", "--map-root-user", "--net", sys.executable, "-c",
                           probe_code, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=REPO)


def test_all_interfaces_means_ipv4_and_ipv6() -> None:
    result = in_network_namespace(_PROBE, ":PORT", "[::]:PORT")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split("\n")[:4] == [
        ":PORT ipv4 200", ":PORT ipv6 200", "[::]:PORT ipv4 200", "[::]:PORT ipv6 200"], \
        result.stdout + result.stderr


def test_a_given_address_is_that_address_only() -> None:
    result = in_network_namespace(_PROBE, "127.0.0.1:PORT", "[::1]:PORT")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.split("\n")
    assert lines[0] == "127.0.0.1:PORT ipv4 200" and lines[3] == "[::1]:PORT ipv6 200", result.stdout
    assert "refused" in lines[1].lower() and "refused" in lines[2].lower(), result.stdout


def test_the_ipv4_wildcard_written_out_is_ipv4_only() -> None:
    """An operator who wrote ``0.0.0.0`` (and firewalls IPv4) is not made reachable over IPv6."""
    result = in_network_namespace(_PROBE, "0.0.0.0:PORT", "[::1]:PORT")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.split("\n")
    assert lines[0] == "0.0.0.0:PORT ipv4 200", result.stdout
    assert "refused" in lines[1].lower(), result.stdout

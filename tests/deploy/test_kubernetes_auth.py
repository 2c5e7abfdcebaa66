"""deploy/kubernetes/components/{tls,basic-auth}: the probes and the monitors work against a real
``allsmi serve`` run with the web configuration the components mount.

The Secrets are directories here (one file per key, as Kubernetes mounts them): a CA and a
server certificate for allsmi.allsmi.svc made with openssl, a web.yml with a bcrypt hash. The
rendered DaemonSet's environment (its paths mapped into the Secret's directory) starts the
exporter; each rendered probe is then run as the kubelet runs it (httpGet: the scheme, path and
port, any 2xx or 3xx status, certificates not verified, no credentials; tcpSocket: a connect),
and a real Prometheus scrapes it as the Prometheus Operator configures it from the rendered
monitor (verifying the certificate against ca.crt, sending the scrape Secret's credentials).
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..conftest import require_tool
from ..exporter.server import Serve, fetch, run_serve
from .kube import container, env, one, render, render_with, volumes
from .operator import pod_target, prometheus, scrape_job, wait_for

pytestmark = [pytest.mark.integration]

bcrypt = pytest.importorskip("bcrypt")

USER, PASSWORD = "prometheus", "correct horse battery"
NODE = "gpu-node-3"


def _secrets(tmp: Path, basic_auth: bool) -> dict[str, Path]:
    """The Secrets allsmi-web-config and allsmi-scrape-auth, as README.md says to make them."""
    openssl = require_tool("openssl", "openssl")
    web, scrape = tmp / "allsmi-web-config", tmp / "allsmi-scrape-auth"
    web.mkdir()
    scrape.mkdir()

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60, cwd=web)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=allsmi test CA",
        "-keyout", "ca.key", "-out", "ca.crt")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=allsmi", "-keyout", "tls.key", "-out", "tls.csr")
    (web / "san.ext").write_text("subjectAltName=DNS:allsmi.allsmi.svc,DNS:allsmi\n")
    run("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "1", "-extfile", "san.ext", "-out", "tls.crt")
    for leftover in ("ca.key", "tls.csr", "san.ext", "ca.srl"):
        (web / leftover).unlink(missing_ok=True)
    config: dict[str, Any] = {"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key"}}
    if basic_auth:
        config["basic_auth_users"] = {USER: bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()}
    (web / "web.yml").write_text(yaml.safe_dump(config))
    (scrape / "username").write_text(USER)
    (scrape / "password").write_text(PASSWORD)
    return {"allsmi-web-config": web, "allsmi-scrape-auth": scrape}


def _serve_as_rendered(ds: dict[str, Any], secrets: dict[str, Path], tmp: Path) -> Serve:
    """``allsmi serve`` with the DaemonSet's web configuration, its Secret mount mapped here."""
    path = env(ds)["ALLSMI_SERVE_WEB_CONFIG"]
    (mount,) = [m for m in container(ds)["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    volume = volumes(ds)[mount["name"]]
    assert mount["readOnly"] is True and volume["secret"]["defaultMode"] == 0o440
    local = secrets[volume["secret"]["secretName"]] / Path(path).relative_to(mount["mountPath"])
    return run_serve(["--simulate", "mixed", "--interval", "0.5"], tmp=tmp,
                     env={"ALLSMI_SERVE_WEB_CONFIG": str(local), "ALLSMI_HOSTNAME": NODE})


def _kubelet_probe(probe: dict[str, Any], port: int) -> bool:
    """One probe as the kubelet runs it, against 127.0.0.1:``port`` (the named port ``metrics``)."""
    if "tcpSocket" in probe:
        assert probe["tcpSocket"]["port"] == "metrics"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=probe.get("timeoutSeconds", 1)):
                return True
        except OSError:
            return False
    get = probe["httpGet"]
    assert get["port"] == "metrics" and "httpHeaders" not in get  # no credential in a pod spec
    scheme = get.get("scheme", "HTTP").lower()
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE  # the kubelet does not verify a probe's certificate
    try:
        response = fetch(f"{scheme}://127.0.0.1:{port}{get['path']}", context=insecure if scheme == "https" else None,
                         timeout=probe.get("timeoutSeconds", 1))
    except OSError:
        return False
    return 200 <= response.status < 400


def _probes_pass(ds: dict[str, Any], server: Serve) -> dict[str, bool]:
    server.wait_listening()
    c = container(ds)
    deadline = time.monotonic() + 30
    while True:  # readiness needs a first collection cycle
        got = {name: _kubelet_probe(c[name], server.port) for name in ("startupProbe", "livenessProbe", "readinessProbe")}
        if all(got.values()) or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def _simulated_devices() -> int:
    """How many devices the exporter's scenario (``--simulate mixed``) has: every one must arrive."""
    result = subprocess.run([sys.executable, "-m", "allsmi", "snapshot", "--simulate", "mixed", "--format", "json"],
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    return len(json.loads(result.stdout)["devices"])


@pytest.mark.parametrize("basic_auth", [False, True], ids=["tls", "tls+basic-auth"])
def test_probes_and_monitor_against_a_real_exporter(tmp_path: Path, basic_auth: bool) -> None:
    if basic_auth:
        objects = render("fleet-tls-auth")
    else:
        objects = render_with(tmp_path, "fleet", ["tls"])
    (ds,) = [d for d in objects if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "allsmi-nvidia"]
    monitor = one(objects, "ServiceMonitor")
    secrets = _secrets(tmp_path, basic_auth)
    server = _serve_as_rendered(ds, secrets, tmp_path)
    server.scheme = "https"
    try:
        assert _probes_pass(ds, server) == dict.fromkeys(("startupProbe", "livenessProbe", "readinessProbe"), True), \
            server.output()
        # The kit's plain probes would fail here: HTTP to a TLS port, or 401 without credentials.
        plain = container(one(render("fleet"), "DaemonSet", "allsmi-nvidia"))
        assert not _kubelet_probe(plain["readinessProbe"], server.port)
        if basic_auth:
            https_probe = {"httpGet": {"path": "/ready", "port": "metrics", "scheme": "HTTPS"}}
            assert not _kubelet_probe(https_probe, server.port)  # 401: why they are TCP probes

        targets = tmp_path / "targets.json"
        targets.write_text(json.dumps([pod_target(f"127.0.0.1:{server.port}", "allsmi-nvidia-b7x2q",
                                                  "allsmi-nvidia", NODE)]))
        job = scrape_job(monitor, "kit", targets, secrets)
        assert job["scheme"] == "https" and ("basic_auth" in job) == basic_auth
        # The certificate names allsmi.allsmi.svc, not the pod's address: the scrape verifies it
        # as the monitor's serverName.
        jobs = [job]
        if basic_auth:
            jobs.append({**job, "job_name": "no-credentials", "basic_auth": None,
                         "relabel_configs": job["relabel_configs"] + [{"target_label": "job", "replacement": "no-credentials"}]})
            jobs[-1].pop("basic_auth")
        with prometheus(tmp_path, jobs) as base:
            wanted = [("allsmi-nvidia", NODE, "1")] + ([("no-credentials", NODE, "0")] if basic_auth else [])
            wait_for(base, "up", sorted(wanted))
            wait_for(base, "count by (job, instance) (allsmi_device_info)",
                     [("allsmi-nvidia", NODE, str(_simulated_devices()))])
    finally:
        server.stop()


def test_podmonitor_with_tls_and_basic_auth_validates(tmp_path: Path) -> None:
    from .test_kubernetes import operator_errors
    objects = render_with(tmp_path, "fleet-podmonitor", ["tls", "basic-auth"])
    monitor = one(objects, "PodMonitor")
    ep = monitor["spec"]["podMetricsEndpoints"][0]
    assert ep["scheme"] == "https" and ep["tlsConfig"]["serverName"] == "allsmi.allsmi.svc"
    assert ep["basicAuth"]["password"] == {"name": "allsmi-scrape-auth", "key": "password"}
    assert operator_errors(monitor) == []
    for ds in (o for o in objects if o["kind"] == "DaemonSet"):
        assert all("tcpSocket" in container(ds)[p] for p in ("startupProbe", "livenessProbe", "readinessProbe"))


def _reads(uid: int, gid: int, pod_security: dict[str, Any], mode: int) -> bool:
    """Whether a process of ``uid``/``gid`` reads a file of a Secret volume with ``mode``: the
    kubelet writes them as root, group ``fsGroup`` where the pod has one (root's otherwise)."""
    group = pod_security.get("fsGroup", 0)
    groups = {gid, *pod_security.get("supplementalGroups", []), *([group] if "fsGroup" in pod_security else [])}
    if uid == 0:
        return True
    return bool(mode & 0o004) or (group in groups and bool(mode & 0o040))


@pytest.mark.parametrize("components", [["tls"], ["tls", "basic-auth"], ["basic-auth"]],
                         ids=["tls", "tls+basic-auth", "basic-auth"])
def test_unprivileged_nvidia_reads_its_web_config(tmp_path: Path, components: list[str]) -> None:
    """base + vendors/nvidia + config, nvidia-unprivileged and TLS and/or basic auth: uid 10001
    reads every file of the Secrets it mounts (the pod's fsGroup, mode 0440), and they are not
    world-readable."""
    objects = render_with(tmp_path, "nvidia", ["nvidia-unprivileged", *components])
    ds = one(objects, "DaemonSet", "allsmi-nvidia")
    pod = ds["spec"]["template"]["spec"]
    sc = container(ds)["securityContext"]
    uid, gid = sc["runAsUser"], sc["runAsGroup"]
    assert (uid, gid) == (10001, 10001)
    assert pod["securityContext"]["fsGroup"] == 10001
    secrets = [v for v in pod["volumes"] if "secret" in v]
    assert {v["secret"]["secretName"] for v in secrets} == {"allsmi-web-config"}
    mounted = {m["name"] for m in container(ds)["volumeMounts"]}
    for volume in secrets:
        assert volume["name"] in mounted
        mode = volume["secret"]["defaultMode"]
        assert _reads(uid, gid, pod["securityContext"], mode), f"uid {uid} cannot read mode {mode:o}"
        assert not mode & 0o007, f"{volume['name']}: mode {mode:o} is world-accessible"
    assert env(ds)["ALLSMI_SERVE_WEB_CONFIG"].startswith("/etc/allsmi-web/")


def _as_kubelet_writes_it(secret: Path, version: str) -> None:
    """The Secret's files as the kubelet's atomic writer lays out a Secret volume: the keys in a
    version directory, ``..data`` a link to it, each key a link through ``..data``."""
    files = [p for p in secret.iterdir() if p.is_file() and not p.is_symlink()]
    (secret / version).mkdir()
    for path in files:
        path.rename(secret / version / path.name)
        (secret / path.name).symlink_to(Path("..data") / path.name)
    (secret / "..data").symlink_to(version)


def _served_certificate(port: int) -> bytes:
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with insecure.wrap_socket(raw, server_hostname="allsmi.allsmi.svc") as tls:
            return tls.getpeercert(binary_form=True) or b""


def test_a_renewed_certificate_in_the_secret_is_served_without_a_restart(tmp_path: Path) -> None:
    """README.md, "TLS and basic auth": the kubelet renews a mounted Secret by pointing ``..data``
    at a new version directory; the exporter then serves the new certificate, same process."""
    objects = render_with(tmp_path, "fleet", ["tls"])
    ds = one(objects, "DaemonSet", "allsmi-nvidia")
    mount = next(m for m in container(ds)["volumeMounts"] if m["name"] == "web-config")
    assert "subPath" not in mount  # a subPath mount is never updated by the kubelet
    secrets = _secrets(tmp_path, basic_auth=False)
    web = secrets["allsmi-web-config"]
    _as_kubelet_writes_it(web, "..2026_03_01_00_00_00.000000001")
    server = _serve_as_rendered(ds, secrets, tmp_path)
    try:
        server.wait_listening()
        first = _served_certificate(server.port)
        assert first == ssl.PEM_cert_to_DER_cert((web / "tls.crt").read_text())
        renewed = web / "..2026_03_02_00_00_00.000000001"
        renewed.mkdir()
        for name in ("web.yml", "ca.crt"):
            (renewed / name).write_bytes((web / name).read_bytes())
        subprocess.run([require_tool("openssl", "openssl"), "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-days", "1", "-subj", "/CN=allsmi renewed", "-addext", "subjectAltName=DNS:allsmi.allsmi.svc",
                        "-keyout", "tls.key", "-out", "tls.crt"], check=True, capture_output=True, timeout=60,
                       cwd=renewed)
        wanted = ssl.PEM_cert_to_DER_cert((renewed / "tls.crt").read_text())
        (web / "..data_tmp").symlink_to(renewed.name)
        (web / "..data_tmp").rename(web / "..data")
        deadline = time.monotonic() + 30
        while _served_certificate(server.port) != wanted:
            assert server.proc.poll() is None, server.output()
            assert time.monotonic() < deadline, "the renewed certificate is not served\n" + server.output()
            time.sleep(0.2)
    finally:
        server.stop()
    readme = (Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "README.md").read_text()
    assert "reads its web\nconfiguration at start" not in readme and "AllsmiWebConfigReloadFailed" in readme

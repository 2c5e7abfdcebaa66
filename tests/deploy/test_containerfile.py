"""The Containerfile, without a container runtime: its install steps run in a fresh virtual
environment, its entry point runs with the DaemonSet's environment and ``--simulate mixed``,
and the recipe and the DaemonSet agree on the port, the paths and the user.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from allsmi.attribution.settings import DEFAULT_KUBELET_SOCKET
from allsmi.cli.serve import parse_listen

from ..attribution.helpers import PodResourcesServer, find, mixed_devices, pod
from ..exporter.server import Serve
from ..prometheus_server import free_port
from ..wheelhouse import offline_pip_env
from .kube import CONTAINERFILE, container, containerfile, env, instructions, mount_of, render
from .support import REPO

#: The image's paths that the install steps create, mapped into the test's directory.
IMAGE_PATHS = ("/opt/allsmi", "/src")
LOCK = REPO / "deploy" / "image" / "requirements.txt"


def _base() -> str:
    """The image both stages are built FROM: the ``ARG BASE`` default."""
    (arg,) = [i.text for i in containerfile() if i.keyword == "ARG" and i.text.startswith("BASE=")]
    return arg.partition("=")[2]


def _single(keyword: str) -> str:
    found = list(instructions(keyword))
    assert len(found) == 1, f"the Containerfile must have one {keyword}, has {len(found)}"
    return found[0].text


def _image_env() -> dict[str, str]:
    out: dict[str, str] = {}
    for instruction in instructions("ENV"):
        out.update(instruction.pairs())
    return out


def _image_user() -> tuple[int, int]:
    user, _, group = _single("USER").partition(":")
    assert user.isdigit() and group.isdigit(), "USER is numeric, so that runAsNonRoot can check it"
    return int(user), int(group)


def _useradd() -> list[str]:
    for instruction in instructions("RUN"):
        for step in instruction.text.split("&&"):
            words = shlex.split(step)
            if words and words[0] == "useradd":
                return words
    raise AssertionError("the Containerfile creates no user")


def _option(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def test_recipe_and_daemonset_agree() -> None:
    image_env = _image_env()
    entrypoint = next(instructions("ENTRYPOINT")).exec_form()
    cmd = next(instructions("CMD")).exec_form()
    (expose,) = _single("EXPOSE").split()
    uid, gid = _image_user()
    useradd = _useradd()
    assert int(_option(useradd, "--uid")) == uid and "--user-group" in useradd
    assert uid != 0 and gid != 0
    home = _option(useradd, "--home-dir")
    assert cmd == ["serve"]
    venv = next(s for i in instructions("RUN") for s in i.text.split("&&") if "-m venv" in s).split()[-1]
    assert entrypoint == [f"{venv}/bin/allsmi"]
    assert image_env["PATH"].startswith(f"{venv}/bin:")
    _, image_port = parse_listen(image_env["ALLSMI_SERVE_LISTEN"])
    assert int(expose) == image_port
    for overlay in ("fleet", "fleet-no-host-pid"):
        for ds in [o for o in render(overlay) if o["kind"] == "DaemonSet"]:
            c = container(ds)
            variables = env(ds)
            assert c["image"].startswith("allsmi:")
            assert "command" not in c  # the image's entry point
            assert c["args"] == cmd
            assert variables["ALLSMI_SERVE_LISTEN"] == image_env["ALLSMI_SERVE_LISTEN"]
            assert c["ports"][0]["containerPort"] == image_port
            # The image's home is where the DaemonSet keeps the ledger, on the node.
            mount, volume = mount_of(ds, variables["ALLSMI_SERVE_LEDGER"])
            assert mount["mountPath"] == home and "hostPath" in volume
            # The image's config directory is the ConfigMap's mount.
            config_dir = str(Path(variables["ALLSMI_CONFIG"]).parent)
            assert f"install -d -m 0755 {config_dir}" in " ".join(i.text for i in instructions("RUN"))
            assert mount_of(ds, variables["ALLSMI_CONFIG"])[0]["mountPath"] == config_dir
            # The user: the image's, except where the kubelet's root-only pod-resources socket
            # is mounted; then root, with every capability dropped or (device vendors)
            # privileged, as README.md documents.
            sc = c["securityContext"]
            socket_mounted = any(m["mountPath"] == str(DEFAULT_KUBELET_SOCKET.parent)
                                 for m in c["volumeMounts"])
            assert socket_mounted
            assert (sc["runAsUser"], sc["runAsGroup"]) in ((0, 0), (uid, gid))
            if sc["runAsUser"] == 0:
                # (Intel's adds the two that read other users' DRM fdinfo)
                assert sc.get("privileged") or sc["capabilities"]["drop"] == ["ALL"] and \
                    set(sc["capabilities"].get("add", [])) <= {"SYS_PTRACE", "DAC_READ_SEARCH"}


def _map(word: str, root: Path) -> str:
    for prefix in IMAGE_PATHS:
        if word == prefix or word.startswith((prefix + "/", prefix + "[")):
            return str(root / prefix.strip("/").replace("/", "-")) + word[len(prefix):]
    return word


def _install(root: Path) -> Path:
    """The recipe's COPY and install RUN steps, with the image's paths under ``root``; pip
    installs from the wheelhouse ``.ci/run`` fills, with the index off (``tests/wheelhouse.py``)."""
    pip_env = offline_pip_env(lock=True)
    for instruction in containerfile():
        if instruction.keyword == "COPY" and instruction.text.startswith("--from="):
            continue  # the build stage's /opt/allsmi into the image: the same path here
        if instruction.keyword == "COPY":
            *sources, dest = shlex.split(instruction.text)
            target = Path(_map(dest.rstrip("/"), root))
            for source in sources:
                origin = REPO / source
                into = target / origin.name if dest.endswith("/") else target
                into.parent.mkdir(parents=True, exist_ok=True)
                if origin.is_dir():
                    shutil.copytree(origin, into, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy2(origin, into)
        elif instruction.keyword == "RUN" and any(p in instruction.text for p in IMAGE_PATHS):
            for step in instruction.text.split("&&"):
                words = [_map(w, root) for w in shlex.split(step)]
                if words[0] == "python":
                    words[0] = sys.executable  # the image's python; the host's here
                if words[0] == "rm":
                    assert words[1] == "-rf" and words[2].startswith(str(root))
                result = subprocess.run(words, capture_output=True, text=True, timeout=900,
                                        stdin=subprocess.DEVNULL, env=pip_env)
                assert result.returncode == 0, f"{step.strip()}: {result.stderr[-3000:]}"
    return root


@pytest.mark.long(30)
def test_install_steps_and_entry_point_serve_as_the_daemonset_runs_it(tmp_path: Path) -> None:
    root = _install(tmp_path / "image")
    assert not (root / "src").exists()  # the sources are removed from the image
    # No installer, no build tools and no terminal dashboard in the environment; nothing missing
    # from the lock (pip check finds every requirement but the dashboard's Textual).
    venv = root / "opt-allsmi"
    assert not list(venv.glob("bin/pip*"))
    site = next(venv.glob("lib/python3.*/site-packages"))
    for gone in ("pip", "setuptools", "wheel", "textual"):
        assert not list(site.glob(f"{gone}")) and not list(site.glob(f"{gone}-*.dist-info")), gone
    check = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "check"],
                           capture_output=True, text=True, timeout=120)
    problems = [line for line in check.stdout.splitlines() if line and "textual" not in line]
    assert not problems, check.stdout
    entrypoint = [_map(w, root) for w in next(instructions("ENTRYPOINT")).exec_form()]
    assert Path(entrypoint[0]).is_file()
    # Every package of the tree is in the image (backends/NAME/ is allsmi.backends.NAME).
    modules = sorted(
        ".".join(("allsmi", "backends", *d.relative_to(REPO / "backends").parts) if top == "backends"
                 else ("allsmi", *d.relative_to(REPO / "allsmi").parts))
        for top in ("allsmi", "backends") for d in [REPO / top, *(REPO / top).rglob("*")]
        if d.is_dir() and (d / "__init__.py").exists())
    python = Path(entrypoint[0]).with_name("python")
    result = subprocess.run([str(python), "-c", "import importlib, sys\n"
                             "for m in sys.argv[1:]: importlib.import_module(m)", *modules],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert result.returncode == 0, f"a package missing from the image: {result.stderr[-2000:]}"

    (ds,) = [o for o in render("nvidia") if o["kind"] == "DaemonSet"]
    config_map = next(o for o in render("nvidia") if o["kind"] == "ConfigMap"
                      and o["metadata"]["name"].startswith("allsmi-config"))
    etc = tmp_path / "etc-allsmi"
    etc.mkdir()
    (etc / "config.toml").write_text(config_map["data"]["config.toml"])
    state = tmp_path / "state"
    state.mkdir()
    devices = mixed_devices()
    kubelet = PodResourcesServer()
    gpu = find(devices, "nvidia", 0)
    kubelet.pods = [pod("ml", "trainer-0", {"main": [("nvidia.com/gpu", [gpu.id])]})]
    # The DaemonSet's environment with its paths moved here (and loopback only).
    variables = env(ds)
    moved = {
        "ALLSMI_CONFIG": str(etc / Path(variables["ALLSMI_CONFIG"]).name),
        "ALLSMI_SERVE_LEDGER": str(state / Path(variables["ALLSMI_SERVE_LEDGER"]).name),
        "ALLSMI_KUBELET_SOCKET": str(kubelet.socket),
        "HOME": str(tmp_path),
        "ALLSMI_HOSTNAME": "gpu-node-under-test",  # what the downward API gives: the node's name
    }
    assert variables["ALLSMI_HOSTNAME"] == "fieldRef:spec.nodeName"
    assert Path(variables["ALLSMI_KUBELET_SOCKET"]).name == kubelet.socket.name
    port = free_port()
    image_env = {k: v.replace("$PATH", os.environ.get("PATH", "")) for k, v in _image_env().items()}
    image_env = {k: ":".join(_map(p, root) for p in v.split(":")) if k == "PATH" else v
                 for k, v in image_env.items()}
    full_env = {**os.environ, **image_env, **variables, **moved,
                "ALLSMI_SERVE_LISTEN": f"127.0.0.1:{port}"}
    log = tmp_path / "serve.log"
    command = entrypoint + container(ds)["args"] + ["--simulate", "mixed"]
    try:
        with open(log, "wb") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                                    cwd=tmp_path)
        server = Serve(proc, port, log=log)
        try:
            server.wait_ready(timeout=60)
            c = container(ds)
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                response = server.get(c[probe]["httpGet"]["path"])
                assert response.status == 200, (probe, response.text)
            deadline = time.monotonic() + 30
            while True:
                text = server.get("/metrics").text
                series = re.findall(r'^allsmi_device_workload_info\{([^}]*source="kubernetes"[^}]*)\}',
                                    text, re.M)
                if series or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert len(series) == 1 and 'pod="trainer-0"' in series[0] and f'uuid="{gpu.id}"' in series[0]
            snapshot = json.loads(server.get("/api/v1/snapshot").text)
            assert snapshot["host"]["hostname"] == "gpu-node-under-test"
        finally:
            started = time.monotonic()
            code = server.stop(signal.SIGTERM, timeout=60)
            took = time.monotonic() - started
    finally:
        kubelet.stop()
    assert code == 0, server.output()
    grace = ds["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert took < grace / 3, f"SIGTERM to exit took {took:.1f} s, the grace period is {grace} s"
    # The last interval reached the ledger on the way out.
    with sqlite3.connect(state / "ledger.db") as db:
        assert db.execute("SELECT count(*) FROM intervals").fetchone()[0] > 0


def test_the_recipe_parser_sees_every_instruction() -> None:
    keywords = [i.keyword for i in containerfile()]
    assert keywords[:2] == ["ARG", "FROM"]
    assert set(keywords) <= {"ARG", "FROM", "ENV", "COPY", "RUN", "USER", "WORKDIR", "EXPOSE", "ENTRYPOINT", "CMD"}
    # Both stages on one base, pinned by the digest of python:3.12-slim-bookworm.
    assert re.fullmatch(r"docker\.io/library/python:3\.12-slim-bookworm@sha256:[0-9a-f]{64}", _base())
    assert [i.text for i in instructions("FROM")] == ["${BASE} AS build", "${BASE}"]
    assert "skopeo inspect" in CONTAINERFILE.read_text()  # the update command


def _lock() -> dict[str, tuple[str, list[str]]]:
    """deploy/image/requirements.txt: name -> (version, hashes)."""
    entries: dict[str, tuple[str, list[str]]] = {}
    name = ""
    for line in LOCK.read_text().splitlines():
        if re.match(r"^[A-Za-z0-9]", line):
            name, version = line.split(" ", 1)[0].split("==")
            entries[name.lower()] = (version, [])
        elif line.strip().startswith("--hash=sha256:"):
            entries[name.lower()][1].append(line.strip().split(":", 1)[1].rstrip(" \\"))
    return entries


def test_the_lock_pins_the_image_s_requirements_with_hashes() -> None:
    from packaging.requirements import Requirement
    from .kube import KIT
    build = _build_module()
    lock = _lock()
    assert lock and all(re.fullmatch(r"[0-9a-f]{64}", h) for _, hashes in lock.values() for h in hashes)
    assert all(hashes for _, hashes in lock.values())
    for line in (LOCK.parent / "requirements.in").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        if req.marker and not req.marker.evaluate({"python_version": "3.12"}):
            continue
        name = req.name.lower().replace("_", "-")
        assert name in lock, f"{name} is not locked"
        assert req.specifier.contains(lock[name][0]), f"{name}=={lock[name][0]} does not satisfy {req}"
    for gone in (*build.DASHBOARD_ONLY, "pip", "setuptools", "wheel"):
        assert gone not in lock
    assert set(build.IMAGE_EXTRAS) >= {"nvidia", "amd", "kubernetes", "web"}
    assert build.LOCK_COMMAND in LOCK.parent.joinpath("requirements.in").read_text()
    assert build.LOCK_COMMAND in (KIT / "README.md").read_text()
    install = " ".join(i.text for i in instructions("RUN"))
    assert "--require-hashes --no-deps --only-binary :all: -r /src/deploy/image/requirements.txt" in install


def _build_module():  # type: ignore[no-untyped-def]
    import importlib.util
    from .kube import KIT
    spec = importlib.util.spec_from_file_location("kit_build_image", KIT / "build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _fresh_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)

"""Honest activity and waiting on a real NVIDIA GPU (Hopper or later): allsmi beside
``nvidia-smi dmon --gpm-metrics``. The evidence behind docs/hardware-validation.md's activity
section.

Run on a machine with an NVIDIA driver, PyTorch and allsmi installed::

    python benchmarks/nvidia_activity.py --out DIR [--seconds 12] [--gpu 0]

One ``allsmi serve --processes --interval 1`` runs throughout. Each phase starts a PyTorch
process on the GPU doing one thing, lets it settle, then for ``--seconds`` reads at once
``nvidia-smi dmon -s u --gpm-metrics 2,3,5,10,20,21,60,61`` (one line a second) and allsmi's
live snapshot (``/api/v1/snapshot``, once a second), and stops the process:

* ``idle``: nothing on the GPU;
* ``one warp``: ``torch.cuda._sleep`` kernels back to back, one thread of one block: the
  headline utilization reads about 100 %, the SMs are almost all idle;
* ``matrix products``: bf16 8192 x 8192 products back to back (tensor cores);
* ``sleeping holder``: 1 GiB allocated, then ``time.sleep`` (allocated, unused: ``nothing``);
* ``host-bound holder``: 1 GiB allocated, a Python loop spinning a core (``host``);
* ``reading holder``: 1 GiB allocated, reading a file from disk (its pages dropped from the
  cache after each pass, so that the disk is read) a mebibyte every 10 ms (``input``).

The waits of the GPU-bound processes synchronize through blocking CUDA events, so that their
host thread sleeps while the GPU works (a spin-waiting ``synchronize`` would make the holder
look host-bound, which is what it would be).

It writes ``DIR/activity.md`` (per phase: each GPM metric's median from dmon and from allsmi,
the headline utilization, and the reasons allsmi gave the holder with their evidence) and
``DIR/activity.json`` (every dmon line and every snapshot's device and waiting entries).
Nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nvidia_hardware import stop  # noqa: E402  (benchmarks/nvidia_hardware.py)

#: GPM metric id -> (dmon's column as printed, allsmi's field, scale from allsmi's unit to dmon's)
METRICS: dict[int, tuple[str, float]] = {
    2: ("compute_active_percent", 1.0), 3: ("sm_occupancy_percent", 1.0),
    5: ("tensor_active_percent", 1.0), 10: ("memory_bandwidth_percent", 1.0),
    20: ("pcie_tx_bytes_per_second", 2**-20), 21: ("pcie_rx_bytes_per_second", 2**-20),
    60: ("interconnect_rx_bytes_per_second", 2**-20), 61: ("interconnect_tx_bytes_per_second", 2**-20),
}
HOLD = "import sys, time, torch\nx = torch.empty(1 << 28, device='cuda')\ntorch.cuda.synchronize()\n"
PHASES: tuple[tuple[str, str | None, str | None], ...] = (
    ("idle", None, None),
    ("one warp", HOLD + (
        "ev = torch.cuda.Event(blocking=True)\nprint('ready', flush=True)\n"
        "while True:\n"
        "    for _ in range(10):\n"
        "        torch.cuda._sleep(50_000_000)\n"
        "    ev.record(); ev.synchronize()\n"), "nothing"),
    ("matrix products", HOLD + (
        "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\nb = a.clone()\n"
        "ev = torch.cuda.Event(blocking=True)\nprint('ready', flush=True)\n"
        "while True:\n"
        "    for _ in range(20):\n"
        "        c = a @ b\n"
        "    ev.record(); ev.synchronize()\n"), "computing"),
    ("sleeping holder", HOLD + "print('ready', flush=True)\ntime.sleep(3600)\n", "nothing"),
    ("host-bound holder", HOLD + "print('ready', flush=True)\nn = 0\nwhile True:\n    n += 1\n",
     "host"),
    ("reading holder", HOLD + (
        "import os, mmap\npath = sys.argv[1]\n"
        "with open(path, 'wb') as f:\n"
        "    for _ in range(256):\n"
        "        f.write(os.urandom(1 << 20))\n"
        "    f.flush(); os.fsync(f.fileno())\n"
        "fd = os.open(path, os.O_RDONLY)\n"
        "os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    offset = 0\n"
        "    while os.pread(fd, 1 << 20, offset):\n"
        "        offset += 1 << 20\n"
        "        time.sleep(0.01)\n"
        "    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"), "input"),
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fetch_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return json.loads(reply.read())


def start_serve(port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen([sys.executable, "-m", "allsmi", "serve", "--processes", "--interval",
                               "1", "--listen", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if any(dev.get("uuid") for dev in fetch_json(f"http://127.0.0.1:{port}/api/v1/snapshot")["devices"]):
                return server
        except OSError:
            pass
        time.sleep(0.5)
    server.kill()
    raise RuntimeError("allsmi serve did not answer within 60 s")


def dmon(gpu: int, seconds: int) -> tuple[list[str], list[dict[str, str]]]:
    """``nvidia-smi dmon`` with the GPM metrics (and the headline ``sm`` where this driver takes
    ``-s u`` beside them): its raw lines and one dict per data line, by the header's names."""
    ids = ",".join(str(i) for i in METRICS)
    for extra in (["-s", "u"], []):
        argv = ["nvidia-smi", "dmon", "-i", str(gpu), *extra, "--gpm-metrics", ids, "-d", "1",
                "-c", str(seconds)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30, check=False)
        lines = done.stdout.splitlines()
        if done.returncode == 0 and any(not line.startswith("#") for line in lines):
            break
    else:
        raise RuntimeError(f"nvidia-smi dmon failed ({done.returncode}): {done.stdout[-500:]} {done.stderr[-500:]}")
    header = next(line.lstrip("#").split() for line in lines if line.startswith("#"))
    rows = [dict(zip(header, line.split())) for line in lines if line.strip() and not line.startswith("#")]
    return [" ".join(argv), *lines], rows


def poll(port: int, gpu_uuid: str, seconds: float, into: list[dict[str, Any]]) -> None:
    """allsmi's snapshot of ``gpu_uuid`` once a second (each new timestamp once)."""
    end = time.monotonic() + seconds
    last = None
    while time.monotonic() < end:
        snap = fetch_json(f"http://127.0.0.1:{port}/api/v1/snapshot")
        for dev in snap["devices"]:
            if dev.get("uuid") == gpu_uuid and snap["timestamp"] != last:
                last = snap["timestamp"]
                into.append({"timestamp": snap["timestamp"], **dev})
        time.sleep(0.5)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None  # "-": no value


def phase_table(rows: list[dict[str, str]], ours: list[dict[str, Any]]) -> list[str]:
    """One line per metric: dmon's median beside allsmi's (each over the phase)."""
    lines = ["| metric | dmon column | dmon median | allsmi field | allsmi median |",
             "|---|---|---:|---|---:|"]
    columns = [c for c in (rows[0] if rows else {}) if c not in ("gpu", "Idx")]
    gpm_columns = columns[-len(METRICS):]  # dmon prints the GPM metrics last, in the order asked
    for (metric, (field, scale)), column in zip(METRICS.items(), gpm_columns or [None] * len(METRICS)):
        theirs = median([v for v in (number(r.get(column)) for r in rows) if v is not None]) if column else None
        mine = median([dev[field] * scale for dev in ours if dev.get(field) is not None])
        lines.append(f"| {metric} | {column or '(none)'} | {fmt(theirs)} | {field} | {fmt(mine)} |")
    head_theirs = median([v for v in (number(r.get("sm")) for r in rows) if v is not None])
    head_mine = median([dev["utilization_percent"] for dev in ours if dev.get("utilization_percent") is not None])
    lines.append(f"| headline | sm | {fmt(head_theirs)} | utilization_percent | {fmt(head_mine)} |")
    return lines


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def run_phase(name: str, code: str | None, expected: str | None, port: int, gpu: int, uuid: str,
              seconds: int, scratch: Path) -> tuple[list[str], dict[str, Any]]:
    proc = None
    if code is not None:
        proc = subprocess.Popen([sys.executable, "-c", code, str(scratch / "input.bin")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)})
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "ready" not in line:
            proc.kill()
            raise RuntimeError(f"{name}: the load did not start: {proc.stderr.read() if proc.stderr else ''}"[-2000:])
    try:
        time.sleep(4)  # two cycles of allsmi see the process; dmon's first interval is whole
        ours: list[dict[str, Any]] = []
        poller = threading.Thread(target=poll, args=(port, uuid, seconds, ours))
        poller.start()
        raw, rows = dmon(gpu, seconds)
        poller.join()
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    reasons: Counter[str] = Counter()
    evidence: dict[str, str] = {}
    for dev in ours:
        for wait in dev.get("waiting") or ():
            reasons[wait["reason"]] += 1
            evidence[wait["reason"]] = wait.get("evidence", "")
    lines = [f"## {name}", "", *phase_table(rows, ours), ""]
    if expected is not None:
        seen = ", ".join(f"{r} x{n}" for r, n in reasons.most_common()) or "(no holder seen)"
        lines += [f"Reasons given to the holder, one per snapshot: {seen} (expected: `{expected}`)", ""]
        lines += [f"- `{r}`: {e}" for r, e in evidence.items()]
        lines.append("")
    return lines, {"phase": name, "dmon": raw, "allsmi": ours, "reasons": dict(reasons)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=int, default=12)
    parser.add_argument("--gpu", type=int, default=0)
    args = parser.parse_args()
    args.out = args.out.resolve()
    if shutil.which("nvidia-smi") is None:  # no driver here: nothing to compare, say so at once
        raise SystemExit("nvidia_activity: needs an NVIDIA GPU and its driver (nvidia-smi not found)")
    args.out.mkdir(parents=True, exist_ok=True)
    # ``python -m allsmi`` must find the installed allsmi, not a checkout's source tree (whose
    # backends are packaged from its top-level backends/ folder): run from outside it.
    os.chdir(tempfile.gettempdir())
    port = free_port()
    server = start_serve(port)
    report = ["# allsmi's activity and waiting on a real GPU, beside nvidia-smi dmon", ""]
    raw: list[dict[str, Any]] = []
    try:
        devices = [d for d in fetch_json(f"http://127.0.0.1:{port}/api/v1/snapshot")["devices"]
                   if d.get("vendor") == "nvidia" and d.get("index") == args.gpu and not d.get("parent")]
        uuid = devices[0]["uuid"]
        report += [f"GPU {args.gpu}: {devices[0].get('name')} ({uuid}), driver "
                   f"{devices[0].get('driver_version')}; {args.seconds} s per phase, medians.", ""]
        with tempfile.TemporaryDirectory(prefix="allsmi-activity-", dir=str(Path.home())) as scratch:
            for name, code, expected in PHASES:
                started = time.monotonic()
                try:
                    lines, record = run_phase(name, code, expected, port, args.gpu, uuid,
                                              args.seconds, Path(scratch))
                except Exception as exc:  # noqa: BLE001  (one phase failing leaves the others)
                    lines, record = [f"## {name}", "", f"FAILED: {exc!r}"[:3000], ""], {"phase": name}
                report += lines
                raw.append(record)
                (args.out / "activity.md").write_text("\n".join(report))
                print(f"{name}: {time.monotonic() - started:.1f} s", flush=True)
    finally:
        stop(server)
        (args.out / "activity.json").write_text(json.dumps(raw, indent=1, default=str))
    print(json.dumps({"report": str(args.out / "activity.md")}))


if __name__ == "__main__":
    main()

"""Third-party backends that break the contract: each failure stays that backend's, is said in
its status, and costs the others nothing; what the schema keeps of a bad sample is ``None`` or
left out, never invented (the runner and the schema boundary, whoever made the sample)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from allsmi.collection import registry
from allsmi.backend_api import Backend, ProbeResult
from allsmi.collection.backendrunner import BackendRunner
from allsmi.support.distinfo import EntryPoint
from allsmi.collection.collector import Collector
from allsmi.output import to_json
from allsmi.schema import DeviceSample, ProcessSample, derive

from .pluginsite import plugin_site


def _dev(ident: str, backend: str, **kw: Any) -> DeviceSample:
    return DeviceSample(id=ident, vendor="zz", kind="gpu", backend=backend, health="ok", **kw)


class _Plugin(Backend):
    vendor = "zz"

    def __init__(self, name: str, answer: Any, probe: Any = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.name = name  # type: ignore[misc]
        self._answer = answer
        self._probe = ProbeResult(True) if probe is None else probe

    def probe(self) -> ProbeResult:
        return self._probe  # type: ignore[no-any-return]

    def open(self) -> None:
        pass

    def sample(self) -> Any:
        return self._answer() if callable(self._answer) else self._answer


def _cycle(*backends: Backend) -> Any:
    with Collector(list(backends), interval_seconds=1, timeout_seconds=2) as collector:
        return collector.collect_once()


def test_items_that_are_not_device_samples_are_left_out_and_said() -> None:
    good = _Plugin("zzgood", [_dev("zz:0", "zzgood")])
    bad = _Plugin("zzbad", [_dev("zz:1", "zzbad"), "garbage", 42, None])
    snap = _cycle(good, bad)
    assert [d.id for d in snap.devices] == ["zz:0", "zz:1"]
    status = {s.name: s for s in snap.backends}["zzbad"]
    assert status.status == "ok" and "3 item(s) that are not a DeviceSample" in status.message
    json.loads(to_json(snap))


def test_what_sample_returns_none_generator_or_not_a_list_is_said_or_taken() -> None:
    snap = _cycle(_Plugin("zzgood", [_dev("zz:0", "zzgood")]), _Plugin("zznone", None),
                  _Plugin("zzint", 42), _Plugin("zzstr", "zz:9"),
                  _Plugin("zzgen", lambda: (_dev(f"zz:g{i}", "zzgen") for i in range(2))))
    said = {s.name: (s.status, s.message) for s in snap.backends}
    assert said["zznone"] == ("error", "sample() returned NoneType, not a list of DeviceSample")
    assert said["zzint"] == ("error", "sample() returned int, not a list of DeviceSample")
    assert said["zzstr"] == ("error", "sample() returned str, not a list of DeviceSample")
    assert [d.id for d in snap.devices] == ["zz:0", "zz:g0", "zz:g1"]


def test_a_probe_answer_that_is_not_a_probe_result_is_an_error_naming_it() -> None:
    snap = _cycle(_Plugin("zzgood", [_dev("zz:0", "zzgood")]),
                  _Plugin("zzprobe", [_dev("zz:1", "zzprobe")], probe="yes"))
    said = {s.name: (s.status, s.message) for s in snap.backends}
    assert said["zzprobe"] == ("error", "probe() returned str, not a ProbeResult")
    assert [d.id for d in snap.devices] == ["zz:0"]


def test_a_device_id_reported_twice_is_kept_once_and_each_clash_is_said() -> None:
    first = _Plugin("zza", [_dev("zz:0", "zza"), _dev("zz:0", "zza"), _dev("zz:1", "zza")])
    nameless = _dev(None, "zzb")  # type: ignore[arg-type]
    second = _Plugin("zzb", [_dev("zz:1", "zzb"), _dev("zz:2", "zzb"), nameless])
    snap = _cycle(first, second)
    assert [(d.id, d.backend) for d in snap.devices] == [("zz:0", "zza"), ("zz:1", "zza"),
                                                          ("zz:2", "zzb")]
    said = {s.name: s.message for s in snap.backends}
    assert said["zza"] == "left out: device id 'zz:0' reported twice"
    assert said["zzb"] == ("left out: device id 'zz:1' already reported by backend zza, "
                           "a device without an id")


def test_wrong_types_in_a_sample_are_unknown_or_left_out_however_it_is_made() -> None:
    procs = [ProcessSample(pid=0), ProcessSample(pid=-3), ProcessSample(pid="12"),  # type: ignore[arg-type]
             ProcessSample(pid=True), "not a process", ProcessSample(pid=7, memory_bytes=float("nan"))]
    dev = DeviceSample(id=None, vendor=None, kind="gpu", backend="zz", index="3",  # type: ignore[arg-type]
                       partition_share=float("nan"), health="bogus", processes=procs,  # type: ignore[arg-type]
                       details={"x": float("nan"), "o": object(), "d": {"a": 1}, "i": _Index()})
    assert (dev.id, dev.vendor, dev.index, dev.partition_share, dev.health) == ("", "", None, None,
                                                                             "unknown")
    assert dev.processes == (ProcessSample(pid=7),)
    assert dev.details == {"x": None, "o": None, "d": None, "i": 5}
    for index in (True, -1, 2**40, 1.0):
        assert DeviceSample(id="a", vendor="v", kind="gpu", backend="b", index=index).index is None
    for share in (0, 0.0, 1.5, float("inf"), True, "0.5"):
        assert DeviceSample(id="a", vendor="v", kind="gpu", backend="b",
                            partition_share=share).partition_share is None
    one = DeviceSample(id="a", vendor="v", kind="gpu", backend="b", partition_share=1)
    assert one.partition_share == 1.0
    assert DeviceSample(id="a", vendor="v", kind="gpu", backend="b", processes=7).processes is None
    huge = DeviceSample(id="a", vendor="v", kind="gpu", backend="b", memory_total_bytes=10**30,
                        memory_used_bytes=2**63 - 1, processes=(ProcessSample(1, memory_bytes=2**64),))
    assert (huge.memory_total_bytes, huge.memory_used_bytes) == (None, 2**63 - 1)  # (SQLite's int64)
    assert huge.processes == (ProcessSample(1),)
    assert derive(huge, memory_used_bytes=2**70).memory_used_bytes is None
    good = DeviceSample(id="a", vendor="v", kind="gpu", backend="b", index=2, partition_share=0.5)
    changed = derive(good, index="3", partition_share=float("nan"), health="bogus", id=None)
    assert (changed.index, changed.partition_share, changed.health, changed.id) == (None, None,
                                                                                    "unknown", "")


class _Index:
    def __index__(self) -> int:
        return 5


class _Sticky(Backend):
    """A backend whose close() blocks until released."""

    name = "zzsticky"
    release = threading.Event()

    def probe(self) -> ProbeResult:
        return ProbeResult(True)

    def open(self) -> None:
        pass

    def sample(self) -> list[DeviceSample]:
        return []

    def close(self) -> None:
        self.release.wait(5)


def test_a_close_that_hangs_is_said_to_be_stuck_in_close(caplog: Any) -> None:
    runner = BackendRunner(_Sticky(), timeout=1.0)
    assert runner.start_call()
    assert runner.wait(10**9) is not None
    try:
        with caplog.at_level(logging.WARNING, "allsmi.collection.backendrunner"):
            runner.close(grace=0.1)
        assert "stuck in close" in caplog.text, caplog.text
    finally:
        _Sticky.release.set()


def test_a_plug_in_named_as_another_backend_is_said_not_silently_dropped(tmp_path: Path,
                                                                        monkeypatch: Any) -> None:
    (tmp_path / "zzclash_one.py").write_text(textwrap.dedent(PLUGINS))
    monkeypatch.syspath_prepend(str(tmp_path))
    found = [EntryPoint("zzclash", "zzclash_one:Good", registry.GROUP),
             EntryPoint("zzclash", "zzclash_two:Other", registry.GROUP)]
    monkeypatch.setattr(registry.distinfo, "entry_points", lambda group: found)
    backends = registry.instantiate(["zzclash"])
    assert [b.display_name for b in backends] == ["zzgood", "zzclash (zzclash_two:Other)"]
    snap = _cycle(*backends)
    said = {s.name: (s.status, s.message) for s in snap.backends}
    assert said["zzclash (zzclash_two:Other)"] == (
        "error", "not loaded: the backend name 'zzclash' is taken by zzclash_one:Good")
    assert [d.id for d in snap.devices] == ["zz:0"]


PLUGINS = '''
    from allsmi.backend_api import Backend, ProbeResult
    from allsmi.schema import DeviceSample

    class Base(Backend):
        vendor = "zz"
        def probe(self): return ProbeResult(True)
        def open(self): pass
        def sample(self): return []

    class Good(Base):
        name = "zzgood"
        def sample(self): return [DeviceSample(id="zz:0", vendor="zz", kind="gpu", backend="zzgood")]

    class Garbage(Base):
        name = "zzgarbage"
        def sample(self):
            return [DeviceSample(id="zz:0", vendor="zz", kind="gpu", backend="zzgarbage"), "x",
                    DeviceSample(id="zz:\\x1b[31m1", vendor="zz", kind="gpu", backend="zzgarbage",
                                 partition_share=float("nan"), processes=[1])]

    class Raises(Base):
        name = "zzraises"
        def sample(self):
            raise ValueError("boom \\x1b[2J")
'''


def _plugin_site(tmp_path: Path, entry_points: str) -> tuple[dict[str, str], Path]:
    """The ``zzplug`` distribution (``entry_points`` and the :data:`PLUGINS` module) for a
    subprocess: its environment and site folder."""
    return plugin_site(tmp_path, "zzplug", entry_points, {"zzplug": PLUGINS})


def test_misbehaving_plug_ins_from_their_entry_points_leave_the_others_whole(tmp_path: Path) -> None:
    """``allsmi snapshot`` with plug-ins registered in a dist-info: the JSON is whole, every
    failure is a status, no traceback (hangs: tests/test_collector_close.py)."""
    env, site = _plugin_site(tmp_path, "[allsmi.backends]\nzzgood = zzplug:Good\n"
                             "zzgarbage = zzplug:Garbage\nzznotclass = zzplug:DeviceSample\n"
                             "zzsyntax = zzsyntax:X\nzzraises = zzplug:Raises\n")
    (site / "zzsyntax.py").write_text("def broken(:\n")
    config = tmp_path / "config.toml"
    config.write_text('[backends]\nenabled = ["zzgood", "zzgarbage", "zznotclass", "zzsyntax", '
                      '"zzraises"]\n')
    result = subprocess.run([sys.executable, "-m", "allsmi", "snapshot", "--format", "json",
                             "--timeout", "0.3", "--config", str(config)],
                            env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    # a plug-in's bug: one clean line naming where it was raised (its status says the rest)
    (line,) = [ln for ln in result.stderr.splitlines() if "zzraises" in ln]
    assert line.startswith("backend zzraises failed in sample(): ValueError: boom "), line
    assert "\x1b" not in result.stderr and "zzplug.py:" in line and "in sample)" in line
    doc = json.loads(result.stdout)
    said = {b["name"]: (b["status"], b["message"]) for b in doc["backends"]}
    assert said["zzgood"] == ("ok", ""), said
    assert said["zzgarbage"][0] == "ok" and "not a DeviceSample" in said["zzgarbage"][1]
    assert "already reported by backend zzgood" in said["zzgarbage"][1]  # (enabled's order)
    assert said["zznotclass"][0] == said["zzsyntax"][0] == said["zzraises"][0] == "error"
    devices = {d["id"]: d for d in doc["devices"]}
    assert set(devices) == {"zz:0", "zz: [31m1"}
    assert devices["zz: [31m1"]["partition_share"] is None
    assert devices["zz: [31m1"]["processes"] == []


def test_a_plug_in_that_raises_each_cycle_is_logged_once_its_traceback_at_debug(
        caplog: Any) -> None:
    """A bug that fails every cycle (``allsmi serve``, once a second) is one line, not a
    traceback a second on stderr; its status says it every cycle."""
    def boom() -> Any:
        raise KeyError("gone")
    with caplog.at_level(logging.DEBUG, logger="allsmi.collection.backendrunner"), \
            Collector([_Plugin("zzboom", boom)], interval_seconds=1, timeout_seconds=2) as c:
        said = {(s.status, s.message) for _ in range(5) for s in c.collect_once().backends}
    assert said == {("error", "internal error: KeyError: 'gone'")}
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage().split(" (raised at ")[0] for r in errors] == [
        "backend zzboom failed in sample(): KeyError: 'gone'"]
    assert errors[0].exc_info is None and "test_plugin_misbehaving.py:" in errors[0].getMessage()
    assert any(r.exc_info for r in caplog.records if r.levelno == logging.DEBUG)  # the traceback


def test_allsmi_backends_lists_a_plug_in_whose_name_is_taken(tmp_path: Path) -> None:
    """``allsmi backends`` lists every registered entry point: one that is not loaded because
    another registered its name first is shown, saying so, never left out."""
    env, _ = _plugin_site(tmp_path, "[allsmi.backends]\nnvidia = zzplug:Good\n")
    out = subprocess.run([sys.executable, "-m", "allsmi", "backends", "--json"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    rows = [r for r in json.loads(out.stdout) if r["name"] == "nvidia"]
    assert len(rows) == 2 and sum(1 for r in rows if r.get("not_loaded")) == 1, rows
    (left,) = [r for r in rows if r.get("not_loaded")]
    (kept,) = [r for r in rows if not r.get("not_loaded")]
    assert left["not_loaded"] == f"the name is taken by {kept['target']}"
    table = subprocess.run([sys.executable, "-m", "allsmi", "backends"], env=env,
                           capture_output=True, text=True, timeout=30).stdout
    assert "(not loaded: the name is taken by" in table


def test_allsmi_backends_shows_a_control_character_in_an_entry_point_as_its_escape(
        tmp_path: Path) -> None:
    """What an installed package registered reaches the terminal as text, never as a control
    sequence (an ESC in an entry point's name or target)."""
    env, _ = _plugin_site(tmp_path, "[allsmi.backends]\nzz\x1b[2Jesc = zzplug:Go\x1bod\n")
    table = subprocess.run([sys.executable, "-m", "allsmi", "backends"], env=env,
                           capture_output=True, text=True, timeout=30)
    assert table.returncode == 0, table.stderr
    assert "\x1b" not in table.stdout
    assert "zz\\x1b[2Jesc" in table.stdout and "zzplug:Go\\x1bod" in table.stdout


def test_serve_logs_a_plug_in_s_bug_as_one_allsmi_error_line(tmp_path: Path) -> None:
    """``allsmi serve``'s stderr (a daemon's log) says what each line is, as ``record``'s does:
    ``allsmi: ERROR: backend ... failed in sample(): ...``, once, while the metrics are served."""
    import urllib.request

    from .prometheus_server import free_port
    env, _ = _plugin_site(tmp_path, "[allsmi.backends]\nzzgood = zzplug:Good\n"
                          "zzraises = zzplug:Raises\n")
    (tmp_path / "c.toml").write_text('[backends]\nenabled = ["zzgood", "zzraises"]\n')
    port = free_port()
    log = tmp_path / "stderr.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "allsmi", "serve", "--config",
                                 str(tmp_path / "c.toml"), "--listen", f"127.0.0.1:{port}",
                                 "--interval", "0.2"], env=env, stdout=subprocess.DEVNULL,
                                stderr=err, stdin=subprocess.DEVNULL)

    def last_collect() -> float:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                body = r.read().decode()
        except OSError:
            return 0.0
        return max((float(line.split()[-1]) for line in body.splitlines()
                    if line.startswith("allsmi_last_collect_timestamp_seconds")), default=0.0)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and b"zzraises" not in log.read_bytes():
            time.sleep(0.05)
        first = 0.0
        while time.monotonic() < deadline and not first:
            first = last_collect()
        # five more cycles (0.2 s each) that fail alike: still one line
        while time.monotonic() < deadline and last_collect() < first + 1.0:
            time.sleep(0.05)
        assert last_collect() >= first + 1.0
    finally:
        proc.terminate()
        proc.wait(10)
    lines = [ln for ln in log.read_text().splitlines() if "zzraises" in ln]
    assert len(lines) == 1, lines
    assert lines[0].startswith("allsmi: ERROR: backend zzraises failed in sample(): ValueError"), lines

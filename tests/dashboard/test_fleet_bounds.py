"""The dashboard at fleet scale and under hostile hosts: memory bounded by configuration, every
number from Prometheus checked, big answers cut with a note, no key blocking the UI."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from typing import Any

import pytest

from allsmi.dashboard.screen.app import DashboardApp
from allsmi.dashboard.state.model import GONE_GRACE_SECONDS, MAX_GONE_DEVICES
from allsmi.dashboard.sources.prometheus import PrometheusSource
from allsmi.dashboard.sources import StaticSource
from allsmi.schema import Snapshot

from .fixtures import scaled
from .hostile import Handler, Server, json_body

pytestmark = pytest.mark.timeout(300)


def _churned(base: Snapshot, frame: int, copies: int) -> Snapshot:
    """``base`` x ``copies`` under device ids never used before, one second after frame - 1."""
    snap = scaled(base, copies)
    devices = tuple(replace(d, id=f"f{frame}-{d.id}", parent=None if d.parent is None else f"f{frame}-{d.parent}")
                    for d in snap.devices)
    return replace(snap, devices=devices, timestamp=base.timestamp + dt.timedelta(seconds=frame))


async def test_a_host_churning_device_ids_keeps_memory_bounded(sim_snapshots: list[Snapshot]) -> None:
    now = [1000.0]
    frames = [_churned(sim_snapshots[0], f, 12) for f in range(24)]
    per_frame = len(frames[0].devices)
    assert per_frame * len(frames) > 2 * (MAX_GONE_DEVICES + per_frame)
    source = StaticSource.of(frames, clock=lambda: now[0], interval=1.0)
    app = DashboardApp(source, clock=lambda: now[0])
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in frames[1:]:
            now[0] += 1.0
            source.advance()
            app.poll()
            assert len(app.history) <= per_frame + MAX_GONE_DEVICES
            assert len(app.energy._joules) <= per_frame + MAX_GONE_DEVICES
        await pilot.press("i")  # the idle view's windows are per host and bounded by points
        await pilot.press("c")
        last = _churned(sim_snapshots[0], 99, 1)
        for step in range(2):  # past the grace only the devices shown are kept
            now[0] += GONE_GRACE_SECONDS + 1
            source.frames.append({last.host.hostname: replace(
                last, timestamp=last.timestamp + dt.timedelta(seconds=step))})
            source.advance()
            app.poll()
        await pilot.pause()
        assert len(app.history) == len(sim_snapshots[0].devices)
        assert set(app.energy._joules) <= {r.key for r in app.all_refs()}


def _vector(samples: list[tuple[dict[str, str], float]]) -> tuple[float, list[dict[str, Any]]]:
    return 1000.0, [{"metric": m, "value": [1000.0, repr(v)]} for m, v in samples]


def test_prometheus_instances_that_left_are_dropped_after_the_grace() -> None:
    now = [0.0]
    round_ = [0]

    def query(promql: str, timeout: float) -> tuple[float, list[dict[str, Any]]]:
        instance = f"node-{round_[0]}:9477"  # a new instance on every refresh
        if promql.startswith("count by (instance)"):
            return _vector([({"instance": instance}, 1)])
        if "allsmi_device_info" in promql and promql.startswith("{"):
            return _vector([({"__name__": "allsmi_device_info", "instance": instance, "uuid": "GPU-1",
                              "vendor": "nvidia", "index": "0", "model": "H100"}, 1)])
        return _vector([])

    source = PrometheusSource("http://127.0.0.1:9", query=query, clock=lambda: now[0], interval=1.0)
    for _ in range(50):
        source.refresh(lambda: False)
        round_[0] += 1
        now[0] += 10.0
    kept = source.hosts()
    assert len(kept) <= GONE_GRACE_SECONDS / 10 + 2, [h.key for h in kept]
    assert kept[-1].key == "node-49:9477" and kept[-1].error is None


# -- a hostile Prometheus over loopback ------------------------------------------------------

HOSTILE_VALUES = ("1e308", "-1", "NaN", "+Inf", "-Inf", "123456789012345678901234567890", "-1e308")


class FakePrometheus:
    """Answers the instant queries the fleet view asks with ``value`` in every sample; ``devices``
    per instance makes the fleet fit the device budget (every device) or not (totals only)."""

    def __init__(self, value: str, devices: int = 2, instances: int = 2) -> None:
        self.value, self.devices, self.instances = value, devices, instances
        self.server = Server(self.respond)
        self.url = self.server.url

    def _sample(self, labels: dict[str, str], value: str | None = None) -> dict[str, Any]:
        return {"metric": labels, "value": [1000.0, self.value if value is None else value]}

    def answer(self, promql: str) -> list[dict[str, Any]]:
        from allsmi.dashboard.sources.prometheus import DEVICE_INFO, DEVICE_UP, PROCESS_MEMORY, VALUE_METRICS
        from allsmi.dashboard.sources.promsummary import summary_queries
        instances = [f"node-{i}:9477" for i in range(self.instances)]
        uuids = [f"GPU-{d}" for d in range(self.devices)]
        if promql.startswith("count by (instance)"):
            return [self._sample({"instance": i}, str(self.devices)) for i in instances]
        if promql.startswith("timestamp(") or promql == "up":
            return [self._sample({"instance": i}) for i in instances]
        if "label_replace" in promql or "allsmi_devices:totals" in promql:
            return [self._sample({"instance": i, "resource_group": "train", "vendor": "nvidia",
                                  "allsmi_total": name})
                    for i in instances for name in summary_queries("instance")]
        if promql.startswith("max by"):
            return [self._sample({"__name__": name, "instance": i, "uuid": u})
                    for i in instances for u in uuids for name in (DEVICE_UP, *VALUE_METRICS)]
        if PROCESS_MEMORY in promql:
            return [self._sample({"__name__": PROCESS_MEMORY, "instance": i, "uuid": u, "pid": pid,
                                  "user": "alice", "command": "python train.py"})
                    for i in instances for u in uuids for pid in ("42", "-1", "99999999999999999999")]
        if DEVICE_INFO in promql:
            return [self._sample({"__name__": DEVICE_INFO, "instance": i, "uuid": u, "vendor": "nvidia",
                                  "model": "H100", "index": index, "resource_group": "train"}, "1")
                    for i in instances for u, index in zip(uuids, ("0", "123456789012345678901234567890"))]
        return []

    def respond(self, handler: Handler) -> None:
        import urllib.parse
        promql = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query).get("query", [""])[0]
        doc = {"status": "success", "data": {"resultType": "vector", "result": self.answer(promql)}}
        handler.send_body(json_body(doc))

    def close(self) -> None:
        self.server.close()


@pytest.mark.parametrize("every_device", [True, False], ids=["devices", "totals"])
@pytest.mark.parametrize("value", HOSTILE_VALUES)
async def test_hostile_numbers_from_prometheus_are_unknown_in_every_view(value: str, every_device: bool) -> None:
    from allsmi.schema.fields import ENERGY_FIELD, MEASUREMENTS
    from allsmi.snapshot_parse import MAX_INT
    fake = FakePrometheus(value, devices=2 if every_device else 5000)
    source = PrometheusSource(fake.url, interval=1.0, timeout=5.0)
    try:
        source.refresh(lambda: False)
        hosts = source.hosts()
        assert all(h.error is None for h in hosts), [h.error for h in hosts]
        if every_device:
            for host in hosts:
                assert host.snapshot is not None and len(host.snapshot.devices) == 2
                for dev in host.snapshot.devices:
                    for m in (*MEASUREMENTS, ENERGY_FIELD):  # every value within its declared range
                        got = getattr(dev, m.field)
                        assert got is None or ((m.minimum is None or got >= m.minimum) and got <= MAX_INT
                                               and (m.maximum is None or got <= m.maximum)), (m.field, got)
                    assert dev.index is None or dev.index < 2**31
                    for proc in dev.processes or ():
                        assert 0 <= proc.pid <= 2**32
                        assert proc.memory_bytes is None or 0 <= proc.memory_bytes <= MAX_INT
                if value in ("1e308", "-1", "-1e308"):
                    assert host.problems, "the values thrown away are named on the host's row"
        else:
            for host in hosts:
                totals = host.summary
                if totals is None:  # every total of this host was thrown away
                    continue
                for name in ("memory_used_bytes", "memory_total_bytes", "power_watts", "power_limit_watts"):
                    got = getattr(totals, name)
                    assert got is None or 0 <= got <= MAX_INT, (name, got)
                assert totals.utilization_percent is None or 0 <= totals.utilization_percent <= 100
        app = DashboardApp(source)
        async with app.run_test(size=(160, 50)) as pilot:
            for key in ("g", "g", "i", "i", "c", "enter", "p", "d", "g", "c"):
                await pilot.press(key)
                await pilot.pause()
                assert app.is_running, f"the app ended on {key!r}"
            assert app.return_code is None
    finally:
        fake.close()


class BigPrometheus(FakePrometheus):
    """One good instance with two devices and one that claims (``honest``) or hides 900,000:
    asked for every device anyway, it streams ``stream_mib`` MiB of device series."""

    def __init__(self, honest: bool, stream_mib: int = 40) -> None:
        super().__init__("50", devices=2, instances=1)
        self.honest, self.stream_mib = honest, stream_mib
        self.queries: list[str] = []

    def respond(self, handler: Handler) -> None:
        import urllib.parse
        promql = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query).get("query", [""])[0]
        self.queries.append(promql)
        if promql.startswith("count by (instance)"):
            result = self.answer(promql) + [self._sample({"instance": "big:9477"},
                                                         "900000" if self.honest else "2")]
        elif promql.startswith("{") and "allsmi_device_info" in promql and "big" not in promql:
            return self._stream(handler)
        else:
            result = self.answer(promql)
        handler.send_body(json_body({"status": "success", "data": {"resultType": "vector", "result": result}}))

    def _stream(self, handler: Handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.end_headers()
        handler.close_connection = True
        one = json.dumps({"metric": {"__name__": "allsmi_device_info", "instance": "big:9477",
                                     "uuid": "GPU-%08d", "model": "H100", "vendor": "nvidia"},
                          "value": [1000.0, "1"]}) + ","
        handler.wfile.write(b'{"status": "success", "data": {"resultType": "vector", "result": [')
        chunk = "".join(one % i for i in range(5000)).encode()
        for _ in range(self.stream_mib * 2**20 // len(chunk) + 1):
            handler.wfile.write(chunk)
        handler.wfile.write(b'{"metric": {}, "value": [1000.0, "1"]}]}}')


def _peak_rss_mib() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("honest", [True, False], ids=["counted", "hidden"])
async def test_a_huge_prometheus_answer_is_cut_and_the_screen_says_so(honest: bool) -> None:
    from .conftest import screen_text
    fake = BigPrometheus(honest)
    source = PrometheusSource(fake.url, interval=1.0, timeout=30.0)
    try:
        before = _peak_rss_mib()
        source.refresh(lambda: False)
        grown = _peak_rss_mib() - before
        assert grown < 200, f"one refresh grew the peak RSS by {grown:.0f} MiB"
        hosts = {h.key: h for h in source.hosts()}
        if honest:  # the node is left out of the device queries, its row says why
            assert any("instance!~" in q for q in fake.queries), fake.queries
            assert len(hosts["node-0:9477"].snapshot.devices) == 2
            assert "reports 900000 devices, more than 4096" in hosts["big:9477"].problems[0]
        else:  # the answer is cut at the byte cap: totals only, and the summary says so
            assert source.note is not None and "devices not shown" in source.note, source.note
            # Prometheus was reached: its answer was too big, which the note says as such
            assert "Prometheus answer larger than" in source.note, source.note
            assert "cannot reach" not in source.note, source.note
            assert not source.detailed
        app = DashboardApp(source)
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause()
            text = screen_text(app)
            assert ("more than 4096" if honest else "devices not shown") in text, text
    finally:
        fake.close()


def _many_processes(base: Snapshot, devices: int, per_device: int) -> Snapshot:
    from allsmi.schema import ProcessSample
    template = next(d for d in base.devices if d.parent is None and d.processes is not None)
    out = []
    for i in range(devices):
        procs = tuple(ProcessSample(pid=10_000 + i * per_device + p, user=f"user{p}",
                                    command=f"python train.py --rank {p}", memory_bytes=(i * 7919 + p) << 20)
                      for p in range(per_device))
        out.append(replace(template, id=f"GPU-{i}", uuid=f"GPU-{i}", index=i, parent=None, processes=procs))
    return replace(base, devices=tuple(out))


@pytest.mark.alone
async def test_p_on_a_huge_host_never_blocks_the_ui(sim_snapshots: list[Snapshot]) -> None:
    import time

    from allsmi.dashboard.views.panels import MAX_PROCESS_ROWS
    big = _many_processes(sim_snapshots[0], 4096, 30)
    source = StaticSource.of([big], interval=1.0)
    app = DashboardApp(source)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        # What `p` runs on the UI thread, to every device's processes and back, three times: the
        # best of the three (other work on a shared machine only ever adds to a timing).
        costs = []
        for _ in range(6):
            started = time.perf_counter()
            app.action_toggle_processes()
            costs.append(time.perf_counter() - started)
            await pilot.pause()
        slowest = max(min(costs[0::2]), min(costs[1::2]))
        app.action_toggle_processes()
        await pilot.pause()
        table = app.process_table
        assert 0 < table.row_count <= MAX_PROCESS_ROWS
        assert "biggest" in str(app.query_one("#processes").border_title)
        # The biggest process of the whole host is the first row.
        top = max((p for d in big.devices for p in d.processes or ()), key=lambda p: p.memory_bytes or 0)
        assert table.row_keys[0].endswith(f"\x1e{top.pid}")
        assert slowest < 0.1, f"`p` blocked the UI for {slowest * 1000:.0f} ms"


async def test_above_the_device_budget_the_summary_counts_hosts_that_answer() -> None:
    from .conftest import screen_text
    fake = FakePrometheus("50", devices=8, instances=6)
    source = PrometheusSource(fake.url, interval=1.0, timeout=10.0, device_budget=16)
    try:
        source.refresh(lambda: False)
        assert not source.detailed and len(source.hosts()) == 6
        app = DashboardApp(source)
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.pause()
            text = screen_text(app)
            assert "hosts 6/6 up" in text, text
    finally:
        fake.close()


async def test_long_indices_are_whole_bidi_text_is_visible_and_zero_has_no_sign(sim_snapshots: list[Snapshot]) -> None:
    from allsmi.schema import ProcessSample

    from .conftest import screen_text
    base = sim_snapshots[0]
    template = next(d for d in base.devices if d.parent is None and d.processes is not None)
    devices = tuple(replace(template, id=f"GPU-{i}", uuid=f"GPU-{i}", index=i, parent=None,
                            temperature_celsius=-0.0, power_watts=-0.0, name="H100 \u202eevil\u202c",
                            processes=(ProcessSample(pid=7, user="bob", command="python \u202eevil\u202c.py",
                                                     memory_bytes=1 << 30),))
                    for i in (4064, 4065))
    source = StaticSource.of([replace(base, devices=devices)], interval=1.0)
    app = DashboardApp(source)
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        # An index is never cut (4064 and 4065 once read "…64" and "…65", and "406" before).
        assert " 4064 " in text and " 4065 " in text, text
        assert "\u2026" + "64" not in text and "406 " not in text
        assert "\u202e" not in text and "\u202c" not in text
        assert "python \ufffdevil\ufffd.py" in text, text
        assert "-0°C" not in text and "-0 W" not in text and "-0/" not in text, text


async def test_the_cluster_processes_panel_names_host_and_device(sim_snapshots: list[Snapshot]) -> None:
    """A host name up to the device column's width is shown whole, before the device's name
    (``host:nvidia 0``, as the idle view names it); a longer one is cut before its ``:nvidia 0``,
    so that util and the command keep their room."""
    from .conftest import screen_text
    name = "good-host-long-name.example.com"
    snap = replace(sim_snapshots[0], host=replace(sim_snapshots[0].host, hostname=name))
    source = StaticSource([{"10.0.0.7:9477": snap}], cluster=True, interval=1.0)
    app = DashboardApp(source)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.press("enter")  # the host's devices
        await pilot.press("p")  # every device's processes
        await pilot.pause()
        text = screen_text(app)
        assert any(f"{name}:{d.vendor} {d.index}  " in text for d in snap.devices
                   if d.parent is None and d.processes), text
    from allsmi.dashboard.tables.process_table import device_label
    assert device_label("x" * 50, "nvidia 7/1/0") == "x" * 26 + "\u2026:nvidia 7/1/0"


class _DownSource(StaticSource):
    """One host that timed out and whose retry is due now (``retry_at`` in the past)."""

    def hosts(self):  # type: ignore[no-untyped-def]
        from allsmi.dashboard.sources import HostState
        return [HostState("10.0.0.9:9477", "10.0.0.9:9477", None, None, address="http://10.0.0.9:9477",
                          error="timed out after 5 s", retry_at=self.clock() - 2.0)]


async def test_a_host_whose_retry_runs_says_retrying(sim_snapshots: list[Snapshot]) -> None:
    from .conftest import screen_text
    app = DashboardApp(_DownSource.of(sim_snapshots[:1], cluster=True, clock=lambda: 1000.0),
                       clock=lambda: 1000.0)
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "timed out after 5 s (retrying)" in text and "retry in 0 s" not in text, text


async def test_q_on_the_help_screen_quits(sim_snapshots: list[Snapshot]) -> None:
    app = DashboardApp(StaticSource.of(sim_snapshots[:1]))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert app.screen.__class__.__name__ == "HelpScreen"
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0 and not app.is_running


async def test_a_long_problem_is_read_in_full_on_its_row(sim_snapshots: list[Snapshot]) -> None:
    from .conftest import screen_text
    reason = "HTTP 502 Bad Gateway: " + "upstream connect error or disconnect/reset before headers " * 3 + "END"
    # One healthy host (two hosts with one node's snapshot would be reported as counted twice).
    frames = [{"10.0.0.1:9477": sim_snapshots[0], "10.0.0.3:9477": reason}]
    app = DashboardApp(StaticSource(frames, cluster=True, interval=1.0))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        table = app.query_one("#host-table")
        assert table.cursor_row == 0  # the highlighted host is another: its detail line is not this
        text = screen_text(app)
        lines = text.splitlines()
        assert all(len(line.rstrip()) <= 160 for line in lines)
        table_part = text.split("Resource groups")[0]
        assert "END" in table_part and "upstream connect error" in table_part, text


class WorkloadPrometheus(FakePrometheus):
    """Two devices on one node; the first held by a pod, the second by a Slurm job."""

    def answer(self, promql: str) -> list[dict[str, Any]]:
        if "allsmi_device_workload_info" in promql and promql.startswith("{"):
            base = {"__name__": "allsmi_device_workload_info", "instance": "node-0:9477",
                    "resource_group": "train", "container": "", "user": ""}
            return [self._sample({**base, "uuid": "GPU-0", "source": "kubernetes", "namespace": "inference",
                                  "pod": "vllm-0", "job_id": ""}, "1"),
                    self._sample({**base, "uuid": "GPU-1", "source": "hpc-job", "namespace": "",
                                  "pod": "", "job_id": "4931180"}, "1"),
                    self._sample({**base, "uuid": "GPU-1", "source": "evil", "pod": "x"}, "1")]
        if "allsmi_process_memory_bytes" in promql:
            return []
        return super().answer(promql)


async def test_the_fleet_view_through_prometheus_shows_pods_and_jobs_holding_devices() -> None:
    from .conftest import screen_text
    fake = WorkloadPrometheus("0", devices=2, instances=1)
    source = PrometheusSource(fake.url, interval=1.0, timeout=10.0)
    try:
        source.refresh(lambda: False)
        devices = {d.id: d for d in source.hosts()[0].snapshot.devices}
        assert [w.pod for w in devices["GPU-0"].workloads] == ["vllm-0"]
        assert [w.job_id for w in devices["GPU-1"].workloads] == ["4931180"]  # an unknown source is left out
        app = DashboardApp(source)
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.press("enter")  # the node's devices; the first is selected
            await pilot.pause()
            assert "held by pod inference/vllm-0" in screen_text(app), screen_text(app)
            await pilot.press("slash", *"4931180", "enter")
            await pilot.pause()
            assert [r.device.id for r in app.shown] == ["GPU-1"]
            await pilot.press("escape", "i")  # the idle view: both holders are known, nothing unknown
            await pilot.pause()
            assert "Holders unknown" not in screen_text(app)
    finally:
        fake.close()


async def test_a_host_answering_one_poll_in_four_is_flapping_with_its_last_devices(sim_snapshots: list[Snapshot]) -> None:
    from allsmi.dashboard.sources.cluster import ClusterSource, FetchError

    from .conftest import screen_text
    now = [1000.0]
    calls = [0]

    def fetch(endpoint: Any, timeout: float) -> Snapshot:
        calls[0] += 1
        if calls[0] % 4 != 1:
            raise FetchError("timed out after 5 s")
        return sim_snapshots[0]

    source = ClusterSource(["127.0.0.1:9"], interval=2.0, clock=lambda: now[0], fetch=fetch)
    waits = []
    for _ in range(10):  # every refresh that finds the host due asks it once
        source.refresh(lambda: False)
        host = source.hosts()[0]
        if host.retry_at is not None:
            waits.append(host.retry_at - now[0])
            now[0] = host.retry_at
        else:
            now[0] += 2.0
    assert max(waits[3:]) <= 2.0, waits  # no growing back-off once it is known to flap
    host = source.hosts()[0]
    assert host.error is not None and host.answered is not None and host.snapshot is not None
    app = DashboardApp(source, clock=lambda: now[0])
    app.source.refresh = lambda cancelled: None  # type: ignore[method-assign]  # keep this state
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "flap" in text and "flapping: answered" in text and "devices from" in text, text
        assert "38" in text.split("flap")[1][:40], text  # its last devices are counted on its row

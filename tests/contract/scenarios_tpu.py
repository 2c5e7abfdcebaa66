"""Contract scenarios for the Google TPU backend: sysfs trees with TPU chips (``fixtures/tpu``)
and a real gRPC server on loopback serving libtpu's runtime metrics from a fixture."""

from __future__ import annotations


from allsmi.backends.tpu import TpuBackend

from .fixture_truth import json_value, total
from .scenario import FIXTURES, Scenario, ScenarioEnv, expect

TPU = FIXTURES / "tpu"
TRAINING, V3, ODD = "metrics-v5e-4-training.json", "metrics-v3-4-per-core-memory.json", "metrics-v5e-4-odd-values.json"
SEVENX = "metrics-7x-4-per-core.json"


def _gauge(fixture: str, metric: str, device_id: int):
    """libtpu's gauge ``metric`` for ``device_id`` (a chip, or a v3 TensorCore), in the unit its
    name ends with (``...memory.usage.bytes``, ``...dutycycle.percent``): the file the metrics
    server of :mod:`tests.contract.tpu_server` serves."""
    unit = {"bytes": "B", "percent": "%"}[metric.rsplit(".", 1)[1]]
    kind = "as_int" if unit == "B" else "as_double"
    return json_value(TPU / fixture, f"{metric}/device_id={device_id}/{kind}", unit)


USED, TOTAL, DUTY = ("tpu.runtime.hbm.memory.usage.bytes", "tpu.runtime.hbm.memory.total.bytes",
                     "tpu.runtime.tensorcore.dutycycle.percent")


def backend_for(env: ScenarioEnv, tree: str, metrics: str | None, mode: str = "answer",
                timeout_seconds: float = 5.0) -> TpuBackend:
    """Chips of ``tree``; a metrics server answering ``metrics`` (``None``: no server, the port
    refused: an idle host)."""
    from .tpu_server import TpuMetricsServer
    address = "127.0.0.1:1"
    if metrics is not None or mode != "answer":
        server = TpuMetricsServer(TPU / metrics if metrics else None, mode)
        env.on_teardown(server.close)
        address = server.address
    return TpuBackend(timeout_seconds=timeout_seconds,
                      options={"sysfs_root": str(TPU / tree / "sys"), "metrics_address": address})


SCENARIOS: list[Scenario] = [
    Scenario("no-hardware", lambda env: backend_for(env, "none", None), None),
    Scenario("no-hardware-no-sysfs", lambda env: backend_for(env, "no-such-tree", None), None),
    # HBM in use of the chip's HBM and its duty cycle, as libtpu's gauges say.
    Scenario("v5e-4-training", lambda env: backend_for(env, "v5e-4", TRAINING), 4, dict([
        expect("tpu:0000:00:04.0", index=0, name="Google TPU v5e", bus_id="0000:00:04.0", health="ok",
               utilization_percent=_gauge(TRAINING, DUTY, 0), compute_active_percent=_gauge(TRAINING, DUTY, 0),
               compute_active_source="engine_time",
               memory_used_bytes=_gauge(TRAINING, USED, 0), memory_total_bytes=_gauge(TRAINING, TOTAL, 0),
               power_watts=None, details__device_node="/dev/vfio/0", processes=None),
        expect("tpu:0000:00:07.0", index=3, utilization_percent=_gauge(TRAINING, DUTY, 3),
               memory_used_bytes=_gauge(TRAINING, USED, 3))])),
    # An idle host: no workload serves metrics. Chips listed, values and health unknown.
    Scenario("v5e-4-idle", lambda env: backend_for(env, "v5e-4", None), 4, dict([
        expect("tpu:0000:00:05.0", health="unknown", utilization_percent=None, memory_used_bytes=None,
               memory_total_bytes=None)])),
    # v3: two TensorCores per chip, memory per core (summed), duty cycle per chip.
    Scenario("v3-4-per-core", lambda env: backend_for(env, "v3-4", V3), 4, dict([
        expect("tpu:0000:00:04.0", name="Google TPU v3",
               memory_used_bytes=total(_gauge(V3, USED, 0), _gauge(V3, USED, 1)),
               memory_total_bytes=total(_gauge(V3, TOTAL, 0), _gauge(V3, TOTAL, 1)),
               utilization_percent=_gauge(V3, DUTY, 0), details__device_node="/dev/accel0"),
        expect("tpu:0000:00:07.0", memory_used_bytes=total(_gauge(V3, USED, 6), _gauge(V3, USED, 7)),
               utilization_percent=_gauge(V3, DUTY, 3))])),
    # 7x: one PCI function per TensorCore (04.0 and 04.1 are one chip, never two devices); memory
    # and duty cycle per TensorCore, summed and averaged over the chip's two.
    Scenario("7x-4-per-core", lambda env: backend_for(env, "7x-4", SEVENX), 4, dict([
        expect("tpu:0000:00:04.0", index=0, name="Google TPU7x", bus_id="0000:00:04.0", health="ok",
               memory_used_bytes=total(_gauge(SEVENX, USED, 0), _gauge(SEVENX, USED, 1)),
               memory_total_bytes=total(_gauge(SEVENX, TOTAL, 0), _gauge(SEVENX, TOTAL, 1)),
               utilization_percent=92.0, details__device_node="/dev/vfio/0",
               details__pci_functions=("0000:00:04.0", "0000:00:04.1")),
        expect("tpu:0000:00:07.0", index=3, utilization_percent=0.0,
               memory_used_bytes=total(_gauge(SEVENX, USED, 6), _gauge(SEVENX, USED, 7)))])),
    # 7x slots of one and of two functions: which libtpu devices are whose is unknown. One device
    # per slot, values and health unknown (the status says why), never another chip's values.
    Scenario("7x-mixed-ambiguous", lambda env: backend_for(env, "7x-mixed", SEVENX), 3, dict([
        expect("tpu:0000:00:05.0", index=1, health="unknown", memory_used_bytes=None,
               memory_total_bytes=None, utilization_percent=None, details__device_node=None)])),
    # Values a drifted libtpu sends: each unusable one unknown (with a warning), never 0.
    Scenario("v5e-4-odd-values", lambda env: backend_for(env, "v5e-4", ODD), 4, dict([
        expect("tpu:0000:00:04.0", memory_used_bytes=None, utilization_percent=None,
               memory_total_bytes=_gauge(ODD, TOTAL, 0)),
        expect("tpu:0000:00:05.0", memory_used_bytes=None, utilization_percent=_gauge(ODD, DUTY, 1)),
        expect("tpu:0000:00:06.0", memory_used_bytes=None, utilization_percent=_gauge(ODD, DUTY, 2)),
        expect("tpu:0000:00:07.0", memory_used_bytes=_gauge(ODD, USED, 3), utilization_percent=_gauge(ODD, DUTY, 3))])),
]

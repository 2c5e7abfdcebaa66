"""Contract scenarios for the Google TPU backend: sysfs trees with TPU chips (``fixtures/tpu``)
and a real gRPC server on loopback serving libtpu's runtime metrics from a fixture."""

from __future__ import annotations


from allsmi.backends.tpu import TpuBackend

from .scenario import FIXTURES, Scenario, ScenarioEnv, expect

TPU = FIXTURES / "tpu"
GIB = 1024 ** 3


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
    # 12884901888 bytes of 16 GiB HBM in use, duty cycle 91.5 %, as libtpu's gauges say.
    Scenario("v5e-4-training", lambda env: backend_for(env, "v5e-4", "metrics-v5e-4-training.json"), 4, dict([
        expect("tpu:0000:00:04.0", index=0, name="Google TPU v5e", bus_id="0000:00:04.0", health="ok",
               utilization_percent=91.5, compute_active_percent=91.5, compute_active_source="engine_time",
               memory_used_bytes=12884901888, memory_total_bytes=16 * GIB, power_watts=None,
               details__device_node="/dev/vfio/0", processes=None),
        expect("tpu:0000:00:07.0", index=3, utilization_percent=0.0, memory_used_bytes=0)])),
    # An idle host: no workload serves metrics. Chips listed, values and health unknown.
    Scenario("v5e-4-idle", lambda env: backend_for(env, "v5e-4", None), 4, dict([
        expect("tpu:0000:00:05.0", health="unknown", utilization_percent=None, memory_used_bytes=None,
               memory_total_bytes=None)])),
    # v3: two TensorCores per chip, memory per core (summed), duty cycle per chip.
    Scenario("v3-4-per-core", lambda env: backend_for(env, "v3-4", "metrics-v3-4-per-core-memory.json"), 4, dict([
        expect("tpu:0000:00:04.0", name="Google TPU v3", memory_used_bytes=(1 + 2) * GIB,
               memory_total_bytes=16 * GIB, utilization_percent=10.0, details__device_node="/dev/accel0"),
        expect("tpu:0000:00:07.0", memory_used_bytes=(7 + 8) * GIB, utilization_percent=40.0)])),
    # Values a drifted libtpu sends: each unusable one unknown (with a warning), never 0.
    Scenario("v5e-4-odd-values", lambda env: backend_for(env, "v5e-4", "metrics-v5e-4-odd-values.json"), 4, dict([
        expect("tpu:0000:00:04.0", memory_used_bytes=None, utilization_percent=None, memory_total_bytes=16 * GIB),
        expect("tpu:0000:00:05.0", memory_used_bytes=None, utilization_percent=50.0),
        expect("tpu:0000:00:06.0", memory_used_bytes=None, utilization_percent=25.0),
        expect("tpu:0000:00:07.0", memory_used_bytes=1024, utilization_percent=12.5)])),
]

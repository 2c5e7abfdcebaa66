"""libtpu's runtime metrics over gRPC: HBM in use and in total per device, the TensorCore duty
cycle per chip (or per device), as ``tpu-info`` reads them.

Each ``GetRuntimeMetric`` answer is a list of metrics whose ``attribute.value.int_attr`` is the
libtpu device id and whose ``gauge`` holds the value (``as_int`` bytes, ``as_double`` percent).
The service runs inside the TPU workload's process (libtpu), so it exists only while one runs:
"unavailable" is an idle host, not a fault. grpcio and protobuf come with the
``allsmi[kubernetes]`` extra and are imported here only, once a chip is present.
"""

from __future__ import annotations

import time
from typing import Any

from allsmi.backend_api import BackendError, BackendTimeout

TOTAL = "tpu.runtime.hbm.memory.total.bytes"
USAGE = "tpu.runtime.hbm.memory.usage.bytes"
DUTY = "tpu.runtime.tensorcore.dutycycle.percent"
#: An answer is a few KiB; more than this is not one.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024


class ServiceUnavailable(Exception):
    """No runtime metrics service (no TPU workload runs), with why."""


def _grpc() -> tuple[Any, Any, Any]:
    try:
        import grpc

        from allsmi.backends.tpu.proto import tpu_metric_service_pb2, tpu_metric_service_pb2_grpc
    except ImportError as exc:
        raise BackendError(f"grpcio and protobuf are needed to read TPU metrics: "
                           f"pip install 'allsmi[kubernetes]' ({exc})") from None
    return grpc, tpu_metric_service_pb2, tpu_metric_service_pb2_grpc


class MetricsClient:
    """One channel to ``address`` (local channel credentials, as libtpu expects)."""

    def __init__(self, address: str, timeout: float) -> None:
        self.address = address
        self.timeout = timeout
        self._channel: Any = None
        self._stub: Any = None

    def close(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            channel.close()

    def metric(self, name: str, warnings: list[str], deadline: float | None = None) -> dict[int, Any]:
        """``name``'s values by device id: an int for ``as_int``, a float for ``as_double``;
        a metric without a device id (or with a negative one) or a usable value is skipped with
        a warning, and a device given twice has no value (which one is its own is unknown).
        ``deadline`` (``time.monotonic()``) bounds the call together with the sample's other
        calls, so one sample never waits more than the backend's timeout in all."""
        grpc, pb2, pb2_grpc = _grpc()
        timeout = self.timeout if deadline is None else deadline - time.monotonic()
        if timeout <= 0:
            raise BackendTimeout(f"libtpu runtime metrics at {self.address}: no time left for {name} "
                                 f"within {self.timeout:g} s")
        if self._stub is None:
            self._channel = grpc.secure_channel(
                self.address, grpc.local_channel_credentials(),
                options=[("grpc.max_receive_message_length", MAX_RESPONSE_BYTES),
                         ("grpc.enable_retries", 0)])
            self._stub = pb2_grpc.RuntimeMetricServiceStub(self._channel)
        try:
            answer = self._stub.GetRuntimeMetric(pb2.MetricRequest(metric_name=name), timeout=timeout)
        except grpc.RpcError as exc:
            self.close()
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            if code == grpc.StatusCode.UNAVAILABLE:
                raise ServiceUnavailable(f"no libtpu runtime metrics at {self.address} ({details}); "
                                         f"it runs only while a TPU workload runs") from None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise BackendTimeout(f"libtpu runtime metrics at {self.address} gave no answer for "
                                     f"{name} within {self.timeout:g} s") from None
            raise BackendError(f"libtpu runtime metrics at {self.address}: {name} failed: "
                               f"{getattr(code, 'name', code)}: {details}") from None
        values: dict[int, Any] = {}
        repeated: set[int] = set()
        for metric in answer.metric.metrics:
            attr = metric.attribute.value
            if attr.WhichOneof("attr") != "int_attr" or metric.WhichOneof("measure") != "gauge":
                warnings.append(f"{name}: a value without a device id or gauge "
                                f"({attr.WhichOneof('attr')}, {metric.WhichOneof('measure')}); skipped")
                continue
            device = attr.int_attr
            if device < 0:
                warnings.append(f"{name}: device id {device} is negative; skipped")
                continue
            kind = metric.gauge.WhichOneof("value")
            if kind not in ("as_int", "as_double"):
                warnings.append(f"{name}: device {device} has a {kind} gauge; skipped")
                continue
            if device in values or device in repeated:
                # two values for one device: which is its own is unknown, so neither is kept
                if device not in repeated:
                    warnings.append(f"{name}: device {device} is given more than once; "
                                    "reported as unknown")
                repeated.add(device)
                values.pop(device, None)
                continue
            values[device] = getattr(metric.gauge, kind)
        return values

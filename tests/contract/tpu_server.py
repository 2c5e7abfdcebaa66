"""A real gRPC server implementing libtpu's runtime metrics service on loopback TCP, with local
server credentials as libtpu's (``GetRuntimeMetric`` answering from a fixture's values).

``mode``: ``answer`` (the fixture), ``hang`` (until :meth:`close`), ``error`` (INTERNAL with a
message), ``garbage`` (bytes that are not a protobuf message). ``refuse`` names metrics answered
NOT_FOUND whatever the mode; ``delay`` (seconds) is waited before every answer.
"""

from __future__ import annotations

import json
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from allsmi.backends.tpu.proto import tpu_metric_service_pb2 as pb2

SERVICE = "tpu.monitoring.runtime.RuntimeMetricService"


class TpuMetricsServer:
    def __init__(self, fixture: Path | None = None, mode: str = "answer", *,
                 refuse: tuple[str, ...] = (), delay: float = 0.0) -> None:
        self.refuse = refuse
        self.delay = delay
        self.values: dict[str, list[dict[str, Any]]] = json.loads(fixture.read_text()) if fixture else {}
        self.mode = mode
        self.calls: list[str] = []
        self._release = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.unary_unary_rpc_method_handler(
            self._get, request_deserializer=pb2.MetricRequest.FromString, response_serializer=self._serialize)
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"GetRuntimeMetric": handler}),))
        port = self.server.add_secure_port("127.0.0.1:0", grpc.local_server_credentials(
            grpc.LocalConnectionType.LOCAL_TCP))
        self.address = f"127.0.0.1:{port}"
        self.server.start()

    def _serialize(self, message: Any) -> bytes:
        return b"\xff\xfe not protobuf" if self.mode == "garbage" else message.SerializeToString()

    def _get(self, request: Any, context: Any) -> Any:
        self.calls.append(request.metric_name)
        if self.delay:
            self._release.wait(self.delay)
        if request.metric_name in self.refuse:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no metric {request.metric_name}")
        if self.mode == "hang":
            self._release.wait(60)
        if self.mode == "error":
            context.abort(grpc.StatusCode.INTERNAL, "TPU runtime is shutting down")
        answer = pb2.MetricResponse()
        answer.metric.name = request.metric_name
        for row in self.values.get(request.metric_name, []):
            metric = answer.metric.metrics.add()
            if "device_id" in row:
                metric.attribute.key = "device-id"
                metric.attribute.value.int_attr = row["device_id"]
            else:
                metric.attribute.key = "device-id"
                metric.attribute.value.string_attr = row["device_string"]
            if "as_int" in row:
                metric.gauge.as_int = row["as_int"]
            elif "as_double" in row:
                metric.gauge.as_double = row["as_double"]
            else:
                metric.gauge.as_string = row["as_string"]
        return answer

    def close(self) -> None:
        self._release.set()
        self.server.stop(None)

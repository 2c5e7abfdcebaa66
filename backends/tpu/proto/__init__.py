"""Generated Python code of libtpu's runtime metrics service (``tpu_metric_service.proto`` beside
this file, the subset of the public proto that allsmi reads).

Do not edit ``tpu_metric_service_pb2.py`` or ``tpu_metric_service_pb2_grpc.py``: regenerate them
with the same pinned generator as the kubelet client (``allsmi/attribution/_podresources``), from a
tree where the file sits at its installed path (``backends/`` is installed as ``allsmi/backends``)::

    python -m pip install 'grpcio-tools==1.85.1'
    mkdir -p /tmp/gen/allsmi/backends/tpu/proto
    cp backends/tpu/proto/tpu_metric_service.proto /tmp/gen/allsmi/backends/tpu/proto/
    (cd /tmp/gen && python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. \\
        allsmi/backends/tpu/proto/tpu_metric_service.proto)
    cp /tmp/gen/allsmi/backends/tpu/proto/*_pb2*.py backends/tpu/proto/

Imported only by :mod:`allsmi.backends.tpu.client`, once a TPU chip is present, so that allsmi
without the ``kubernetes`` extra (grpcio, protobuf) or without TPUs never needs them.
"""

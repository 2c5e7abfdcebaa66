"""Generated Python code of the kubelet pod-resources API v1 (``api.proto`` beside this file).

Do not edit ``api_pb2.py`` or ``api_pb2_grpc.py``: regenerate them from the repository root,
with the pinned generator (its protobuf gencode version sets the ``protobuf`` floor of the
``allsmi[kubernetes]`` extra, its gRPC version the ``grpcio`` floor; see docs/attribution.md)::

    python -m pip install 'grpcio-tools==1.85.1'
    python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. \\
        allsmi/attribution/_podresources/api.proto

Imported only by :mod:`allsmi.attribution.kubernetes`, lazily, so that allsmi without the
``kubernetes`` extra never needs grpcio or protobuf.
"""

"""The queues job's hand-built state requests are the bytes PySpark's protobuf classes
produce."""

from __future__ import annotations

import pytest


def test_hand_built_state_requests_are_pysparks_bytes() -> None:
    proto = pytest.importorskip("pyspark.sql.streaming.proto.StateMessage_pb2")
    from tidemark.spark_streaming.pyspark_state import _same_bytes
    assert _same_bytes(proto)

"""Batched MapState access for ``transformWithStateInPandas`` over PySpark 4.0's state socket.

PySpark's Python state API makes one blocking round trip to the JVM's state server per call
(``getValue``, ``updateValue``, ``removeKey``), measured at 100-250 us each on 2 busy cores:
per-message state would cost 0.5 s per 1,000 rows. The server reads requests one after the
other from its socket and answers each in order, so :class:`SparkMaps` writes many requests
at once and then reads their answers (*pipelining*): the same requests, the same answers,
one round trip per group of requests instead of one per call.

The server reads a request with a single ``read`` into a buffer of 8 KiB, so a request that
straddles that buffer's end can be cut short. Requests are therefore written in groups of at
most :data:`GROUP_BYTES` (one ``send``, arriving whole on loopback), and the next group only
after every answer to the previous one has been read, which is the same condition PySpark's
own client relies on for each single request. With another PySpark than 4.0.x, or if its
internals are not as expected, every call goes through the public API instead.
"""

from __future__ import annotations

import pickle
import struct
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from tidemark.log.wire import varint
from tidemark.spark_streaming.state_layout import KEY_SCHEMA, STATE_NAME, VALUE_SCHEMA

__all__ = ["SparkMaps", "GROUP_BYTES"]

#: Bytes of requests written at once (the JVM state server's input buffer is 8,192 bytes).
GROUP_BYTES = 8000
_HEADER = struct.Struct("!ii")  # message version 0, length
# Field numbers in PySpark 4.0's StateMessage.proto: StateRequest.stateVariableRequest = 3,
# StateVariableRequest.mapStateCall = 3, MapStateCall.stateName = 1, .getValue = 3,
# .updateValue = 5, .removeKey = 9; GetValue/RemoveKey.userKey = 1; UpdateValue.value = 2.
_GET, _UPDATE, _REMOVE = 3, 5, 9


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def _map_call(name: str, call: int, inner: bytes) -> bytes:
    """A serialized StateRequest carrying MapStateCall ``call`` on state ``name``."""
    return _field(3, _field(3, _field(1, name.encode()) + _field(call, inner)))


class SparkMaps:
    """:class:`~tidemark.spark_streaming.state_layout.StateMaps` on the queue state's MapState
    (registered here, in ``init``); ``stats`` counts requests and round trips."""

    def __init__(self, handle: Any, name: str = STATE_NAME) -> None:
        self.name = name
        self.state = handle.getMapState(name, KEY_SCHEMA, VALUE_SCHEMA)
        self.stats = {"requests": 0, "round_trips": 0, "state_s": 0.0}
        self._api: Any = None
        self._proto: Any = None
        self._protocol = pickle.HIGHEST_PROTOCOL
        try:
            import pyspark
            import pyspark.sql.streaming.proto.StateMessage_pb2 as proto
            from pyspark.serializers import pickle_protocol
            api = self.state._mapStateClient._stateful_processor_api_client
            if pyspark.__version__.startswith("4.0.") and hasattr(api, "sockfile") \
                    and hasattr(api, "_receive_proto_message") and _same_bytes(proto):
                self._api, self._proto, self._protocol = api, proto, pickle_protocol
        except (ImportError, AttributeError):
            pass

    @property
    def pipelined(self) -> bool:
        """Whether requests are pipelined (else the public API is called once per key)."""
        return self._api is not None

    # ---- StateMaps --------------------------------------------------------------------------
    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        started = time.perf_counter()
        try:
            if self._api is None:
                rows = [self.state.getValue((k,)) for k in keys]
            else:
                dumps, name = self._dumps, self.name
                requests = [_map_call(name, _GET, _field(1, dumps(k))) for k in keys]
                rows = [pickle.loads(v) if v else None
                        for v in self._pipeline(requests, "getting a value")]
            return [None if r is None else bytes(r[0]) for r in rows]
        finally:
            self._count(len(keys), started)

    def put_many(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        if not items:
            return
        started = time.perf_counter()
        try:
            if self._api is None:
                for key, value in items:
                    self.state.updateValue((key,), (value,))
                return
            dumps, name = self._dumps, self.name
            self._pipeline([_map_call(name, _UPDATE, _field(1, dumps(k)) + _field(2, dumps(v)))
                            for k, v in items], "updating a value")
        finally:
            self._count(len(items), started)

    def remove_many(self, keys: Sequence[bytes]) -> None:
        if not keys:
            return
        started = time.perf_counter()
        try:
            if self._api is None:
                for key in keys:
                    self.state.removeKey((key,))
                return
            dumps, name = self._dumps, self.name
            self._pipeline([_map_call(name, _REMOVE, _field(1, dumps(k))) for k in keys],
                           "removing a key")
        finally:
            self._count(len(keys), started)

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        """Every entry of the group, one Arrow batch per round trip (read eagerly)."""
        started = time.perf_counter()
        try:
            if self._api is None:
                return iter([(bytes(k[0]), bytes(v[0])) for k, v in self.state.iterator()])
            proto, api = self._proto, self._api
            request = proto.StateRequest(stateVariableRequest=proto.StateVariableRequest(
                mapStateCall=proto.MapStateCall(stateName=self.name, iterator=proto.Iterator(
                    iteratorId=str(uuid.uuid4()))))).SerializeToString()
            out: list[tuple[bytes, bytes]] = []
            while True:
                api.sockfile.write(_HEADER.pack(0, len(request)) + request)
                api.sockfile.flush()
                self.stats["round_trips"] += 1
                status, error, _ = api._receive_proto_message()
                if status != 0:
                    return iter(out)  # 2: no (more) entries
                for batch in list(api._read_arrow_state()):
                    keys, values = batch.column(0).to_pylist(), batch.column(1).to_pylist()
                    out += [(bytes(pickle.loads(k)[0]), bytes(pickle.loads(v)[0]))
                            for k, v in zip(keys, values, strict=True)]
        finally:
            self._count(0, started)

    # ---- the pipeline -----------------------------------------------------------------------
    def _dumps(self, value: bytes) -> bytes:
        # What PySpark sends for a one-column binary row: the pickled 1-tuple.
        return pickle.dumps((value,), self._protocol)

    def _pipeline(self, requests: list[bytes], what: str) -> list[bytes]:
        """Send ``requests`` in groups of at most :data:`GROUP_BYTES`; each group's answers
        are read before the next group is written. Returns the answers' values."""
        api, out = self._api, []
        assert api is not None
        i, n = 0, len(requests)
        while i < n:
            parts: list[bytes] = []
            size, j = 0, i
            while j < n and (j == i or size + 8 + len(requests[j]) <= GROUP_BYTES):
                parts += (_HEADER.pack(0, len(requests[j])), requests[j])
                size += 8 + len(requests[j])
                j += 1
            api.sockfile.write(b"".join(parts))
            api.sockfile.flush()
            self.stats["round_trips"] += 1
            for _ in range(j - i):
                status, error, value = api._receive_proto_message()
                if status != 0:
                    raise RuntimeError(f"state server: error {what}: {error}")
                out.append(value)
            i = j
        return out

    def _count(self, requests: int, started: float) -> None:
        self.stats["requests"] += requests
        self.stats["state_s"] += time.perf_counter() - started
        if self._api is None:
            self.stats["round_trips"] += requests


def _same_bytes(proto: Any) -> bool:
    """Whether :func:`_map_call` builds exactly what PySpark's protobuf classes serialize."""
    key, value = b"k\x00\xff" * 50, b"v" * 200

    def call(**kw: Any) -> bytes:
        return proto.StateRequest(stateVariableRequest=proto.StateVariableRequest(
            mapStateCall=proto.MapStateCall(stateName="entries", **kw))).SerializeToString()
    return (call(getValue=proto.GetValue(userKey=key))
            == _map_call("entries", _GET, _field(1, key))
            and call(updateValue=proto.UpdateValue(userKey=key, value=value))
            == _map_call("entries", _UPDATE, _field(1, key) + _field(2, value))
            and call(removeKey=proto.RemoveKey(userKey=key))
            == _map_call("entries", _REMOVE, _field(1, key)))

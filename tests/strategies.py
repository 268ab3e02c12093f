"""Hypothesis strategies shared by several test modules."""

from __future__ import annotations

from hypothesis import strategies as st

text = st.text(max_size=40)
long = st.integers(-(1 << 63), (1 << 63) - 1)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
#: QueueEntry records over the whole range of each field.
queue_entries = st.fixed_dictionaries({
    "peer": text, "message_id": text, "sender": text, "message_type": text,
    "payload": st.binary(max_size=300), "timestamp_ms": long, "txlog_partition": int32,
    "txlog_offset": long, "delivery_count": int32})

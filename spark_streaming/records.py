"""Fast decoding of the txlog records the job reads (Send, Ack, Purge, DeliveryFailed).

The reader lives in :mod:`tidemark.log.fast_decoder` (the peer's replay uses it too); this module
keeps the job's import path. It is byte-exact with the codec and falls back to
:meth:`tidemark.log.codec.Codec.decode` for anything else (older writer schemas, poison records).
"""

from __future__ import annotations

from tidemark.log.fast_decoder import RecordReader
from tidemark.log.fast_decoder import _compile as _compile  # noqa: F401 - kept for old imports
from tidemark.log.fast_decoder import _read_long as _read_long  # noqa: F401
from tidemark.log.fast_decoder import flat_fields as _flat_fields  # noqa: F401

__all__ = ["RecordReader"]

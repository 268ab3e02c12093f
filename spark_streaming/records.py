"""Fast decoding of the txlog records the job reads (Send, Ack, Purge, DeliveryFailed).

The reader lives in :mod:`log.fast_decoder` (the peer's replay uses it too); this module
keeps the job's import path. It is byte-exact with the codec and falls back to
:meth:`log.codec.Codec.decode` for anything else (older writer schemas, poison records).
"""

from __future__ import annotations

from log.fast_decoder import RecordReader
from log.fast_decoder import _compile as _compile  # noqa: F401 - kept for old imports
from log.fast_decoder import _read_long as _read_long  # noqa: F401
from log.fast_decoder import flat_fields as _flat_fields  # noqa: F401

__all__ = ["RecordReader"]

"""The end-to-end replay demo (``tidemark demo``) and the replay bench (``tidemark bench
replay``): composition-root code that runs peers as OS processes against a local stack."""

from tidemark.demo.ledger import Handled, Ledger, Tally, read_handled, read_sent, tally

__all__ = ["Handled", "Ledger", "Tally", "read_handled", "read_sent", "tally"]

"""The subcommands of ``tidemark``, one module per area; each has ``register(commands, bench)``."""

__all__: list[str] = []

"""The session cluster's Kafka users, for everything the tests point at it.

``make test``'s cluster runs as ``tidemark local up --sasl`` does: SASL_PLAINTEXT with
SCRAM-SHA-256 only, KRaft's StandardAuthorizer, one user per role. The ``kafka_stack``
fixture records the users here (:func:`use_roles`); tests build settings, state files and
subprocess environments for the session cluster through these helpers, so that each client
signs in: test code and the CLI as the operator, and the replica nodes and queues job a test
stack starts as their own roles, limited to their topics by ACLs granted on the test's topic
prefix. While the session runs, the operator's settings are in the environment
(:func:`signed_in`), so every ``tidemark`` subprocess and ``load_settings()`` signs in; a test
that starts a cluster of its own steps out of them (:func:`elsewhere`, :func:`apart`). An
existing cluster (``TIDEMARK_BOOTSTRAP``) is used as it is: no users, plaintext.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from tidemark.log import registry
from tidemark.log.settings import Settings, load_settings

__all__ = ["use_roles", "roles", "client_env", "settings", "external_state", "signed_in",
           "elsewhere", "apart"]

_ROLES: dict[str, dict[str, str]] = {}


def use_roles(users: Mapping[str, Mapping[str, str]]) -> None:
    """Record the session cluster's users by role (empty: a plaintext cluster)."""
    _ROLES.clear()
    _ROLES.update({role: dict(client) for role, client in users.items()})


def roles() -> dict[str, dict[str, str]]:
    """The session cluster's users by role (Kafka client settings of each)."""
    return {role: dict(client) for role, client in _ROLES.items()}


def client_env(role: str = "operator") -> dict[str, str]:
    """``role``'s Kafka client settings as ``TIDEMARK_KAFKA_*`` variables (for a
    subprocess, or ``load_settings(env=...)``); empty on a plaintext cluster."""
    return registry.client_env(_ROLES.get(role, {}))


def settings(**overrides: Any) -> Settings:
    """Settings for the session cluster as the operator, from ``overrides`` (``bootstrap``,
    ``topic_prefix``, ...) and nothing of the environment."""
    return load_settings(env=client_env(), **overrides)


def external_state(bootstrap: str) -> dict[str, Any]:
    """A local stack's ``state.json`` over the session cluster (``external``): its processes
    sign in as their roles, the CLI as the operator, and ``up`` grants the roles' ACLs on the
    stack's topics."""
    doc: dict[str, Any] = {"bootstrap": bootstrap, "processes": {}, "external": True}
    if _ROLES:
        doc.update(roles=roles(), client=dict(_ROLES["operator"]))
    return doc


def _swap(new: Mapping[str, str]) -> dict[str, str | None]:
    """Set ``new`` in ``os.environ`` after removing every ``TIDEMARK_KAFKA_*`` variable;
    returns what to restore."""
    names = {k for k in os.environ if k.startswith(registry.KAFKA_CLIENT_PREFIX)} | set(new)
    saved = {k: os.environ.get(k) for k in names}
    for k in names:
        os.environ.pop(k, None)
    os.environ.update(new)
    return saved


def _restore(saved: Mapping[str, str | None]) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextmanager
def signed_in() -> Iterator[None]:
    """The operator's ``TIDEMARK_KAFKA_*`` settings in ``os.environ`` for the block."""
    saved = _swap(client_env())
    try:
        yield
    finally:
        _restore(saved)


@contextmanager
def elsewhere() -> Iterator[None]:
    """Neither the session cluster's address nor its users in ``os.environ`` for the block
    (a test starting brokers of its own)."""
    saved = _swap({}) | {"TIDEMARK_BOOTSTRAP": os.environ.pop("TIDEMARK_BOOTSTRAP", None)}
    try:
        yield
    finally:
        _restore(saved)


def apart(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the session cluster's address and users (a subprocess that starts
    brokers of its own)."""
    return {k: v for k, v in env.items()
            if k != "TIDEMARK_BOOTSTRAP" and not k.startswith(registry.KAFKA_CLIENT_PREFIX)}

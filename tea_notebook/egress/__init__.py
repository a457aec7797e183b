"""One egress policy for every network action a model chooses (see :mod:`tea_notebook.egress.policy`).

``ws.egress`` is the workspace's :class:`EgressPolicy`; :func:`policy_client` gives an HTTP client
that connects only where the policy allows (each redirect hop checked); :class:`EgressProxy` is the
host-side HTTP proxy through which sandboxes and the browser reach the network; ``bridge.py``
(:data:`BRIDGE_SCRIPT`) runs inside a sandbox and forwards its loopback port to the proxy's socket;
``names.py`` gives every host name its one normal form before any rule compares it.
"""

from __future__ import annotations

from pathlib import Path

from tea_notebook._lazy import lazy_getattr
from tea_notebook.egress.policy import Decision, EgressPolicy, EgressRefused, address_kind

#: the standalone script a sandbox runs to reach the proxy (stdlib only; see bridge.py)
BRIDGE_SCRIPT = Path(__file__).with_name("bridge.py")

__getattr__ = lazy_getattr(
    __name__,
    {"EgressProxy": "tea_notebook.egress.proxy", "policy_client": "tea_notebook.egress.transport"},
    (),
    globals(),
)


def __dir__() -> list[str]:
    return sorted([*__all__])


__all__ = [
    "BRIDGE_SCRIPT",
    "Decision",
    "EgressPolicy",
    "EgressProxy",
    "EgressRefused",
    "address_kind",
    "policy_client",
]

"""What runs need of a workspace: :class:`RunHost`, and :class:`LiveAgents`, the agents of this process.

Everything below the ``Workspace`` façade (``runtime/``, ``envs/``, ``agents/``, ``evolve/``,
``eval/``) is handed a workspace and types it as :class:`RunHost`: the registry host of
``protocol/`` plus the services a run writes to (events, jobs, memory, egress) and its model
settings. The façade's convenience methods (``ws.agent()``, ``ws.trajectory()``, ``ws.fork()`` …)
are not part of it: lower code calls the functions behind them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Coroutine, Protocol

from tea_notebook.protocol.host import RegistryHost

if TYPE_CHECKING:
    from tea_notebook.egress.policy import EgressPolicy
    from tea_notebook.protocol.context import Context
    from tea_notebook.protocol.records import ExperienceRecord, MemoryRecord
    from tea_notebook.protocol.registry import Registry
    from tea_notebook.runtime.events import Event, EventLog
    from tea_notebook.runtime.memory import MemoryStore


class LiveAgents:
    """The agent objects made in this process, by registered name: a stored card rebuilds its agent
    only when no live one of that name is here (``ws.agent("x")`` twice gives the same agent)."""

    def __init__(self) -> None:
        self._agents: dict[str, Any] = {}

    def get(self, name: str) -> Any | None:
        """The live agent registered as ``name``, or None."""
        return self._agents.get(name)

    def put(self, name: str, agent: Any) -> None:
        """Remember ``agent`` as the live agent of ``name`` (replacing any other)."""
        self._agents[name] = agent

    def pop(self, name: str) -> Any | None:
        """Forget the live agent of ``name``; return it (None when there was none)."""
        return self._agents.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def __len__(self) -> int:
        return len(self._agents)

    def __repr__(self) -> str:
        return f"LiveAgents({sorted(self._agents)})"


class JobStarter(Protocol):
    """What a run needs of the workspace's background jobs: to start one. The workspace's
    :class:`~tea_notebook.runtime.jobs.Jobs` is one (declared here, not named: ``jobs.py`` types its
    workspace as a :class:`RunHost`, and a run's result, which it returns, opens views that do too)."""

    def start(
        self,
        agent: str,
        task: str,
        start: Callable[["Context"], Coroutine[Any, Any, Any]],
        on_event: Callable[["Event"], None] | None = None,
        model_options: dict[str, Any] | None = None,
    ) -> Any:
        """Start ``start(ctx)`` in the background; its :class:`~tea_notebook.runtime.jobs.RunHandle`."""
        ...


class RunHost(RegistryHost, Protocol):
    """A workspace as runs see it: registries, event stream, background jobs, memory, the egress
    policy, the default model and model-call settings, and the live agents of this process."""

    @property
    def memory(self) -> "Registry[MemoryRecord]":
        """Session memory records (summaries, insights)."""
        ...

    @property
    def experience(self) -> "Registry[ExperienceRecord]":
        """Experience memory records (Mem²Evolve)."""
        ...

    @property
    def events(self) -> "EventLog":
        """The event stream runs append to."""
        ...

    @property
    def jobs(self) -> JobStarter:
        """Background runs of this process."""
        ...

    @property
    def memory_store(self) -> "MemoryStore":
        """Summaries and insights of past runs, over :attr:`memory` (the same object every time)."""
        ...

    @property
    def egress(self) -> "EgressPolicy":
        """Where model-chosen network actions may go."""
        ...

    @property
    def default_model(self) -> str | None:
        """The model of agents that name none, or None."""
        ...

    @property
    def model_timeout(self) -> float | None:
        """Seconds per model-call attempt where the agent's client sets none (None: the default)."""
        ...

    @property
    def model_retries(self) -> int | None:
        """Retries of transient model-call errors where the agent's client sets none."""
        ...

    @property
    def api_base(self) -> str | None:
        """An OpenAI-compatible server URL for model calls, or None."""
        ...

    @property
    def live_agents(self) -> LiveAgents:
        """The agent objects made in this process, by name."""
        ...


__all__ = ["JobStarter", "LiveAgents", "RunHost"]

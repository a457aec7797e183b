"""Any agent of ours as an Inspect AI agent, so an Inspect task runs it:

    from inspect_ai import Task, eval as inspect_eval
    task = Task(dataset=..., solver=inspect_agent(ws, "solver"), scorer=match())
    inspect_eval(task, model="mockllm/model")          # offline: our agent runs with its own model

How Inspect's model maps to ours (``model=``):

* ``"agent"`` (default): our agent runs with its own model (its card's, or the workspace default);
  Inspect's model is not called. The model that ran is in each sample's transcript (an ``info`` event
  ``tea`` with the run id, model, status, steps, tokens and cost) and in the sample's store.
* ``"inspect"``: Inspect's active model name is used as the litellm name (``provider/model``
  is spelled the same in both); Inspect's offline ``mockllm``
  has no counterpart here and is refused with a clear error.
* any other string: that model.

The question is the text of the last user message of Inspect's state; the agent's answer becomes the
assistant message and ``output`` Inspect's scorers read. Each run is stored in ``ws`` as usual
(``ws.trajectory(run_id)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tea_notebook.errors import TeaError

if TYPE_CHECKING:
    from tea_notebook.runtime.host import RunHost


def _model_for(choice: str) -> str | None:
    if choice == "agent":
        return None
    if choice != "inspect":
        return choice
    from inspect_ai.model import get_model

    name = str(get_model())
    if name.startswith("mockllm/"):
        raise TeaError(
            f"Inspect's model {name!r} has no counterpart among our models: use model='agent' (the agent's own "
            "model, scripted ones included) or name one"
        )
    return name


def _question(messages: list[Any]) -> str:
    for message in reversed(messages):
        if getattr(message, "role", "") == "user":
            return str(message.text)
    raise TeaError("the Inspect sample has no user message to give the agent as its task")


def inspect_agent(ws: "RunHost", agent: Any, *, model: str = "agent") -> Any:
    """An Inspect ``Agent`` that runs ``agent`` (a name or an object, as :func:`evaluate` takes) on
    each sample; ``model`` maps Inspect's model to ours (see the module docstring)."""
    try:
        from inspect_ai.agent import AgentState
        from inspect_ai.agent import agent as inspect_agent_decorator
    except ImportError:
        raise TeaError("Inspect agents need Inspect AI: pip install 'tea_notebook[inspect]'") from None
    from tea_notebook.eval.runner import resolve_agent
    from tea_notebook.protocol.context import Context

    runner = resolve_agent(ws, agent)
    label = str(getattr(runner, "name", type(runner).__name__))

    @inspect_agent_decorator(name=f"tea_{label}", description=f"the tea_notebook agent {label!r}")
    def tea_agent() -> Any:
        async def execute(state: AgentState) -> AgentState:
            from inspect_ai.log import transcript
            from inspect_ai.model import ChatMessageAssistant, ModelOutput
            from inspect_ai.util import store

            question = _question(state.messages)
            kwargs: dict[str, Any] = {"context": Context()}
            chosen = _model_for(model)
            if chosen is not None:
                kwargs["model"] = chosen
            result = await runner.run(question, **kwargs)
            answer = str(getattr(result, "answer", "") or "")
            ran = str(getattr(result, "model", "") or chosen or "")
            info = {
                "run_id": getattr(result, "run_id", None),
                "agent": label,
                "model": ran,
                "status": str(getattr(result, "status", "")),
                "steps": int(getattr(result, "steps", 0) or 0),
                "prompt_tokens": int(getattr(result, "prompt_tokens", 0) or 0),
                "completion_tokens": int(getattr(result, "completion_tokens", 0) or 0),
                "cost": float(getattr(result, "cost", 0.0) or 0.0),
                "error": getattr(result, "error", None),
            }
            transcript().info(info, source="tea")
            store().set("tea_run", info)
            state.messages.append(ChatMessageAssistant(content=answer, model=ran or None))
            state.output = ModelOutput.from_content(ran or "tea", answer)
            return state

        # Inspect reads the types of an agent's signature; with postponed annotations they are strings
        execute.__annotations__ = {"state": AgentState, "return": AgentState}
        return execute

    return tea_agent()


__all__ = ["inspect_agent"]

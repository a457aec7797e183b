"""A step's rendered text is cached, and the cache follows every change to the step."""

from __future__ import annotations

from tea_notebook.runtime.prompts import StepRecord


def test_render_follows_changes_to_the_step():
    step = StepRecord(3, memory="first")
    assert "Memory: first" in step.render()
    step.memory = "second"  # changed after a render: rendered again, not served stale
    assert "Memory: second" in step.render() and "first" not in step.render()
    step.results.append(("lookup", '{"key": "k1"}', "value one"))
    assert "[lookup]" in step.render() and "value one" in step.render()
    long = "x" * 1000
    step.results.append(("lookup", "{}", long))
    assert f"{'x' * 100}… (900 more characters)" in step.render(100)
    assert "x" * 1000 in step.render(2000)
    assert step.render() == step.render()  # the same text from the cache

from collections.abc import Sequence

from livekit.agents import llm

from coach.state.history import estimate_tokens, prune_chat_items


def msg(role: str, text: str) -> llm.ChatMessage:
    return llm.ChatMessage(role=role, content=[text])


def call(call_id: str, args: str = "{}") -> llm.FunctionCall:
    return llm.FunctionCall(call_id=call_id, name="tool", arguments=args)


def output(call_id: str, text: str) -> llm.FunctionCallOutput:
    return llm.FunctionCallOutput(call_id=call_id, name="tool", output=text, is_error=False)


def ids(items: Sequence[llm.ChatItem]) -> list[str]:
    return [i.id for i in items]


def test_under_budget_keeps_everything() -> None:
    items = [msg("system", "sys"), msg("user", "a"), msg("assistant", "b")]
    assert ids(prune_chat_items(items, max_tokens=1000, max_lines=1000)) == ids(items)


def test_system_prompt_always_kept_and_newest_items_fill_the_budget() -> None:
    system = msg("system", "s" * 400)  # 100 tokens, over the whole budget on its own
    old, mid, new = msg("user", "x" * 40), msg("assistant", "y" * 40), msg("user", "z" * 40)
    kept = prune_chat_items([system, old, mid, new], max_tokens=115, max_lines=100)
    assert ids(kept) == [system.id, new.id]


def test_budget_boundary_is_inclusive() -> None:
    a, b = msg("user", "a" * 40), msg("assistant", "b" * 40)  # 10 tokens each
    assert len(prune_chat_items([a, b], max_tokens=20, max_lines=10)) == 2
    assert ids(prune_chat_items([a, b], max_tokens=19, max_lines=10)) == [b.id]


def test_line_budget() -> None:
    a, b = msg("user", "1\n2\n3"), msg("assistant", "4\n5")
    assert len(prune_chat_items([a, b], max_tokens=10_000, max_lines=5)) == 2
    assert ids(prune_chat_items([a, b], max_tokens=10_000, max_lines=4)) == [b.id]


def test_call_and_output_are_never_split() -> None:
    user = msg("user", "u" * 40)
    c1, c2 = call("1", "{}"), call("2", "{}")
    o1, o2 = output("1", "r" * 80), output("2", "r" * 80)
    after = msg("assistant", "done")
    items: list[llm.ChatItem] = [user, c1, c2, o1, o2, after]
    tool_unit = sum(estimate_tokens(t) for t in ["tool({})", "tool({})", "r" * 80, "r" * 80])
    kept = prune_chat_items(items, max_tokens=tool_unit + 1, max_lines=100)
    assert ids(kept) == [c1.id, c2.id, o1.id, o2.id, after.id]
    kept = prune_chat_items(items, max_tokens=tool_unit, max_lines=100)
    assert ids(kept) == [after.id]  # the whole call group goes, not half of it


def test_latest_unit_kept_even_over_budget() -> None:
    c, o = call("9"), output("9", "big " * 1000)
    kept = prune_chat_items([msg("user", "hi"), c, o], max_tokens=10, max_lines=10)
    assert ids(kept) == [c.id, o.id]


def test_input_is_not_modified() -> None:
    items = [msg("user", "a" * 400), msg("user", "b")]
    snapshot = list(items)
    prune_chat_items(items, max_tokens=5, max_lines=5)
    assert items == snapshot


def test_sizes_are_cached_by_item_id_but_the_system_prompt_is_measured_each_time() -> None:
    sizes: dict[str, tuple[int, int]] = {}
    system, a = msg("system", "s" * 40), msg("user", "a" * 40)
    prune_chat_items([system, a], max_tokens=100, max_lines=100, sizes=sizes)
    assert sizes == {a.id: (10, 1)}
    # A cached size is trusted (items do not change once added) ...
    sizes[a.id] = (1_000, 1)
    b = msg("user", "b")
    kept = prune_chat_items([system, a, b], max_tokens=100, max_lines=100, sizes=sizes)
    assert ids(kept) == [system.id, b.id]
    # ... while a grown system prompt is seen at once.
    system.content = ["s" * 4000]
    assert ids(prune_chat_items([system, a], max_tokens=100, max_lines=100, sizes={})) == [
        system.id,
        a.id,
    ]

"""Live prompts for a model without a chat template (Gemma 3 270M base) go in as plain text (kvtui/app/feed.py)."""

from types import SimpleNamespace

from kvtui.app.feed import plain_if_no_template

MESSAGES = [{"role": "user", "content": "Once upon a time,"}, {"role": "user", "content": "there was"}]


def engine_with(template):
    return SimpleNamespace(tokenizer=SimpleNamespace(chat_template=template))


def test_chat_messages_become_plain_text_without_a_template():
    assert plain_if_no_template(engine_with(None), MESSAGES) == "Once upon a time,\nthere was"
    assert plain_if_no_template(engine_with(""), MESSAGES[:1]) == "Once upon a time,"


def test_prompts_pass_unchanged_otherwise():
    # the template renders them
    assert plain_if_no_template(engine_with("{{ messages }}"), MESSAGES) is MESSAGES
    assert plain_if_no_template(engine_with(None), "plain") == "plain"
    # token ids
    assert plain_if_no_template(engine_with(None), [1, 2, 3]) == [1, 2, 3]
    # no tokenizer: engine says
    assert plain_if_no_template(SimpleNamespace(tokenizer=None), MESSAGES) is MESSAGES

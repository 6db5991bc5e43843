"""The server through the official `openai` client, as a user of vLLM would call it: completions and chat,
streaming and not, stop strings, logprobs, batched prompts, n, penalties, seed, and the errors `openai`
raises for bad requests. The course's default model on the CPU, on a loopback port; every call is bounded."""
from __future__ import annotations

import openai
import pytest

from minimal_engine import LLM
from minimal_engine.serve.app import ServerThread, build_app

PROMPT = "吾輩は"


@pytest.fixture(scope="module")
def llm():
    return LLM(device="cpu", max_num_seqs=16)


@pytest.fixture(scope="module")
def client(llm):
    with ServerThread(build_app(llm, served_model_name="minimal-ja")) as s:
        yield openai.OpenAI(base_url=s.url + "/v1", api_key="EMPTY", timeout=60, max_retries=0)


def test_completion_and_stream_agree(client):
    full = client.completions.create(model="minimal-ja", prompt=PROMPT, max_tokens=20, temperature=0)
    parts = [c.choices[0].text for c in client.completions.create(
        model="minimal-ja", prompt=PROMPT, max_tokens=20, temperature=0, stream=True) if c.choices]
    assert full.choices[0].text and "".join(parts) == full.choices[0].text
    assert full.usage.completion_tokens == 20 and full.choices[0].finish_reason == "length"


def test_stop_string_cuts_text_also_when_streaming(client):
    base = client.completions.create(model="minimal-ja", prompt=PROMPT, max_tokens=30, temperature=0).choices[0].text
    assert "一、" in base                                   # the greedy loop 「、\n\n一、一、…」
    r = client.completions.create(model="minimal-ja", prompt=PROMPT, max_tokens=30, temperature=0, stop=["一、"])
    assert r.choices[0].text == base[:base.index("一、")] and r.choices[0].finish_reason == "stop"
    streamed = [c.choices[0].text for c in client.completions.create(
        model="minimal-ja", prompt=PROMPT, max_tokens=30, temperature=0, stop="一、", stream=True) if c.choices]
    assert "".join(streamed) == r.choices[0].text and not any("一" in p for p in streamed)
    inc = client.completions.create(model="minimal-ja", prompt=PROMPT, max_tokens=30, temperature=0, stop=["一、"],
                                    extra_body={"include_stop_str_in_output": True})
    assert inc.choices[0].text == r.choices[0].text + "一、"


def test_logprobs_completion_and_chat(client):
    r = client.completions.create(model="minimal-ja", prompt=PROMPT, max_tokens=5, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    for tok, val, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert val <= 0 and max(top.values()) == pytest.approx(val)   # greedy: the chosen token is the top one
        assert 2 <= len(top) <= 3
    c = client.chat.completions.create(model="minimal-ja", messages=[{"role": "user", "content": "猫とは"}],
                                       max_tokens=4, temperature=0, logprobs=True, top_logprobs=3)
    content = c.choices[0].logprobs.content
    assert len(content) == 4 and all(len(t.top_logprobs) == 3 for t in content)
    assert all(t.logprob == pytest.approx(t.top_logprobs[0].logprob) for t in content)


def test_batched_prompts_and_n(client):
    r = client.completions.create(model="minimal-ja", prompt=["吾輩は", "東京の空は"], max_tokens=6, temperature=0)
    one = client.completions.create(model="minimal-ja", prompt="東京の空は", max_tokens=6, temperature=0)
    assert [c.index for c in r.choices] == [0, 1] and r.choices[1].text == one.choices[0].text
    ids = client.completions.create(model="minimal-ja", prompt=[[5, 6, 7], [8, 9]], max_tokens=3, temperature=0)
    assert len(ids.choices) == 2
    n = client.completions.create(model="minimal-ja", prompt=PROMPT, max_tokens=8, temperature=1.0, n=3, seed=1)
    assert [c.index for c in n.choices] == [0, 1, 2] and len({c.text for c in n.choices}) > 1
    assert 3 <= n.usage.completion_tokens <= 24 and n.usage.prompt_tokens == one_prompt_tokens(client)


def one_prompt_tokens(client) -> int:
    return client.completions.create(model="minimal-ja", prompt=PROMPT, max_tokens=1).usage.prompt_tokens


def test_penalties_break_the_greedy_loop(client):
    plain = client.completions.create(model="minimal-ja", prompt=PROMPT, max_tokens=30, temperature=0)
    pen = client.completions.create(model="minimal-ja", prompt=PROMPT, max_tokens=30, temperature=0,
                                    extra_body={"repetition_penalty": 1.3})
    freq = client.completions.create(model="minimal-ja", prompt=PROMPT, max_tokens=30, temperature=0,
                                     frequency_penalty=1.0, presence_penalty=0.5)
    assert plain.choices[0].text.count("一、") > 5
    assert pen.choices[0].text.count("一、") < 3 and freq.choices[0].text.count("一、") < 3


def test_seed_repeats(client):
    a, b = (client.completions.create(model="minimal-ja", prompt=PROMPT, max_tokens=12, temperature=1.0, seed=7)
            for _ in range(2))
    assert a.choices[0].text == b.choices[0].text


def test_chat_stream_and_no_english_role_words(client):
    msgs = [{"role": "user", "content": "吾輩は何ですか"}]
    full = client.chat.completions.create(model="minimal-ja", messages=msgs, max_tokens=16, temperature=0)
    parts = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="minimal-ja", messages=msgs, max_tokens=16, temperature=0, stream=True,
        stream_options={"include_usage": True}) if c.choices]
    assert "".join(parts) == full.choices[0].message.content
    assert not any(ch.isascii() and ch.isalpha() for ch in full.choices[0].message.content)


@pytest.mark.parametrize("kwargs, param", [
    (dict(presence_penalty=3.0), "presence_penalty"),
    (dict(frequency_penalty=-2.5), "frequency_penalty"),
    (dict(extra_body={"repetition_penalty": 0}), "repetition_penalty"),
    (dict(extra_body={"min_tokens": 99}, max_tokens=4), "min_tokens"),
    (dict(logprobs=21), "logprobs"),
    (dict(stop=[1, 2]), "stop"),
    (dict(stop=[""]), "stop"),
    (dict(extra_body={"best_of": 3}), "best_of"),
])
def test_bad_requests_raise_bad_request_with_param(client, kwargs, param):
    call = dict(model="minimal-ja", prompt=PROMPT, max_tokens=4) | kwargs
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(**call)
    assert e.value.status_code == 400 and e.value.body["param"] == param and e.value.body["message"]


def test_an_unknown_model_is_not_found_with_the_model_param(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=4)
    assert e.value.status_code == 404 and e.value.body["param"] == "model" and e.value.body["code"] == "model_not_found"


def test_echo_logprobs_through_the_official_client(client):
    """The official client's completions.create(echo=True, logprobs=1, max_tokens=0), as lm-eval sends it."""
    out = client.completions.create(model="minimal-ja", prompt=PROMPT, echo=True, logprobs=1, max_tokens=0)
    choice = out.choices[0]
    assert choice.text == PROMPT and choice.logprobs.token_logprobs[0] is None
    assert all(lp <= 0 for lp in choice.logprobs.token_logprobs[1:]) and len(choice.logprobs.tokens) > 1


def test_streamed_logprobs_and_chat_n(client):
    full = client.completions.create(model="minimal-ja", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=1)
    chunks = [c.choices[0].logprobs for c in client.completions.create(
        model="minimal-ja", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=1, stream=True) if c.choices]
    assert [v for lp in chunks if lp for v in lp.token_logprobs] == pytest.approx(
        full.choices[0].logprobs.token_logprobs, abs=1e-5)
    chat = client.chat.completions.create(model="minimal-ja", messages=[{"role": "user", "content": "猫とは"}],
                                          max_tokens=6, temperature=1.0, n=2, seed=5)
    assert [c.index for c in chat.choices] == [0, 1]
    plp = client.completions.create(model="minimal-ja", prompt=PROMPT, max_tokens=1,
                                    extra_body={"prompt_logprobs": 0}).choices[0].model_extra["prompt_logprobs"]
    assert plp[0] is None and len(plp) >= 2

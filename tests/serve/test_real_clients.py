"""Issue 42's "done when" against the server on loopback: LangChain's with_structured_output
(every method), bind_tools with tool_choice="any", instructor's TOOLS and JSON_SCHEMA requests, and
chat calls without max_tokens give right answers.

LangChain (langchain-openai, pinned in requirements-test.txt) runs as itself. instructor cannot
be installed beside the pinned openai 3.51 (instructor 1.17.0 needs jiter<0.15, openai 3.51
jiter>=0.16), so its two modes are replayed with the official openai client exactly as instructor
1.17.0 builds them (instructor/v2/providers/openai/handlers.py): TOOLS sends the model's schema as
one tool's parameters, without additionalProperties, and names it in tool_choice; JSON_SCHEMA
sends response_format json_schema with model_json_schema(), not strict. The reference answers
come from a second, offline LLM with the same weights. The schemas bound their strings and
integers, so the tiny model finishes them (its free strings never end: json_mode below is that
model limit, shown to fail loudly and to equal the offline output).
"""
from __future__ import annotations

import json
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field

from minimal_engine import LLM, SamplingParams
from minimal_engine.sampling_params import StructuredOutputsParams
from minimal_engine.serve.app import ServerThread, build_app

langchain_openai = pytest.importorskip("langchain_openai")   # requirements-test.txt
MODEL = "minimal-ja"
ASK = [{"role": "user", "content": "黒い猫の名前は"}]


class Cat(BaseModel):
    """猫の情報。"""
    name: str = Field(max_length=6, description="名前")
    age: int = Field(ge=0, le=30)
    color: Literal["黒", "白", "三毛"]


@pytest.fixture(scope="module")
def offline():
    return LLM(device="cpu")


@pytest.fixture(scope="module")
def url():
    with ServerThread(build_app(LLM(device="cpu", max_num_seqs=8), served_model_name=MODEL)) as s:
        yield s.url


@pytest.fixture(scope="module")
def chat(url):
    return langchain_openai.ChatOpenAI(base_url=url + "/v1", api_key="EMPTY", model=MODEL,
                                       temperature=0, timeout=120, max_retries=0)


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="EMPTY", timeout=120, max_retries=0)


def constrained(offline, messages, max_tokens=200, **so) -> str:
    params = SamplingParams(temperature=0, max_tokens=max_tokens,
                            structured_outputs=StructuredOutputsParams(**so))
    return offline.chat(messages, params, use_tqdm=False)[0].text


def test_langchain_with_structured_output_every_method(chat, client, offline):
    want = Cat.model_validate_json(constrained(offline, ASK, json=Cat.model_json_schema()))
    for method in ("json_schema", "function_calling"):
        out = chat.with_structured_output(Cat, method=method, include_raw=True).invoke(ASK)
        assert out["parsing_error"] is None and out["parsed"] == want, method
        assert out["raw"].response_metadata["finish_reason"] in ("stop", "tool_calls")
    # json_mode: any JSON object; this model's free strings never close, so the call fails loudly,
    # and the server's text is the offline constrained text (the model's limit, not the server's)
    small = chat.bind(max_tokens=24)
    with pytest.raises(openai.LengthFinishReasonError):
        small.with_structured_output(Cat, method="json_mode").invoke(ASK)
    raw = client.chat.completions.create(model=MODEL, messages=ASK, temperature=0, max_tokens=24,
                                         response_format={"type": "json_object"})
    assert raw.choices[0].finish_reason == "length"
    assert raw.choices[0].message.content == constrained(offline, ASK, 24, json_object=True)


def test_langchain_bind_tools_any(chat):
    from langchain_core.tools import tool

    @tool
    def get_weather(city: Literal["東京", "大阪", "京都"], days: int = Field(ge=1, le=7)) -> str:
        """天気予報を調べる。"""
        return "晴れ"

    for parallel in (None, False):
        kw = {} if parallel is None else {"parallel_tool_calls": parallel}
        r = chat.bind_tools([get_weather], tool_choice="any", **kw).invoke("東京の天気は")
        assert r.tool_calls and not r.invalid_tool_calls, r
        assert r.response_metadata["finish_reason"] == "tool_calls"
        for call in r.tool_calls:
            assert call["name"] == "get_weather" and call["args"]["city"] in ("東京", "大阪", "京都")
            assert 1 <= call["args"]["days"] <= 7
        if parallel is False:
            assert len(r.tool_calls) == 1


def instructor_tool_schema(model: type[BaseModel]) -> dict:
    """instructor's generate_openai_schema: name, description, parameters without titles."""
    schema = model.model_json_schema()
    params = {k: v for k, v in schema.items() if k not in ("title", "description")}
    return {"name": model.__name__, "description": model.__doc__, "parameters": params}


def test_instructor_tools_and_json_schema_modes(client, offline):
    tool = instructor_tool_schema(Cat)
    assert "additionalProperties" not in json.dumps(tool)      # the schema that used to run away
    r = client.chat.completions.create(
        model=MODEL, messages=ASK, temperature=0,
        tools=[{"type": "function", "function": tool}],
        tool_choice={"type": "function", "function": {"name": "Cat"}})
    (call,) = r.choices[0].message.tool_calls
    got = Cat.model_validate_json(call.function.arguments)
    r = client.chat.completions.create(
        model=MODEL, messages=ASK, temperature=0,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "Cat", "schema": Cat.model_json_schema()}})
    assert r.choices[0].finish_reason == "stop"
    content = r.choices[0].message.content
    assert content == constrained(offline, ASK, json=Cat.model_json_schema())
    assert Cat.model_validate_json(content) == got


def test_chat_without_max_tokens_gets_the_rest_of_the_context(client, chat, offline):
    text = "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。" * 20
    ids = offline.tokenizer.apply_chat_template([{"role": "user", "content": text}])
    rest = 24                                       # cut the prompt so 24 tokens of room are left
    while len(ids) > offline.config.max_model_len - rest:
        text = text[:-1]
        ids = offline.tokenizer.apply_chat_template([{"role": "user", "content": text}])
    messages = [{"role": "user", "content": text}]
    room = offline.config.max_model_len - len(ids)
    assert room > 16                                # more than the old 16-token default
    want = offline.chat(messages, SamplingParams(temperature=0, max_tokens=room), use_tqdm=False)[0]
    r = client.chat.completions.create(model=MODEL, messages=messages, temperature=0)
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == room
    assert r.choices[0].message.content == want.text and r.choices[0].finish_reason == "length"
    lc = chat.invoke(messages)
    assert lc.content == want.text and lc.usage_metadata["output_tokens"] == room

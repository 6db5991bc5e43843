"""Structured outputs (features/structured_output.py, llguidance): a constrained request's text always parses as its
constraint asks, even with the tiny default model; the requests beside it in the batch keep their greedy tokens."""
from __future__ import annotations

import json
import re

import httpx
import jsonschema
import openai
import pytest

from minimal_engine import LLM, SamplingParams
from minimal_engine.sampling_params import StructuredOutputsParams
from minimal_engine.serve.app import ServerThread, build_app

SCHEMAS = [     # bounded (maxLength, enum, maximum), so that the tiny model can finish them within max_tokens
    {"type": "object", "properties": {"名前": {"type": "string", "maxLength": 6}}, "required": ["名前"],
     "additionalProperties": False},
    {"type": "object", "properties": {"年齢": {"type": "integer", "minimum": 0, "maximum": 120},
                                      "猫": {"type": "boolean"}}, "required": ["年齢", "猫"], "additionalProperties": False},
    {"type": "object", "properties": {"色": {"enum": ["赤", "青", "白"]}, "数": {"type": "integer", "minimum": 1,
                                                                              "maximum": 9}},
     "required": ["色", "数"], "additionalProperties": False},
    {"type": "object", "properties": {"タグ": {"type": "array", "items": {"enum": ["猫", "犬"]}, "maxItems": 3}},
     "required": ["タグ"], "additionalProperties": False},
]
PROMPTS = ["吾輩は猫である。", "名前はまだ無い。", "どこで生れたか", "とんと見当がつかぬ。"]


@pytest.fixture(scope="module")
def llm():
    return LLM(max_num_seqs=8)       # the shipped default model


@pytest.mark.parametrize("schema", SCHEMAS)
def test_every_output_parses_against_its_schema_greedy_and_sampled(llm, schema):
    so = StructuredOutputsParams(json=schema)
    params = [SamplingParams(temperature=0, max_tokens=48, structured_outputs=so)] + [
        SamplingParams(temperature=1.0, seed=seed, max_tokens=48, structured_outputs=so) for seed in range(3)]
    for prompt in PROMPTS[:2]:
        for out in llm.generate([prompt] * len(params), params, use_tqdm=False):
            assert out.finish_reason == "stop", out.text
            jsonschema.validate(json.loads(out.text), schema)


def test_regex_and_choice_hold(llm):
    outs = llm.generate(PROMPTS, [SamplingParams(temperature=1.0, seed=i, max_tokens=16,
                                                 structured_outputs=StructuredOutputsParams(regex=r"[0-9]{3}-[0-9]{4}"))
                                  for i in range(len(PROMPTS))], use_tqdm=False)
    assert all(re.fullmatch(r"[0-9]{3}-[0-9]{4}", o.text) for o in outs), [o.text for o in outs]
    choice = StructuredOutputsParams(choice=["はい", "いいえ"])
    outs = llm.generate(PROMPTS, SamplingParams(temperature=1.0, seed=1, max_tokens=8, structured_outputs=choice),
                        use_tqdm=False)
    assert {o.text for o in outs} <= {"はい", "いいえ"}


def test_unconstrained_requests_keep_their_greedy_tokens_beside_constrained_ones(llm):
    plain = SamplingParams(temperature=0, max_tokens=24)
    alone = llm.generate(PROMPTS, plain, use_tqdm=False)
    constrained = SamplingParams(temperature=0, max_tokens=24,
                                 structured_outputs=StructuredOutputsParams(json=SCHEMAS[0]))
    mixed = llm.generate(PROMPTS + PROMPTS, [plain] * 4 + [constrained] * 4, use_tqdm=False)
    assert [o.token_ids for o in mixed[:4]] == [o.token_ids for o in alone]


def test_a_constraint_that_does_not_compile_is_refused_before_queueing(llm):
    with pytest.raises(ValueError, match="structured_outputs"):
        llm.generate("猫", SamplingParams(structured_outputs=StructuredOutputsParams(regex="[0-9")), use_tqdm=False)
    with pytest.raises(ValueError, match="exactly one"):
        StructuredOutputsParams(regex="a", choice=["a"])
    assert not llm.engine.has_unfinished_requests()


@pytest.fixture(scope="module")
def server(llm):
    with ServerThread(build_app(llm, max_queue=8)) as s:
        yield s


def test_the_official_client_gets_json_that_matches_its_schema(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    schema = SCHEMAS[2]
    out = client.chat.completions.create(
        model="minimal-ja (default)", messages=[{"role": "user", "content": "猫の色は"}], max_tokens=48,
        response_format={"type": "json_schema", "json_schema": {"name": "neko", "schema": schema}})
    jsonschema.validate(json.loads(out.choices[0].message.content), schema)
    obj = client.completions.create(model="minimal-ja (default)", prompt="吾輩は", max_tokens=48,
                                    extra_body={"guided_choice": ["猫", "犬"]})
    assert obj.choices[0].text in ("猫", "犬")
    bad = httpx.post(server.url + "/v1/completions", json={"prompt": "猫", "guided_regex": "[0-9"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "structured_outputs", bad.text


def test_the_mask_cost_benchmark_reports_both_runs_and_the_mask_alone(tmp_path):
    from conftest import load_benchmark
    res = load_benchmark("structured_output_cost").main(["--repeats", "1", "--tokens", "8", "--threads", "1",
                                                         "--out", str(tmp_path)])
    assert set(res["tpot_ms_median"]) == {"plain", "json_schema"} and res["ratio_json_to_plain"] > 0
    assert res["constrained_text"].startswith('{"数":[') and 0 < res["mask_ms_median"] <= res["mask_ms_max"]
    assert json.loads((tmp_path / "structured_output_cost.json").read_text())["tokens"] == 8


WEATHER = {"type": "function", "function": {"name": "天気", "description": "都市の天気", "parameters": {
    "type": "object", "properties": {"都市": {"enum": ["東京", "大阪"]}, "日数": {"type": "integer", "minimum": 1,
                                                                           "maximum": 7}},
    "required": ["都市", "日数"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {"name": "時刻", "parameters": {
    "type": "object", "properties": {"時差": {"type": "integer", "minimum": -12, "maximum": 12}}, "required": ["時差"],
    "additionalProperties": False}}}


def test_forced_tool_calls_through_the_official_client(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    messages = [{"role": "user", "content": "東京の天気は"}]
    named = client.chat.completions.create(model="minimal-ja (default)", messages=messages, max_tokens=48,
                                           tools=[WEATHER, CLOCK],
                                           tool_choice={"type": "function", "function": {"name": "天気"}})
    call = named.choices[0].message.tool_calls[0]
    assert call.function.name == "天気" and named.choices[0].message.content is None
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    assert named.choices[0].finish_reason == "stop"
    required = client.chat.completions.create(model="minimal-ja (default)", messages=messages, max_tokens=160,
                                              temperature=0, tools=[WEATHER, CLOCK], tool_choice="required",
                                              parallel_tool_calls=False)
    calls = required.choices[0].message.tool_calls
    assert len(calls) == 1 and required.choices[0].finish_reason == "tool_calls"
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, CLOCK)}
    for c in calls:
        jsonschema.validate(json.loads(c.function.arguments), schemas[c.function.name])
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="minimal-ja (default)", messages=messages, tools=[WEATHER],
                                       tool_choice={"type": "function", "function": {"name": "無い"}})

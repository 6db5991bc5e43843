"""Every request field is implemented with vLLM's meaning or refused by name (serve/fields.py); echo and logprobs
as lm-evaluation-harness reads them; logit_bias and min_p; the message roles OpenAI's clients send; 404s."""
from __future__ import annotations

import json
import logging
import math

import httpx
import openai
import pytest

from minimal_engine import LLM, SamplingParams
from minimal_engine.serve.app import ServerThread, build_app
from minimal_engine.serve.fields import IMPLEMENTED, NO_EFFECT, REFUSED, VLLM_EXTRAS


@pytest.fixture(scope="module")
def llm(llama_dir):
    return LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=16)


@pytest.fixture(scope="module")
def offline(llama_dir):
    """A second engine on the same weights for offline references: the server's engine loop steps `llm` from
    its own thread, so calling llm.generate beside it races with that loop (seen as intermittent failures)."""
    return LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=16)


@pytest.fixture(scope="module")
def server(llm):
    with ServerThread(build_app(llm, max_queue=16, served_model_name="tiny")) as s:
        yield s


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def sdk_fields(module) -> set[str]:
    return set(module.CompletionCreateParamsBase.__annotations__) | {"stream"}


def test_every_field_of_the_openai_schemas_is_implemented_accepted_or_refused():
    from openai.types import completion_create_params as completions
    from openai.types.chat import completion_create_params as chat
    for route, module in (("completions", completions), ("chat", chat)):
        known = IMPLEMENTED[route] | NO_EFFECT | set(REFUSED)
        assert not sdk_fields(module) - known, f"{route}: fields nobody decided: {sdk_fields(module) - known}"
    tables = [IMPLEMENTED["completions"] | IMPLEMENTED["chat"] | VLLM_EXTRAS, NO_EFFECT, set(REFUSED)]
    for i, a in enumerate(tables):
        for b in tables[i + 1:]:
            assert not a & b, f"a field in two tables: {a & b}"


@pytest.mark.parametrize("body, field", [
    ({"best_of": 2}, "best_of"), ({"suffix": "。"}, "suffix"), ({"use_beam_search": True}, "use_beam_search"),
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"guided_regex": "[0-9]", "guided_choice": ["a"]}, "guided_regex"),
    ({"structured_outputs": {"regex": "[0-9", "choice": None}}, "structured_outputs"),
])
def test_a_field_that_is_not_implemented_is_refused_by_name(server, body, field):
    r = post(server, "/v1/completions", {"prompt": "abc", "max_tokens": 2, **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


def test_tool_choice_auto_is_refused_by_name_and_defaults_pass(server):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    r = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "tools": [tool]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice" and "auto" in r.text
    ok = post(server, "/v1/completions", {"prompt": "abc", "max_tokens": 2, "best_of": 1, "suffix": None,
                                          "user": "someone", "response_format": {"type": "text"}})
    assert ok.status_code == 200, ok.text


def test_an_unknown_field_is_logged_once_and_the_request_runs(server, caplog):
    with caplog.at_level(logging.WARNING, logger="minimal_engine.serve"):
        r = post(server, "/v1/completions", {"prompt": "abc", "max_tokens": 2, "frobnicate": 1, "zzz": True})
    assert r.status_code == 200
    hits = [rec.getMessage() for rec in caplog.records if "ignored fields" in rec.getMessage()]
    assert hits == ["ignored fields: frobnicate, zzz"]


def offline_prompt_logprobs(engine, ids: list[int]) -> list[float]:
    out = engine.generate([ids], SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=1), use_tqdm=False)[0]
    return [next(iter(e.values())).logprob for e in out.prompt_logprobs[1:]]


def test_echo_with_max_tokens_0_returns_the_prompt_and_its_logprobs_as_the_engine_computes_them(server, llm,
                                                                                            offline):
    """lm-evaluation-harness's loglikelihood request: echo, logprobs=1, max_tokens=0, token-id and text prompts."""
    ids = llm.tokenizer.encode("吾輩は猫である。名前はまだ無い。")
    r = post(server, "/v1/completions", {"model": "tiny", "prompt": [ids, "吾輩は猫である。"], "echo": True,
                                         "logprobs": 1, "max_tokens": 0, "temperature": 0})
    assert r.status_code == 200, r.text
    first, second = r.json()["choices"]
    assert first["text"] == llm.tokenizer.decode(ids, skip_special_tokens=False)
    assert second["text"] == "吾輩は猫である。" and first["finish_reason"] == "length"
    lp = first["logprobs"]
    assert len(lp["tokens"]) == len(ids) and lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["text_offset"] == sorted(lp["text_offset"]) and lp["text_offset"][0] == 0
    for got, want in zip(lp["token_logprobs"][1:], offline_prompt_logprobs(offline, ids)):
        assert math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-4)
    assert "prompt_logprobs" not in first           # not asked for: echo's logprobs only
    assert r.json()["usage"]["completion_tokens"] == 0


def test_echo_puts_the_prompt_in_front_of_the_output_streamed_or_not(server, llm):
    body = {"prompt": "吾輩は", "echo": True, "logprobs": 1, "max_tokens": 3, "temperature": 0}
    whole = post(server, "/v1/completions", body).json()["choices"][0]
    plain = post(server, "/v1/completions", {**body, "echo": False}).json()["choices"][0]
    assert whole["text"] == "吾輩は" + plain["text"]
    n = len(llm.tokenizer.encode("吾輩は"))
    # equal up to float rounding: with echo the prefill's lm_head runs over every prompt row, not the last one only
    assert whole["logprobs"]["token_logprobs"][n:] == pytest.approx(plain["logprobs"]["token_logprobs"], abs=1e-4)
    assert whole["logprobs"]["token_logprobs"][0] is None
    assert whole["logprobs"]["text_offset"][n] == len("吾輩は")
    with httpx.stream("POST", server.url + "/v1/completions", json={**body, "stream": True}, timeout=60) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert "".join(e["choices"][0]["text"] for e in events) == whole["text"]


def test_max_tokens_0_without_echo_is_refused(server):
    r = post(server, "/v1/completions", {"prompt": "abc", "max_tokens": 0})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"


def test_logit_bias_and_min_p_have_vllm_meanings(server, llm, offline):
    base = {"prompt": "吾輩は", "max_tokens": 4, "temperature": 0}
    forced = post(server, "/v1/completions", {**base, "logit_bias": {"7": 100}}).json()["choices"][0]
    assert llm.tokenizer.encode(forced["text"]) == [7] * 4 or forced["text"] == llm.tokenizer.decode([7] * 4)
    biased = offline.generate(["吾輩は"], SamplingParams(temperature=0, max_tokens=4, logit_bias={7: 100}),
                              use_tqdm=False)[0]
    assert biased.token_ids == [7, 7, 7, 7]
    greedy = offline.generate(["吾輩は"], SamplingParams(temperature=0, max_tokens=6), use_tqdm=False)[0]
    only_top = offline.generate(["吾輩は"], SamplingParams(temperature=1.0, min_p=1.0, max_tokens=6, seed=3),
                            use_tqdm=False)[0]
    assert only_top.token_ids == greedy.token_ids    # min_p=1 keeps only the most likely token
    for bad in ({"logit_bias": {"x": 1}}, {"logit_bias": {"7": 101}}, {"min_p": 2}):
        r = post(server, "/v1/completions", {**base, **bad})
        assert r.status_code == 400 and r.json()["error"]["param"] in bad, r.text


def test_developer_role_null_assistant_content_and_tool_turns(server):
    def chat(messages):
        return post(server, "/v1/chat/completions", {"messages": messages, "max_tokens": 4, "temperature": 0})
    system = chat([{"role": "system", "content": "短く"}, {"role": "user", "content": "猫"}])
    developer = chat([{"role": "developer", "content": "短く"}, {"role": "user", "content": "猫"}])
    assert developer.status_code == 200
    assert developer.json()["choices"][0]["message"] == system.json()["choices"][0]["message"]
    assert chat([{"role": "user", "content": "猫"}, {"role": "assistant", "content": None},
                 {"role": "user", "content": "犬"}]).status_code == 200
    tool = chat([{"role": "user", "content": "猫"}, {"role": "tool", "content": "1", "tool_call_id": "x"}])
    assert tool.status_code == 400 and "tool results" in tool.json()["error"]["message"]


def test_unknown_models_are_404_and_models_retrieve_works(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    assert client.models.retrieve("tiny").id == "tiny"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4")
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4", prompt="abc", max_tokens=2)


def test_vllm_prompt_dicts_work_offline(offline):
    llm = offline
    ids = llm.tokenizer.encode("吾輩は")
    sp = SamplingParams(temperature=0, max_tokens=4)
    plain, tokens, text = llm.generate([ids, {"prompt_token_ids": ids}, {"prompt": "吾輩は"}], sp, use_tqdm=False)
    assert plain.token_ids == tokens.token_ids == text.token_ids
    assert llm.generate({"prompt_token_ids": ids}, sp, use_tqdm=False)[0].token_ids == plain.token_ids
    with pytest.raises(TypeError, match="prompt_token_ids"):
        llm.generate([{"tokens": ids}], sp, use_tqdm=False)


def test_lm_evaluation_harness_loglikelihood_replay_scores_as_the_engine_does(server, llm, offline):
    """lm-eval's local-completions loglikelihood requests, replayed as it sends them (batched token ids, echo=True,
    logprobs=1, max_tokens=1, temperature=0, seed) and parsed as it parses them (token_logprobs[ctxlen:-1], is_greedy
    from top_logprobs): the sums equal the engine's own prompt logprobs, so a multiple-choice pick is the engine's."""
    tok = llm.tokenizer
    context = tok.encode("問い：猫は何と鳴きますか。答え：")
    choices = [tok.encode(c) for c in ("にゃあ", "わん", "もう", "こけこっこう")]
    prompts = [context + c for c in choices]
    r = post(server, "/v1/completions", {"model": "tiny", "prompt": prompts, "echo": True, "logprobs": 1,
                                         "max_tokens": 1, "temperature": 0, "seed": 1234})
    assert r.status_code == 200, r.text
    scores = []
    for choice, ids in zip(sorted(r.json()["choices"], key=lambda c: c["index"]), prompts):
        lp = choice["logprobs"]
        assert len(lp["token_logprobs"]) == len(ids) + 1             # the prompt, then the one generated token
        part = lp["token_logprobs"][len(context):-1]
        assert all(t <= max(top.values()) + 1e-6 for t, top in zip(part, lp["top_logprobs"][len(context):-1]))
        scores.append(sum(part))
    want_scores = [sum(offline_prompt_logprobs(offline, ids)[len(context) - 1:]) for ids in prompts]
    for got, want in zip(scores, want_scores):
        assert math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-4)
    assert scores.index(max(scores)) == want_scores.index(max(want_scores))


def test_tokenizer_info_answers_with_the_tokenizer_config(server, llm):
    """GET /tokenizer_info (vLLM's route, asked by lm-evaluation-harness when no tokenizer is given): the fields
    of tokenizer_config.json as plain JSON (no AddedToken objects), and the tokenizer's class (404 before)."""
    r = httpx.get(server.url + "/tokenizer_info", timeout=10)
    assert r.status_code == 200
    info = r.json()
    assert info["tokenizer_class"] == type(llm.tokenizer.hf).__name__
    assert info.get("eos_token") == llm.tokenizer.hf.eos_token
    assert json.loads(json.dumps(info)) == info

"""Stop strings, logprobs, penalties and min_tokens in the engine (vLLM's meanings and ranges), and the
server agreeing with LLM.generate / LLM.chat: same text, same tokens, same logprobs within float tolerance."""
from __future__ import annotations

import math
from types import SimpleNamespace

import httpx
import pytest
import torch

from minimal_engine import LLM, SamplingParams
from minimal_engine.engine.sampler import apply_penalties
from minimal_engine.serve.app import ServerThread, build_app

PROMPT = "吾輩は"


@pytest.fixture(scope="module")
def llm():
    return LLM(device="cpu", max_num_seqs=16)


def gen(llm, prompt=PROMPT, **kw):
    return llm.generate([prompt], SamplingParams(**({"temperature": 0, "max_tokens": 30} | kw)), use_tqdm=False)[0]


def test_stop_string_across_token_boundaries(llm):
    base = gen(llm)
    pieces = [llm.tokenizer.decode([t]) for t in base.token_ids]
    # "\n一" spans two tokens of the greedy loop 「、\n\n一、一、…」
    assert "\n一" in base.text and "\n一" not in pieces
    out = gen(llm, stop=["\n一"])
    assert out.text == base.text[:base.text.index("\n一")] and out.finish_reason == "stop"
    assert out.stop_reason == "\n一"
    inc = gen(llm, stop=["\n一"], include_stop_str_in_output=True)
    assert inc.text == base.text[:base.text.index("\n一") + 2]
    earliest = gen(llm, stop=["一、一", "\n\n"])        # the one that appears first in the text wins
    assert earliest.text == base.text[:base.text.index("\n\n")]


def test_stream_holds_back_a_possible_stop_string(llm):
    base = gen(llm)
    never = [o.new_text for o in llm.stream(PROMPT, SamplingParams(temperature=0, max_tokens=30, stop=["一、二"]))]
    assert "".join(never) == base.text                  # held-back text is sent when the request ends
    cut = [o.new_text for o in llm.stream(PROMPT, SamplingParams(temperature=0, max_tokens=30, stop=["\n一"]))]
    final = base.text[:base.text.index("\n一")]       # "、\n": the second "\n" starts the stop string
    assert "".join(cut) == final
    sent = ""
    for piece in cut:                                   # nothing sent is ever taken back: the "\n" before "一"
        sent += piece                                   # was held until "一" showed it belongs to the stop
        assert final.startswith(sent)
    texts = [o.text for o in llm.stream(PROMPT, SamplingParams(temperature=0, max_tokens=30, stop=["\n一"]))]
    assert all(final.startswith(t) for t in texts)      # out.text never shows held-back text either


def test_min_tokens_masks_stop_tokens(llm):
    base = gen(llm)
    one = llm.tokenizer.encode("一")[0]
    first = base.token_ids.index(one)
    stopped = gen(llm, stop_token_ids=[one])
    assert len(stopped.token_ids) == first + 1
    later = gen(llm, stop_token_ids=[one], min_tokens=first + 3)
    assert one not in later.token_ids[:first + 3] and len(later.token_ids) > first + 3


def test_logprobs_are_raw_model_output(llm):
    greedy = gen(llm, max_tokens=1, logprobs=5)
    hot = gen(llm, max_tokens=1, logprobs=5, temperature=1.5, seed=3, repetition_penalty=1.5)
    g, h = greedy.logprobs[0], hot.logprobs[0]
    top = sorted((lp for lp in g.values() if lp.rank <= 5), key=lambda lp: lp.rank)
    assert [lp.rank for lp in top] == [1, 2, 3, 4, 5] and greedy.token_ids[0] in g
    assert all(a.logprob >= b.logprob for a, b in zip(top, top[1:]))
    assert sum(math.exp(lp.logprob) for lp in top) <= 1 + 1e-6
    for tid, lp in h.items():                            # temperature and penalties do not change them
        if tid in g:
            assert lp.logprob == pytest.approx(g[tid].logprob, abs=1e-5)
    assert g[greedy.token_ids[0]].decoded_token == llm.tokenizer.decode([greedy.token_ids[0]])


@pytest.mark.parametrize("chunk", [2048, 3])
def test_prompt_logprobs_match_a_full_forward(chunk):
    """Scored from the prefill's rows, also when the prompt is prefilled in chunks of 3 tokens."""
    from transformers import AutoModelForCausalLM
    llm = LLM(device="cpu", max_num_batched_tokens=chunk)
    out = llm.generate(["吾輩は猫である。名前はまだ無い。", "東京"],
                       SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=2), use_tqdm=False)[0]
    ids = out.prompt_token_ids
    assert len(out.prompt_logprobs) == len(ids) and out.prompt_logprobs[0] is None
    model = AutoModelForCausalLM.from_pretrained(str(llm.model_path), dtype=torch.float32)
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].log_softmax(-1)
    for pos in range(1, len(ids)):
        entry = out.prompt_logprobs[pos]
        assert entry[ids[pos]].logprob == pytest.approx(ref[pos - 1, ids[pos]].item(), abs=1e-4)
        assert entry[ids[pos]].decoded_token == llm.tokenizer.decode([ids[pos]])
        assert len([lp for lp in entry.values() if lp.rank <= 2]) == 2


def test_penalty_formulas():
    seq = SimpleNamespace(output_token_ids=[1, 1, 2], token_ids=[3, 1, 1, 2], num_prompt_tokens=1)
    logits = torch.tensor([1.0, 2.0, -2.0, 4.0, 5.0])
    p = SamplingParams(repetition_penalty=2.0)
    assert apply_penalties(logits, seq, p).tolist() == [1.0, 1.0, -4.0, 2.0, 5.0]
    p = SamplingParams(frequency_penalty=0.5, presence_penalty=0.25)
    assert apply_penalties(logits, seq, p).tolist() == [1.0, 2.0 - 1.0 - 0.25, -2.0 - 0.5 - 0.25, 4.0, 5.0]


def test_repetition_penalty_breaks_the_greedy_loop(llm):
    assert gen(llm).text.count("一、") > 5
    assert gen(llm, repetition_penalty=1.3).text.count("一、") < 3


@pytest.mark.parametrize("kwargs, start", [
    (dict(presence_penalty=2.5), "presence_penalty must be in [-2, 2]"),
    (dict(frequency_penalty=float("nan")), "frequency_penalty must be in [-2, 2]"),
    (dict(repetition_penalty=0.0), "repetition_penalty must be greater than zero"),
    (dict(min_tokens=-1), "min_tokens"),
    (dict(min_tokens=5, max_tokens=4), "min_tokens"),
    (dict(logprobs=21), "logprobs must be None or an integer in [0, 20]"),
    (dict(stop=[""]), "stop must be"),
    (dict(stop=[3]), "stop must be"),
    (dict(prompt_logprobs=21), "prompt_logprobs must be None or an integer in [0, 20]"),
])
def test_bad_values_are_refused(kwargs, start):
    with pytest.raises(ValueError) as e:
        SamplingParams(**kwargs)
    assert str(e.value).startswith(start)


def test_server_agrees_with_offline(llm):
    prompts = ["吾輩は", "東京の空は"]
    offline = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=12, logprobs=3), use_tqdm=False)
    seeded = gen(llm, temperature=0.9, seed=11, max_tokens=12, logprobs=1)
    chat = llm.chat([{"role": "user", "content": "猫とは"}], SamplingParams(temperature=0, max_tokens=10,
                                                                          logprobs=2), use_tqdm=False)[0]
    with ServerThread(build_app(llm)) as s:
        def post(path, body):
            r = httpx.post(s.url + path, json=body, timeout=60)
            assert r.status_code == 200, r.text
            return r.json()
        r = post("/v1/completions", {"prompt": prompts, "max_tokens": 12, "temperature": 0, "logprobs": 3})
        rs = post("/v1/completions", {"prompt": PROMPT, "max_tokens": 12, "temperature": 0.9, "seed": 11,
                                      "logprobs": 1})
        rp = post("/v1/completions", {"prompt": PROMPT, "max_tokens": 1, "prompt_logprobs": 1})
        rc = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "猫とは"}], "max_tokens": 10,
                                           "temperature": 0, "logprobs": True, "top_logprobs": 2})
    for out, choice in zip(offline + [seeded], r["choices"] + rs["choices"]):
        assert choice["text"] == out.text
        lp = choice["logprobs"]
        assert lp["tokens"] == [llm.tokenizer.decode([t]) for t in out.token_ids]
        want = [e[t].logprob for e, t in zip(out.logprobs, out.token_ids)]
        assert lp["token_logprobs"] == pytest.approx(want, abs=1e-5)
    plp = rp["choices"][0]["prompt_logprobs"]
    ids = llm.tokenizer.encode(PROMPT)
    assert plp[0] is None and len(plp) == len(ids)
    ref = gen(llm, max_tokens=1, prompt_logprobs=1).prompt_logprobs
    assert [e[str(t)]["logprob"] for e, t in zip(plp[1:], ids[1:])] == pytest.approx(
        [e[t].logprob for e, t in zip(ref[1:], ids[1:])], abs=1e-5)
    assert rc["choices"][0]["message"]["content"] == chat.text
    got = [t["logprob"] for t in rc["choices"][0]["logprobs"]["content"]]
    assert got == pytest.approx([e[t].logprob for e, t in zip(chat.logprobs, chat.token_ids)], abs=1e-5)


def test_prompt_logprobs_under_prefix_caching_compute_every_token():
    """As vLLM: a request for prompt logprobs reads nothing from the prefix cache (every prompt token
    is computed), so its logprobs equal an engine's without caching, even when the prefix is cached.
    Before: refused with a ValueError."""
    params = SamplingParams(prompt_logprobs=1, max_tokens=1)
    prompt = PROMPT * 12                                     # two full blocks of 16 and more
    plain = LLM(device="cpu", num_kv_blocks=16).generate([prompt], params, use_tqdm=False)[0]
    cached = LLM(device="cpu", enable_prefix_caching=True, num_kv_blocks=16)
    cached.generate([prompt], SamplingParams(max_tokens=1), use_tqdm=False)       # fills the cache
    out = cached.generate([prompt], params, use_tqdm=False)[0]
    assert out.num_cached_tokens == 0
    want = [None if d is None else d[t].logprob for d, t in zip(plain.prompt_logprobs, plain.prompt_token_ids)]
    got = [None if d is None else d[t].logprob for d, t in zip(out.prompt_logprobs, out.prompt_token_ids)]
    assert got == pytest.approx(want, abs=1e-5)
    again = cached.generate([prompt], SamplingParams(max_tokens=1), use_tqdm=False)[0]
    assert again.num_cached_tokens > 0                     # the others still read the cache


def test_server_n_agrees_with_offline_n(llm):
    offline = llm.generate([PROMPT], SamplingParams(temperature=1.0, seed=4, n=3, max_tokens=8), use_tqdm=False)[0]
    with ServerThread(build_app(llm)) as s:
        r = httpx.post(s.url + "/v1/completions", timeout=60,
                       json={"prompt": PROMPT, "n": 3, "seed": 4, "temperature": 1.0, "max_tokens": 8}).json()
    assert [c["text"] for c in r["choices"]] == [o.text for o in offline.outputs]

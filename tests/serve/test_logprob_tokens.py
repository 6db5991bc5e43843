"""Logprob token names, bytes and text_offset for tokens inside a UTF-8 character (issue 42,
client defect 4), and vLLM's return_tokens_as_token_ids. The default model's byte-level BPE splits
many Japanese characters (・［］ and rare kanji) over two tokens; each such token used to be named
"�", with bytes [239, 191, 189], one character of text_offset, and top_logprobs keys that
collided."""
from __future__ import annotations

import json

import httpx
import pytest

from minimal_engine import LLM
from minimal_engine.serve.app import ServerThread, build_app
from minimal_engine.serve.token_text import TokenText

SPLIT = "質問：猫とは［＃「猫」に傍点］・鼈甲の𠮷野家\n回答："     # several characters split over tokens


@pytest.fixture(scope="module")
def llm():
    return LLM(device="cpu", max_num_seqs=8)


@pytest.fixture(scope="module")
def url(llm):
    with ServerThread(build_app(llm, served_model_name="minimal-ja")) as s:
        yield s.url


def post(url, path, body) -> dict:
    r = httpx.post(url + path, json={"model": "minimal-ja", **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def partial(llm, ids) -> list[int]:
    """Positions of tokens that decode to U+FFFD alone: parts of a character."""
    return [j for j, t in enumerate(ids) if "\ufffd" in llm.tokenizer.decode([t], False)]


def char_offset(raw: bytes, byte_pos: int) -> int:
    """Characters wholly before byte_pos in UTF-8 text raw: a token inside a character is at that
    character's offset."""
    return len(raw[:byte_pos].decode("utf-8", "ignore"))


def test_echo_names_offsets_and_keys_of_split_characters(url, llm):
    ids = llm.tokenizer.encode(SPLIT)
    assert len(partial(llm, ids)) >= 4                   # the case under test is in the prompt
    lp = post(url, "/v1/completions", {"prompt": SPLIT, "echo": True, "logprobs": 5,
                                       "max_tokens": 0})["choices"][0]["logprobs"]
    text = TokenText(llm.tokenizer)
    raws = [text.bytes_of(t) for t in ids]
    assert b"".join(raws) == SPLIT.encode("utf-8")       # each token's own bytes, joined: the text
    assert len(lp["tokens"]) == len(ids)
    for j, (name, raw) in enumerate(zip(lp["tokens"], raws)):
        try:
            assert name == raw.decode("utf-8")
        except UnicodeDecodeError:                       # OpenAI's name for part of a character
            assert name == "bytes:" + "".join(f"\\x{b:02x}" for b in raw) and "\ufffd" not in name
        start = sum(map(len, raws[:j]))
        assert lp["text_offset"][j] == char_offset(SPLIT.encode("utf-8"), start)
        assert 0 <= lp["text_offset"][j] < len(SPLIT)
    for j in range(1, len(ids)):                 # no key shared by two tokens: 5 or 6 entries
        top = lp["top_logprobs"][j]
        assert 5 <= len(top) <= 6 and top[lp["tokens"][j]] == pytest.approx(lp["token_logprobs"][j])


def test_generated_split_tokens_stream_and_full_agree(url, llm):
    body = {"prompt": SPLIT, "max_tokens": 24, "temperature": 0, "logprobs": 3, "ignore_eos": True}
    full = post(url, "/v1/completions", body)["choices"][0]
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True},
                      timeout=120) as r:
        chunks = [line[6:] for line in r.iter_lines() if line.startswith("data: {")]
    parts = [json.loads(c)["choices"][0] for c in chunks]
    offsets = [o for p in parts if p["logprobs"] for o in p["logprobs"]["text_offset"]]
    tokens = [t for p in parts if p["logprobs"] for t in p["logprobs"]["tokens"]]
    assert offsets == full["logprobs"]["text_offset"] and tokens == full["logprobs"]["tokens"]
    assert all(0 <= o <= len(full["text"]) for o in offsets)
    assert offsets == sorted(offsets)


def test_chat_bytes_are_the_token_bytes(url, llm):
    """The greedy answer to 猫とは starts 「・［」: ［ is two tokens (the review's case)."""
    out = post(url, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "猫とは"}], "max_tokens": 12, "temperature": 0,
        "logprobs": True, "top_logprobs": 3})["choices"][0]
    content = out["logprobs"]["content"]
    joined = b"".join(bytes(c["bytes"]) for c in content)
    text = out["message"]["content"].encode("utf-8")
    assert joined.startswith(text) and len(joined) - len(text) < 4   # a cut last char is dropped
    split = [c for c in content if c["token"].startswith("bytes:\\x")]
    assert split and all(bytes(c["bytes"]).decode("utf-8", "replace") != c["token"] for c in split)
    names = [t["token"] for c in content for t in c["top_logprobs"]]
    assert "\ufffd" not in "".join(names) + "".join(c["token"] for c in content)
    for c in content:
        assert len({t["token"] for t in c["top_logprobs"]}) == 3
        assert c["top_logprobs"][0]["bytes"] == c["bytes"]        # greedy: chosen is the top one


def test_return_tokens_as_token_ids(url, llm):
    ids = llm.tokenizer.encode(SPLIT)
    lp = post(url, "/v1/completions", {"prompt": SPLIT, "echo": True, "logprobs": 2,
                                       "max_tokens": 0, "return_tokens_as_token_ids": True})
    lp = lp["choices"][0]["logprobs"]
    assert lp["tokens"] == [f"token_id:{t}" for t in ids]
    assert all(k.startswith("token_id:") for top in lp["top_logprobs"][1:] for k in top)
    body = {"prompt": SPLIT, "max_tokens": 6, "temperature": 0, "logprobs": 1}
    named = post(url, "/v1/completions", body)["choices"][0]["logprobs"]["tokens"]
    gen = post(url, "/v1/completions", {**body, "return_tokens_as_token_ids": True})
    got = [int(t.split(":")[1]) for t in gen["choices"][0]["logprobs"]["tokens"]]
    text = TokenText(llm.tokenizer)
    assert [text.name(t) for t in got] == named and len(got) == 6
    chat = post(url, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "猫とは"}], "max_tokens": 3, "temperature": 0,
        "logprobs": True, "top_logprobs": 2, "return_tokens_as_token_ids": True})["choices"][0]
    assert all(c["token"].startswith("token_id:") for c in chat["logprobs"]["content"])
    bad = httpx.post(url + "/v1/completions", json={"prompt": "猫", "return_tokens_as_token_ids": 1},
                     timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "return_tokens_as_token_ids"

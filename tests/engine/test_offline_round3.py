"""The third attack round's offline defects L10 and L11: LLM.chat checks its messages as the server
does, and SamplingParams and prompts take what vLLM takes (top_k=0, numpy integers)."""
from __future__ import annotations

import numpy as np
import pytest

from minimal_engine import LLM, SamplingParams
from minimal_engine.engine.requests import conversations

GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(llama_dir):
    return LLM(llama_dir, dtype="float32", device="cpu", max_num_seqs=4)


@pytest.mark.parametrize("messages, expected", [
    ([{"role": "user"}], r"messages\[0\]\.content must be a string or a list of text parts, "
                         "got NoneType"),
    ([{"role": "user", "content": None}], r"messages\[0\]\.content must be a string"),
    ([{"role": "robot", "content": "猫"}],
     r"messages\[0\] must be \{'role': system\|developer\|user\|assistant, 'content': string\}, "
     "got role 'robot'"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
     r"messages\[0\]\.content\[0\] must be a text part"),
    ([{"role": "user", "content": "a\ud800"}], r"messages\[0\]\.content contains a lone surrogate"),
    ([[{"role": "user", "content": "猫"}], [{"role": "user", "content": 5}]],
     r"conversation 1: messages\[0\]\.content must be a string"),
])
def test_llm_chat_refuses_messages_the_server_refuses(llm, messages, expected):
    """L10. Before: these were rendered into the prompt and generated (a content-part list as
    Python's repr of the list); the server refused them all with a 400. The check runs before the
    template, so the tiny model (no chat template) shows it too."""
    with pytest.raises(ValueError, match=expected):
        llm.chat(messages, GREEDY)


def test_messages_are_read_as_the_server_reads_them():
    """Text parts are joined (not Python's repr of the list), developer is the system role, an
    assistant turn may have no content."""
    convs = conversations([{"role": "developer", "content": "短く"},
                           {"role": "user", "content": [{"type": "text", "text": "吾輩は"},
                                                        {"type": "text", "text": "猫"}]},
                           {"role": "assistant", "content": None}])
    assert convs == [[{"role": "system", "content": "短く"}, {"role": "user", "content": "吾輩は猫"},
                      {"role": "assistant", "content": ""}]]


def test_top_k_zero_means_all_tokens_as_vllm(llm):
    """L11. Before: "top_k must be -1 (disabled) or an integer >= 1, got 0"; vLLM and this server
    read 0 as all tokens."""
    p = SamplingParams(top_k=0, temperature=1.0, seed=7, max_tokens=4, ignore_eos=True)
    assert p.top_k == -1
    q = SamplingParams(top_k=-1, temperature=1.0, seed=7, max_tokens=4, ignore_eos=True)
    assert llm.generate("吾輩は", p)[0].outputs[0].token_ids == \
        llm.generate("吾輩は", q)[0].outputs[0].token_ids
    with pytest.raises(ValueError, match="top_k must be -1 or 0 .all tokens. or an integer >= 1"):
        SamplingParams(top_k=-2)


def test_numpy_integers_are_taken_as_python_integers(llm):
    """L11. Before: np.int64 was refused for max_tokens and seed, and a list of np.int64 token ids
    got "prompt 0: a prompt must be a string ..." (or "token ids must be integers")."""
    p = SamplingParams(max_tokens=np.int64(4), seed=np.int64(3), n=np.int32(1), top_k=np.int64(5),
                       stop_token_ids=[np.int64(2)], logit_bias={np.int64(3): 1.0},
                       logprobs=np.int64(1), temperature=0.0, ignore_eos=True)
    assert (p.max_tokens, p.seed, p.stop_token_ids, p.logit_bias) == (4, 3, [2], {3: 1.0})
    assert all(type(v) is int for v in (p.max_tokens, p.seed, p.n, p.top_k, p.logprobs))
    ids = np.array([5, 6, 7])
    plain = llm.generate([[5, 6, 7]], GREEDY)[0].outputs[0].token_ids
    assert llm.generate([list(ids)], GREEDY)[0].outputs[0].token_ids == plain   # np.int64 items
    assert llm.generate(list(ids), GREEDY)[0].outputs[0].token_ids == plain     # one prompt
    assert llm.generate({"prompt_token_ids": list(ids)}, GREEDY)[0].prompt_token_ids == [5, 6, 7]
    with pytest.raises(ValueError, match="max_tokens must be an integer >= 1"):
        SamplingParams(max_tokens=np.bool_(True))      # numpy's bool is not an integer

"""Incremental detokenization never emits a broken character, even when byte-level BPE splits one."""
import pytest

from minimal_engine.model.tokenizer import REPLACEMENT, IncrementalDetokenizer, Tokenizer

TEXTS = ["吾輩は猫である。名前はまだ無い。", "東京の空は、どこまでも青い。\n次の行", "ＡＢＣ abc ｶﾀｶﾅ カタカナ 漢字 123 ①",
         "絵文字も😀大丈夫", "鬱蒼とした森"]


@pytest.fixture(scope="module")
def tokenizer(llama_dir):
    return Tokenizer(llama_dir)


@pytest.mark.parametrize("text", TEXTS)
def test_streamed_text_is_whole_characters_and_equals_decode(tokenizer, text):
    ids = tokenizer.encode(text)
    pieces_split = sum(REPLACEMENT in tokenizer.decode([i]) for i in ids)
    detok = IncrementalDetokenizer(tokenizer, tokenizer.encode("前置き"))
    deltas = [detok.add(i) for i in ids] + [detok.flush()]
    assert all(REPLACEMENT not in d for d in deltas)
    assert "".join(deltas) == text == detok.text
    if pieces_split:   # the tokenizer really did split characters, and we held text back for it
        assert "" in deltas[:-1]


def test_tokens_split_characters_in_this_tokenizer(tokenizer):
    """Guard for the test above: with a small byte-level vocabulary, rare kanji take several tokens."""
    assert any(REPLACEMENT in tokenizer.decode([i]) for i in tokenizer.encode("鬱蒼"))


def test_flush_emits_an_incomplete_tail(tokenizer):
    ids = tokenizer.encode("鬱")
    detok = IncrementalDetokenizer(tokenizer, [])
    for i in ids[:-1]:
        detok.add(i)
    assert detok.flush() == tokenizer.decode(ids[:-1])

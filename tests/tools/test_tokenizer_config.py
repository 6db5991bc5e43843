"""The bundled models' tokenizer_config.json loads in transformers 4.x and 5.x (issue 42, client
defect 6).

transformers 5 writes "tokenizer_class": "TokenizersBackend", a class transformers 4.x does not
have, so AutoTokenizer (what lm-evaluation-harness and guidellm call) failed there.
PreTrainedTokenizerFast exists in both; 5.x maps it to the same tokenizers backend. Checked here:
the folder names a class both versions have, and the pinned transformers loads it with the engine
tokenizer's ids, EOS and chat template.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import minimal_engine

ROOT = Path(minimal_engine.__file__).parent
FOLDERS = ["default_model", "draft_model", "draft_model_lm"]
TEXT = "吾輩は猫である。名前はまだ無い。［＃「猫」に傍点］ ｢𠮷野家｣ <|endoftext|>"


@pytest.mark.parametrize("folder", FOLDERS)
def test_tokenizer_config_names_a_class_transformers_4_and_5_have(folder):
    config = json.loads((ROOT / folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert "backend" not in config          # a transformers-5-only key


@pytest.mark.parametrize("folder", FOLDERS)
def test_pinned_transformers_loads_the_folder_with_the_engine_ids(folder):
    from tokenizers import Tokenizer as RawTokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from minimal_engine.model.tokenizer import Tokenizer

    path = ROOT / folder
    hf = AutoTokenizer.from_pretrained(str(path))
    fast = PreTrainedTokenizerFast.from_pretrained(str(path))      # the class the config names
    engine = Tokenizer(path)
    raw = RawTokenizer.from_file(str(path / "tokenizer.json")).encode(TEXT).ids
    assert hf.encode(TEXT) == fast.encode(TEXT) == engine.encode(TEXT) == raw
    assert hf.eos_token_id == fast.eos_token_id == engine.eos_token_id == 0
    assert engine.decode(raw, skip_special_tokens=False) == TEXT
    if folder != "draft_model":            # the distilled draft has no chat template of its own
        messages = [{"role": "user", "content": "猫とは"}]
        ids = fast.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "input_ids") else ids
        assert engine.apply_chat_template(messages) == list(ids)
        assert engine.decode(engine.apply_chat_template(messages)) == "質問：猫とは\n回答："

"""SFT data (spec §13.7): JSONL loading, prompt-masked samples on the real Gemma tokenizer,
and the loader's pinned permutation and checkpoint round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fucina
from fucina.data import (
    IGNORE_INDEX,
    EmptyDataset,
    InvalidLoaderState,
    Loader,
    LoaderState,
    MalformedJsonl,
    Pair,
    SampleTooLong,
    SftText,
    encode_pair,
    encode_prompt,
)


def test_loader_permutation_is_the_pinned_checkpoint_contract() -> None:
    loader = Loader(8, "shuffled", seed=42)
    assert loader.perm == [3, 6, 0, 7, 1, 2, 5, 4]
    loader.take(3)
    state = loader.state()
    expect = loader.take(8)  # crosses the epoch boundary
    assert expect[:5] == [7, 1, 2, 5, 4]  # the rest of epoch 0, then epoch 1 begins
    replay = Loader(8, "shuffled", seed=0)
    replay.restore(LoaderState.from_dict(json.loads(json.dumps(state.to_dict()))))
    assert replay.take(8) == expect
    # Every epoch is a permutation, and epochs differ.
    two = Loader(100, seed=1)
    first, second = two.take(100), two.take(100)
    assert sorted(first) == sorted(second) == list(range(100)) and first != second


def test_loader_sequential_and_errors() -> None:
    assert Loader(3, "sequential").take(7) == [0, 1, 2, 0, 1, 2, 0]
    with pytest.raises(EmptyDataset):
        Loader(0)
    with pytest.raises(ValueError, match="order"):
        Loader(3, "random")  # type: ignore[arg-type]
    with pytest.raises(InvalidLoaderState) as e:
        Loader(3).restore(LoaderState(seed=0, epoch=0, index=4))
    assert isinstance(e.value, fucina.FucinaError) and isinstance(e.value, ValueError)


def test_from_jsonl_reads_pairs_and_names_bad_lines(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text('{"q": "Hi", "a": "Hello ✓"}\n\n{"q": "2+2?", "a": "4", "extra": 1}\n', encoding="utf-8")
    text = SftText.from_jsonl(good, instruction_key="q", response_key="a")
    assert list(text) == [Pair("Hi", "Hello ✓"), Pair("2+2?", "4")]
    for i, line in enumerate(['{"q": "x"', "[1, 2]", '{"q": "x"}', '{"q": 1, "a": "y"}']):
        bad = tmp_path / f"bad{i}.jsonl"
        bad.write_text('{"q": "ok", "a": "ok"}\n' + line + "\n", encoding="utf-8")
        with pytest.raises(MalformedJsonl, match=rf"bad{i}\.jsonl:2"):
            SftText.from_jsonl(bad, instruction_key="q", response_key="a")
    assert len(SftText.from_pairs([("a", "b"), Pair("c", "d")])) == 2
    with pytest.raises(TypeError, match="pair 0"):
        SftText.from_pairs([("a", 1)])  # type: ignore[list-item]


def test_encode_pair_masks_the_prompt_and_supervises_the_stop_marker(gemma_path: Path) -> None:
    tok = fucina.Tokenizer.from_gguf(gemma_path)
    gemma = fucina.BuiltinTemplate(fucina.ChatFormat.GEMMA)
    pair = Pair("What is the capital of France?", "Paris.")
    prompt = encode_prompt(tok, gemma, pair.instruction)
    assert prompt[0] == tok.bos_id and prompt == tok.encode(
        gemma.render_turn(pair.instruction, first=True), add_special=False, parse_special=True
    )
    s = encode_pair(tok, gemma, pair)
    response = tok.encode(pair.response, add_special=False)
    stop = tok.encode(gemma.stop_marker, add_special=False, parse_special=True)
    assert len(stop) == 1
    assert s.inputs == prompt + response
    assert s.labels == [IGNORE_INDEX] * (len(prompt) - 1) + response + stop
    unmasked = encode_pair(tok, gemma, pair, mask_prompt=False, ignore_index=9999)
    assert unmasked.labels == prompt[1:] + response + stop
    cut = encode_pair(tok, gemma, pair, seq_max=len(prompt) + 1)
    assert len(cut.inputs) == len(cut.labels) == len(prompt) + 1 and cut.labels[-2:] == response[:2]
    with pytest.raises(SampleTooLong):
        encode_pair(tok, gemma, pair, seq_max=len(prompt) - 1)

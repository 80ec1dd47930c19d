"""fucina.Llama as a drop-in for llama_cpp.Llama: llama-cpp-python's README examples run unchanged, the
return shapes match its llama_types TypedDicts key by key, and the low-level API (tokenize, eval,
save_state / load_state) behaves as llama-cpp-python's does."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import fucina
from conftest import load_llamacpp_golden
from fucina import Llama
from fucina.llama import LlamaState, LogitsProcessorList, StoppingCriteriaList

# Key sets of llama-cpp-python 0.3.36's llama_types.py (required keys; NotRequired ones apart).
CREATE_COMPLETION_RESPONSE = {"id", "object", "created", "model", "choices", "usage"}
COMPLETION_CHOICE = {"text", "index", "logprobs", "finish_reason"}
COMPLETION_USAGE = {"prompt_tokens", "completion_tokens", "total_tokens"}
COMPLETION_LOGPROBS = {"text_offset", "token_logprobs", "tokens", "top_logprobs"}
CREATE_CHAT_COMPLETION_RESPONSE = {"id", "object", "created", "model", "choices", "usage"}
CHAT_COMPLETION_RESPONSE_CHOICE = {"index", "message", "logprobs", "finish_reason"}
CHAT_COMPLETION_RESPONSE_MESSAGE = {"content", "role"}
CHAT_COMPLETION_RESPONSE_MESSAGE_OPTIONAL = {"tool_calls", "function_call"}
CHAT_COMPLETION_LOGPROBS = {"content", "refusal"}
CHAT_COMPLETION_LOGPROB_TOKEN = {"token", "logprob", "bytes", "top_logprobs"}
CHAT_COMPLETION_TOP_LOGPROB_TOKEN = {"token", "logprob", "bytes"}
CREATE_CHAT_COMPLETION_STREAM_RESPONSE = {"id", "model", "object", "created", "choices"}
CHAT_COMPLETION_STREAM_RESPONSE_CHOICE = {"index", "delta", "finish_reason"}
CHAT_COMPLETION_STREAM_RESPONSE_CHOICE_OPTIONAL = {"logprobs"}
CHAT_COMPLETION_STREAM_RESPONSE_DELTA = {"content", "function_call", "tool_calls", "role"}  # all NotRequired
CHAT_COMPLETION_MESSAGE_TOOL_CALL = {"id", "type", "function"}


@pytest.fixture(scope="module")
def llm(gemma_path: Path) -> Llama:
    return Llama(model_path=str(gemma_path), n_threads=2, verbose=False)


def _completion_shape(r: dict[str, Any]) -> None:
    assert set(r) == CREATE_COMPLETION_RESPONSE and r["object"] == "text_completion"
    assert r["id"].startswith("cmpl-") and isinstance(r["created"], int) and isinstance(r["model"], str)
    for choice in r["choices"]:
        assert set(choice) == COMPLETION_CHOICE
        assert choice["finish_reason"] in ("stop", "length", None)
    assert set(r["usage"]) == COMPLETION_USAGE


# ---------------------------------------------------------------------------------------------
# llama-cpp-python's README, with only the import changed


def test_readme_completion(llm: Llama, gemma_path: Path) -> None:
    output = llm(
        "Q: Name the planets in the solar system? A: ",  # Prompt
        max_tokens=32,  # Generate up to 32 tokens, set to None to generate up to the end of the context window
        stop=["Q:", "\n"],  # Stop generating just before the model would generate a new question
        echo=True,  # Echo the prompt back in the output
    )
    _completion_shape(output)
    choice = output["choices"][0]
    assert choice["text"].startswith("Q: Name the planets in the solar system? A: ")
    assert "\n" not in choice["text"] and choice["logprobs"] is None
    assert output["model"] == str(gemma_path)
    assert 0 < output["usage"]["completion_tokens"] <= 32


def test_readme_streaming(llm: Llama) -> None:
    chunks = list(llm("Q: Name the planets in the solar system? A: ", max_tokens=8, stream=True))
    assert chunks
    for chunk in chunks:
        assert set(chunk) == CREATE_COMPLETION_RESPONSE - {"usage"}  # usage is NotRequired, absent in chunks
        assert set(chunk["choices"][0]) == COMPLETION_CHOICE
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_readme_chat_completion(llm: Llama) -> None:
    r = llm.create_chat_completion(
        messages=[
            {"role": "system", "content": "You are an assistant who perfectly describes images."},
            {"role": "user", "content": "Describe this image in detail please."},
        ],
        max_tokens=8,
    )
    assert set(r) == CREATE_CHAT_COMPLETION_RESPONSE and r["object"] == "chat.completion"
    choice = r["choices"][0]
    assert set(choice) == CHAT_COMPLETION_RESPONSE_CHOICE
    assert CHAT_COMPLETION_RESPONSE_MESSAGE <= set(choice["message"])
    assert set(choice["message"]) <= CHAT_COMPLETION_RESPONSE_MESSAGE | CHAT_COMPLETION_RESPONSE_MESSAGE_OPTIONAL
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    # OpenAI's optional prompt_tokens_details ({"cached_tokens"}) rides along on chat usage.
    assert COMPLETION_USAGE <= set(r["usage"]) <= COMPLETION_USAGE | {"prompt_tokens_details"}


def test_chat_stream_and_logprobs_shapes(llm: Llama) -> None:
    messages = [{"role": "user", "content": "Name a colour."}]
    for chunk in llm.create_chat_completion(messages=messages, max_tokens=4, stream=True):
        assert set(chunk) == CREATE_CHAT_COMPLETION_STREAM_RESPONSE and chunk["object"] == "chat.completion.chunk"
        choice = chunk["choices"][0]
        assert CHAT_COMPLETION_STREAM_RESPONSE_CHOICE <= set(choice)
        assert set(choice) <= CHAT_COMPLETION_STREAM_RESPONSE_CHOICE | CHAT_COMPLETION_STREAM_RESPONSE_CHOICE_OPTIONAL
        assert set(choice["delta"]) <= CHAT_COMPLETION_STREAM_RESPONSE_DELTA
    r = llm.create_chat_completion(messages=messages, max_tokens=3, logprobs=True, top_logprobs=2)
    lp = r["choices"][0]["logprobs"]
    assert set(lp) == CHAT_COMPLETION_LOGPROBS
    for entry in lp["content"]:
        assert set(entry) == CHAT_COMPLETION_LOGPROB_TOKEN
        assert all(set(t) == CHAT_COMPLETION_TOP_LOGPROB_TOKEN for t in entry["top_logprobs"])
    c = llm("Once upon a time", max_tokens=3, logprobs=2)
    _completion_shape(c)
    assert set(c["choices"][0]["logprobs"]) == COMPLETION_LOGPROBS


def test_chat_tool_call_shape(llm: Llama) -> None:
    reply = llm.tokenize(b"```tool_code\nf(x=1)\n```", add_bos=False)
    start: list[int] = []

    def script(input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        if not start:
            start.append(len(input_ids))
        step = len(input_ids) - start[0]
        forced = np.full_like(scores, -np.inf)
        forced[reply[step] if step < len(reply) else llm.token_eos()] = 0.0
        return forced

    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    r = llm.create_chat_completion(
        messages=[{"role": "user", "content": "call f"}],
        tools=tools,
        max_tokens=40,
        logits_processor=LogitsProcessorList([script]),
    )
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert set(call) == CHAT_COMPLETION_MESSAGE_TOOL_CALL and call["function"] == {"name": "f", "arguments": '{"x": 1}'}


# ---------------------------------------------------------------------------------------------
# The low-level API


def test_tokenize_detokenize_round_trip(llm: Llama) -> None:
    text = "Hello, world! Ünïcödé ✓ <start_of_turn>".encode()
    ids = llm.tokenize(text)
    assert ids[0] == llm.token_bos() and llm.tokenize(text, add_bos=False) == ids[1:]
    assert llm.detokenize(ids) == llm.detokenize(ids[1:]) == text
    special = llm.tokenize(text, add_bos=False, special=True)
    assert len(special) < len(ids) - 1  # the marker became its control token
    assert llm.detokenize(special) == text.removesuffix(b"<start_of_turn>")
    assert llm.detokenize(special, special=True) == text
    assert llm.token_eos() >= 0 and llm.detokenize([llm.token_nl()]) == b"\n"
    assert llm.token_nl() == 248  # llama.cpp's: the <0x0A> byte token
    assert llm.n_ctx() == 512 and llm.n_vocab() == 262144 and llm.n_embd() == 640
    assert llm.metadata["general.architecture"] == "gemma3"


def test_eval_scores_and_state_round_trip(gemma_path: Path) -> None:
    llm = Llama(model_path=str(gemma_path), n_threads=2, logits_all=True, verbose=False)
    prompt = llm.tokenize(b"The quick brown fox jumps over")
    llm.eval(prompt[:3])
    llm.eval(prompt[3:])
    assert llm.n_tokens == len(prompt) and llm.input_ids.tolist() == prompt
    assert llm.scores.shape == (len(prompt), llm.n_vocab())
    state = llm.save_state()
    assert isinstance(state, LlamaState) and state.n_tokens == len(prompt)
    next_token = int(np.argmax(llm.scores[-1]))
    llm.eval([next_token])
    after = llm.scores.copy()

    llm.reset()
    assert llm.n_tokens == 0 and llm.scores.shape == (0, llm.n_vocab())
    llm.load_state(state)
    assert llm.n_tokens == len(prompt) and llm.input_ids.tolist() == prompt
    assert np.array_equal(llm.scores, state.scores)
    llm.eval([next_token])
    # Bitwise the same continuation: the KV rows came back bit for bit, nothing re-evaluated.
    assert np.array_equal(llm.scores, after)
    assert state.llama_state_size == len(state.llama_state) > 0

    # Across instances (and processes: the state pickles), as llama-cpp-python users do.
    other = Llama(model_path=str(gemma_path), n_threads=2, logits_all=True, verbose=False)
    other.load_state(pickle.loads(pickle.dumps(state)))
    other.eval([next_token])
    assert np.array_equal(other.scores[-1], after[-1])
    tampered = pickle.loads(pickle.dumps(state))
    tampered.llama_state = tampered.llama_state[:-5]
    with pytest.raises(ValueError, match="state"):
        other.load_state(tampered)

    last_only = Llama(model_path=str(gemma_path), n_threads=2, verbose=False)
    last_only.eval(prompt)
    assert last_only.scores.shape == (1, last_only.n_vocab())
    assert int(np.argmax(last_only.scores[-1])) == next_token


def test_generate_yields_tokens(llm: Llama) -> None:
    gen = llm.generate(llm.tokenize(b"One, two, three,"), temp=0.0)
    tokens = [next(gen) for _ in range(4)]
    greedy = llm.llm.generate(llm.tokenize(b"One, two, three,"), max_tokens=4)
    assert llm.detokenize(tokens).decode() == greedy


# ---------------------------------------------------------------------------------------------
# Construction and sampling semantics


def test_constructor_keywords(gemma_path: Path) -> None:
    path = str(gemma_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Llama(model_path=path, n_gpu_layers=0, main_gpu=0, use_mmap=True, verbose=False)  # defaults: silent
    with pytest.warns(UserWarning) as caught:
        Llama(model_path=path, n_gpu_layers=-1, tensor_split=[0.5, 0.5], use_mlock=True, flash_attn=True, verbose=False)
    assert len(caught) == 1
    message = str(caught[0].message)
    for name in ("n_gpu_layers", "tensor_split", "use_mlock", "flash_attn"):
        assert name in message
    untyped: Any = Llama
    with pytest.raises(TypeError, match="no_such_option"):
        untyped(model_path=path, no_such_option=1)
    with pytest.raises(ValueError, match="Model path does not exist"):
        Llama(model_path="/nonexistent/model.gguf")
    with pytest.raises(fucina.InvalidArgumentError, match="LoRA"):
        Llama(model_path=path, lora_path="adapter.gguf", verbose=False)
    with pytest.raises(fucina.InvalidArgumentError, match="chat_format"):
        Llama(model_path=path, chat_format="vicuna", verbose=False)
    assert Llama(model_path=path, chat_format="chatml", verbose=False).llm.chat_template.format.value == "chatml"  # type: ignore[union-attr]
    assert Llama(model_path=path, n_ctx=0, verbose=False).n_ctx() == 32768
    q8 = Llama(model_path=path, type_k=8, type_v=8, verbose=False)
    assert q8.llm.session.kv_cache_bytes < Llama(model_path=path, verbose=False).llm.session.kv_cache_bytes


def test_verbose_prints_a_load_line(gemma_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Llama(model_path=str(gemma_path))
    assert "fucina: loaded" in capsys.readouterr().err


def test_from_pretrained_points_to_local_files() -> None:
    with pytest.raises(NotImplementedError, match="never downloads"):
        Llama.from_pretrained("Qwen/Qwen2-0.5B-Instruct-GGUF", "*q8_0.gguf")


def test_seeds_behave_as_in_llama_cpp_python(gemma_path: Path) -> None:
    def outputs(seed: int) -> list[str]:
        llm = Llama(model_path=str(gemma_path), seed=seed, verbose=False)
        return [llm("Once upon a time", max_tokens=6, temperature=1.0)["choices"][0]["text"] for _ in range(2)]

    a, b = outputs(1234), outputs(1234)
    assert a == b  # a fresh model with the same seed replays the same sequence of outputs
    llm = Llama(model_path=str(gemma_path), verbose=False)
    one = llm("Once upon a time", max_tokens=6, temperature=1.0, seed=7)["choices"][0]["text"]
    assert llm("Once upon a time", max_tokens=6, temperature=1.0, seed=7)["choices"][0]["text"] == one


def test_processors_and_stopping_criteria(llm: Llama) -> None:
    greedy = llm("The capital of France is", max_tokens=4, temperature=0.0)
    first = llm.tokenize(greedy["choices"][0]["text"].encode(), add_bos=False)[0]

    def ban(input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        out: npt.NDArray[np.single] = scores.copy()
        out[first] = -np.inf
        return out

    banned = llm("The capital of France is", max_tokens=4, temperature=0.0, logits_processor=LogitsProcessorList([ban]))
    assert banned["choices"][0]["text"] != greedy["choices"][0]["text"]

    n_prompt = len(llm.tokenize(b"Once upon a time"))

    def after_three(input_ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> bool:
        return len(input_ids) >= n_prompt + 3

    r = llm("Once upon a time", max_tokens=20, temperature=0.0, stopping_criteria=StoppingCriteriaList([after_three]))
    assert r["choices"][0]["finish_reason"] == "stop" and r["usage"]["completion_tokens"] == 3


def test_unsupported_options_raise(llm: Llama) -> None:
    with pytest.raises(fucina.ArgumentTypeError, match="grammar must be a LlamaGrammar"):
        llm("x", grammar=object())
    with pytest.raises(fucina.InvalidArgumentError, match="mirostat"):
        llm("x", mirostat_mode=3)
    with pytest.raises(fucina.InvalidArgumentError, match="suffix"):
        llm("x", suffix="y")
    with pytest.raises(fucina.InvalidArgumentError, match="exceed context window"):
        llm("word " * 600)
    with pytest.raises(RuntimeError, match="embedding=True"):
        llm.create_embedding("x")


SEEDED = load_llamacpp_golden("sampling", "seeded.json")


@pytest.mark.parametrize("case", SEEDED["cases"], ids=lambda c: f"{c['seed']}-{c['prompt'][:4]}-{c['params']}")
def test_a_seed_draws_llama_cpp_pythons_tokens(llm: Llama, case: dict[str, Any]) -> None:
    """The same seed gives the same tokens as llama-cpp-python: ``generate`` (its sampler seeded with the
    model's seed, one draw per token: std::mt19937 through libstdc++'s uniform and discrete distributions)
    and ``sample`` after ``eval`` (a fresh sampler per call); filter chains sorted and unsorted, typical,
    a negative temperature, Mirostat 1 and 2, penalties."""
    tokens = llm.tokenize(case["prompt"].encode())
    llm.set_seed(case["seed"])
    out: list[int] = []
    for tok in llm.generate(tokens, **case["params"]):
        out.append(tok)
        if len(out) == SEEDED["n_tokens"]:
            break
    assert out == case["generate"]
    llm.reset()
    llm.eval(tokens)
    assert [llm.sample(**case["params"]) for _ in range(2)] == case["sample"]


def test_sample_checks_its_position(gemma_path: Path) -> None:
    fresh = Llama(model_path=str(gemma_path), n_ctx=64, verbose=False)
    with pytest.raises(fucina.InvalidArgumentError, match="call eval first"):
        fresh.sample()
    fresh.eval(fresh.tokenize(b"Hello there"))
    with pytest.raises(fucina.InvalidArgumentError, match="logits_all"):
        fresh.sample(idx=0)
    assert fresh.sample(temp=0) == int(np.argmax(fresh.scores[-1]))
    assert fresh.tokenizer().decode(fresh.tokenizer().encode("Hello there", add_bos=False)) == "Hello there"

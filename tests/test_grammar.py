"""Grammar-constrained decoding on the real Gemma 3 270M: outputs validate against
their JSON Schemas (checked with the reference validator, ``jsonschema``) at
temperature 0.7 over several seeds, regex / Lark / GBNF outputs match, unsupported
schemas fail before generation naming the keyword, and constrained speculative
decoding commits exactly the plain constrained tokens."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import numpy.typing as npt
import pydantic
import pytest

import fucina
from conftest import load_golden
from fucina.grammar import gbnf_to_lark
from fucina.llama import Llama, LlamaGrammar

CASES: dict[str, Any] = load_golden("grammar", "schemas.json")
GBNF_DIR = Path(__file__).resolve().parent.parent / "vendor" / "llama.cpp-grammars"
SEEDS = (1, 2)
# Streams decoded in lockstep, and the corpus split into this many tests.
BATCH = 8
PARTS = 4


@pytest.fixture(scope="module")
def llm() -> fucina.LLM:
    return fucina.LLM(n_ctx=1024)


def _validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _chat(llm: fucina.LLM, prompt: str, schema: dict[str, Any], seed: int | None, **kw: Any) -> dict[str, Any]:
    fmt = {"type": "json_schema", "json_schema": {"name": "out", "schema": schema, "strict": True}}
    args: dict[str, Any] = {"seed": seed, "temperature": 0.7} if seed is not None else {"temperature": 0.0}
    out: dict[str, Any] = llm.create_chat_completion(
        [{"role": "user", "content": prompt}], response_format=fmt, max_tokens=400, **args, **kw
    )
    return out


def test_the_committed_schema_set_is_large_and_covers_the_features() -> None:
    cases = CASES["cases"]
    assert len(cases) >= 100
    text = json.dumps([c["schema"] for c in cases])
    for feature in (
        '"$ref"',
        '"$defs"',
        '"anyOf"',
        '"oneOf"',
        '"allOf"',
        '"enum"',
        '"pattern"',
        '"format"',
        '"minItems"',
        '"maxItems"',
        '"minimum"',
        '"maximum"',
        '"exclusiveMinimum"',
        '"multipleOf"',
        '"additionalProperties": false',
        '"additionalProperties": {',
        '"const"',
    ):
        assert feature in text, feature


def _lockstep(llm: fucina.LLM, jobs: list[tuple[list[int], fucina.Grammar, int | None]]) -> list[tuple[str, str]]:
    """Generate every job (prompt ids, grammar, seed; ``None`` = greedy) in lockstep
    batches: one batched forward per step for all live streams (each stream's tokens are
    exactly those it would produce alone)."""
    out: list[tuple[str, str]] = []
    for at in range(0, len(jobs), BATCH):
        gens = []
        for ids, g, seed in jobs[at : at + BATCH]:
            params = fucina.SamplingParams(temperature=0.7 if seed is not None else 0.0, seed=seed or 0)
            gens.append(
                llm.engine.generate(
                    ids, max_tokens=400, stop_ids=llm.chat_stop_ids, grammar=g._core, **params.to_core()
                )
            )
        texts: list[list[str]] = [[] for _ in gens]
        finish: list[str] = ["" for _ in gens]
        live = dict(enumerate(gens))
        while live:
            order = list(live)
            for i, step in zip(order, fucina.Generation.step_batch([live[i] for i in order]), strict=True):
                if isinstance(step, BaseException):
                    raise step
                if step is None:
                    del live[i]
                    continue
                _tok, _emitted, text, fin, _lp = step
                texts[i].append(text)
                if fin is not None:
                    finish[i] = fin
                    del live[i]
        out.extend(("".join(t), f) for t, f in zip(texts, finish, strict=True))
    return out


@pytest.mark.parametrize("part", range(PARTS))
def test_every_output_validates_against_its_schema(llm: fucina.LLM, part: int) -> None:
    """Each schema at temperature 0.7 with two seeds (and greedy for every third), the
    output checked by ``jsonschema`` with format checking."""
    cases = CASES["cases"][part::PARTS]
    jobs, meta = [], []
    for case in cases:
        ids = llm.apply_chat_template([{"role": "user", "content": case["prompt"]}])
        assert isinstance(ids, list)
        g = fucina.Grammar.json_schema(case["schema"])
        seeds: tuple[int | None, ...] = SEEDS + ((None,) if int(case["id"][:2]) % 3 == 0 else ())
        for seed in seeds:
            jobs.append((ids, g, seed))
            meta.append((case, seed))
    failures = []
    for (text, finish), (case, seed) in zip(_lockstep(llm, jobs), meta, strict=True):
        try:
            assert finish == "stop", f"finish {finish}"
            _validator(case["schema"]).validate(json.loads(text))
        except (AssertionError, ValueError, jsonschema.ValidationError) as e:
            failures.append(f"{case['id']} seed {seed}: {str(e)[:200]}\n  {text[:300]}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("bad", CASES["unsupported"], ids=[u["keyword"] for u in CASES["unsupported"]])
def test_unsupported_schemas_fail_before_generation_naming_the_keyword(llm: fucina.LLM, bad: dict[str, Any]) -> None:
    # `_chat` asks for "strict": true: what cannot be enforced is refused.
    live = llm.engine.n_live
    with pytest.raises(fucina.GrammarError, match=bad["keyword"]) as e:
        _chat(llm, "Hi", bad["schema"], 1, cache_prompt=False)
    assert isinstance(e.value, ValueError)
    assert llm.engine.n_live == live


@pytest.mark.parametrize("bad", CASES["unsupported"], ids=[u["keyword"] for u in CASES["unsupported"]])
def test_unsupported_keywords_are_not_enforced_without_strict(llm: fucina.LLM, bad: dict[str, Any]) -> None:
    # As llama.cpp reads schemas: the rest of the schema is enforced, a warning names what is not.
    fmt = {"type": "json_schema", "json_schema": {"name": "out", "schema": bad["schema"]}}
    with pytest.warns(fucina.GrammarWarning, match=bad["keyword"]):
        r = llm.create_chat_completion(
            [{"role": "user", "content": "Hi"}], response_format=fmt, max_tokens=200, temperature=0, cache_prompt=False
        )
    out = json.loads(r["choices"][0]["message"]["content"])
    assert isinstance(out, list if bad["schema"]["type"] == "array" else dict)


def test_overlapping_one_of_is_read_as_any_of(llm: fucina.LLM) -> None:
    # llguidance refuses a oneOf whose branches it cannot prove disjoint; llama.cpp reads it as anyOf.
    schema = {
        "oneOf": [
            {"type": "object", "properties": {"kind": {"const": "cat"}, "name": {"type": "string"}}},
            {"type": "object", "properties": {"kind": {"const": "dog"}, "age": {"type": "integer"}}},
        ],
        "discriminator": {"propertyName": "kind"},
    }
    out = json.loads(llm.generate("A pet as JSON: ", grammar=fucina.Grammar.json_schema(schema), max_tokens=60))
    assert isinstance(out, dict) and set(out) <= {"kind", "name", "age"}
    with pytest.raises(fucina.ArgumentTypeError, match="strict"):
        fucina.Grammar.json_schema(schema, strict="yes")  # type: ignore[arg-type]


def test_invalid_grammars_are_named(llm: fucina.LLM) -> None:
    with pytest.raises(fucina.GrammarError, match="regex"):
        llm.generate("x", grammar=fucina.Grammar.regex("[a-"))
    with pytest.raises(fucina.GrammarError, match="Lark"):
        llm.generate("x", grammar=fucina.Grammar.lark("start: nope"))
    with pytest.raises(fucina.GrammarError, match="JSON"):
        fucina.Grammar.json_schema("{not json")
    with pytest.raises(fucina.GrammarError, match="object"):
        fucina.Grammar.json_schema("[1, 2]")
    with pytest.raises(fucina.GrammarError, match="Unsatisfiable"):
        llm.generate("x", grammar=fucina.Grammar.json_schema({"type": "integer", "minimum": 5, "maximum": 1}))
    with pytest.raises(fucina.ArgumentTypeError, match="grammar must be a fucina.Grammar"):
        llm.generate("x", grammar="start: /a/")  # type: ignore[arg-type]
    with pytest.raises(fucina.ArgumentTypeError, match="pydantic"):
        fucina.Grammar.json_schema(42)
    with pytest.raises(fucina.InvalidArgumentError, match="not both"):
        llm.create_chat_completion(
            [{"role": "user", "content": "x"}],
            grammar=fucina.Grammar.regex("a"),
            response_format={"type": "json_object"},
        )


def test_regex_and_lark_outputs_match(llm: fucina.LLM) -> None:
    date = re.compile(r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])")
    g = fucina.Grammar.regex(date.pattern)
    lark = fucina.Grammar.lark('start: "The answer is " ANSWER "."\nANSWER: "yes" | "no" | /[0-9]{1,3}/')
    for seed in (1, 2, 3):
        out = llm.generate("The date of the moon landing was ", grammar=g, temperature=0.7, seed=seed, max_tokens=20)
        assert date.fullmatch(out), out
        out = llm.generate("Question: is the sky blue?\n", grammar=lark, temperature=0.7, seed=seed, max_tokens=20)
        assert re.fullmatch(r"The answer is (yes|no|[0-9]{1,3})\.", out), out


def test_json_object_and_pydantic_models(llm: fucina.LLM) -> None:
    out = llm.create_chat_completion(
        [{"role": "user", "content": "Give a JSON object describing a cat."}],
        response_format={"type": "json_object"},
        max_tokens=200,
        seed=5,
    )
    choice = out["choices"][0]
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(choice["message"]["content"]), dict)
    else:
        assert choice["message"]["content"].startswith("{")

    class City(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=20)
        population: int = pydantic.Field(ge=0, le=40_000_000)
        capital: bool

    g = fucina.Grammar.json_schema(City)
    assert g.kind == "json_schema" and "population" in g.source
    text = llm.generate("A JSON record of Paris: ", grammar=g, max_tokens=80)
    City.model_validate_json(text)
    assert fucina.Grammar.json_schema(City(name="x", population=1, capital=True)).source == g.source


def test_a_grammar_that_cannot_finish_ends_with_length(llm: fucina.LLM) -> None:
    out = llm.create_completion("Letters: ", grammar=fucina.Grammar.regex("[a-z]{500}"), max_tokens=10)
    assert out["choices"][0]["finish_reason"] == "length"
    assert re.fullmatch("[a-z]+", out["choices"][0]["text"])


def test_a_grammar_that_cannot_go_on_raises_grammar_error(llm: fucina.LLM) -> None:
    # A logit processor that writes what the grammar forbids leaves it nothing to follow: the generation
    # ends with a GrammarError (a request the model cannot write; the server answers 400).
    (banned,) = llm.tokenize("Z", add_special=False)

    def force(tokens: list[int], logits: npt.NDArray[np.float32]) -> None:
        logits[banned] = 100.0

    with pytest.raises(fucina.GrammarError, match="grammar constraint failed"):
        llm.generate("Letters: ", grammar=fucina.Grammar.regex("[a-z]+"), max_tokens=8, logit_processors=force)


def test_constrained_speculation_equals_plain_and_forces_tokens(llm: fucina.LLM) -> None:
    case = CASES["cases"][6]  # entities: arrays of rigid objects, lots of forced structure
    g = fucina.Grammar.json_schema(case["schema"])
    prompt = llm.apply_chat_template([{"role": "user", "content": case["prompt"]}])
    assert isinstance(prompt, list)
    for seed in (None, 11):
        params = fucina.SamplingParams(temperature=0.7 if seed is not None else 0.0, seed=seed or 0)
        runs = []
        for spec in (False, True):
            gen = llm.engine.generate(
                prompt,
                max_tokens=200,
                stop_ids=llm.chat_stop_ids,
                speculation=spec,
                grammar=g._core,
                **params.to_core(),
            )
            steps = [(tok, emitted, text) for tok, emitted, text, _f, _lp in gen]
            stats = gen.grammar_stats
            runs.append((steps, gen.draws, stats))
            gen.close()
        (plain, plain_draws, plain_stats), (spec_steps, spec_draws, spec_stats) = runs
        assert plain == spec_steps and plain_draws == spec_draws
        assert plain_stats is not None and spec_stats is not None
        assert plain_stats["forced"] > 0 and plain_stats["forced"] == spec_stats["forced"]
        assert plain_stats["masks"] == len(plain_stats["mask_us"]) > 0
        json.loads("".join(t for _tok, _e, t in plain))


def test_conversation_send_with_a_grammar(llm: fucina.LLM) -> None:
    conv = llm.chat("You answer in JSON.")
    g = fucina.Grammar.json_schema({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
    reply = conv.send("Is water wet?", grammar=g, max_tokens=40)
    assert json.loads(reply)["ok"] in (True, False)
    # The next turn is unconstrained and reuses the cached history.
    conv.send("Why?", max_tokens=4)
    assert conv.last_reused_tokens > 0


def test_llama_cpp_python_grammar_arguments(llm: fucina.LLM) -> None:
    lm = Llama(str(llm.path), n_ctx=512, verbose=False)
    gbnf = 'root ::= "colour: " ("red" | "green" | "blue")'
    out = lm("Pick a colour. ", grammar=LlamaGrammar.from_string(gbnf), max_tokens=10, seed=3)
    assert re.fullmatch("colour: (red|green|blue)", out["choices"][0]["text"])
    out = lm.create_chat_completion(
        [{"role": "user", "content": "Give a number."}],
        grammar=LlamaGrammar.from_json_schema(
            '{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], '
            '"additionalProperties": false}'
        ),
        max_tokens=30,
    )
    assert isinstance(json.loads(out["choices"][0]["message"]["content"])["n"], int)
    toks = lm.generate(lm.tokenize(b"Digits: "), grammar=fucina.Grammar.regex("[0-9]{3}"), temp=0.0)
    got = [next(toks) for _ in range(3)]
    assert re.fullmatch("[0-9]+", lm.detokenize(got).decode())


@pytest.mark.parametrize("path", sorted(GBNF_DIR.glob("*.gbnf")), ids=lambda p: p.stem)
def test_llama_cpp_example_grammars_convert_and_compile(llm: fucina.LLM, path: Path) -> None:
    g = fucina.Grammar.from_gbnf(path.read_text(encoding="utf-8"))
    llm.engine.check_grammar(g._core)


def test_gbnf_grammars_generate_what_they_describe(llm: fucina.LLM) -> None:
    json_g = fucina.Grammar.from_gbnf((GBNF_DIR / "json.gbnf").read_text())
    out = llm.create_completion("A JSON object with a name: ", grammar=json_g, max_tokens=120, seed=4, temperature=0.5)
    if out["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(out["choices"][0]["text"]), dict)
    lst = fucina.Grammar.from_gbnf((GBNF_DIR / "list.gbnf").read_text())
    text = llm.generate("Shopping list:\n", grammar=lst, max_tokens=40, temperature=0.7, seed=2)
    assert all(line.startswith("- ") for line in text.splitlines() if line), text


def test_gbnf_conversion_details() -> None:
    lark = gbnf_to_lark(
        "root ::= item-list # comment\n"
        'item-list ::= ( "a\\n" | [^"\\\\x] | [a-z0-9] )+ ws\n'
        'ws ::= | " " | "\\t" [ ]{0,3}\n'
    )
    assert lark.splitlines()[0] == "start: r_item_list"
    assert r'"a\n"' in lark and r'/[^"\\x]/' in lark and '"" | " "' in lark and "{0,3}" in lark
    for bad, msg in (
        ("item ::= 'x'", "cannot read"),
        ('item ::= "x"', "no 'root' rule"),
        ("root ::= other", "undefined rule 'other'"),
        ('root ::= "a"\nroot ::= "b"', "defined twice"),
        ('root ::= "\\q"', "unknown escape"),
        ("", "no rules"),
    ):
        with pytest.raises(fucina.GrammarError, match=msg):
            gbnf_to_lark(bad)

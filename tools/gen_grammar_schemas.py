"""Write tests/goldens/grammar/schemas.json: JSON Schemas of real-world shape (API
payloads, configs, records, events) with a prompt each, for the structured-output tests
and benches/grammar.py.

    python tools/gen_grammar_schemas.py

Each base schema is written by hand after shapes common in public APIs and schema
stores (nested objects, arrays with min/max items, enums, anyOf / oneOf, patterns,
formats, numeric bounds, required and optional properties, additionalProperties,
$ref / $defs). Two variants of each change what a generator must get right: one with
every property required and additionalProperties false (a strict tool schema, as
OpenAI's strict mode writes them), one that drops the first required property from
``required`` and tightens numeric and array bounds. Deterministic: no randomness.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

S = dict[str, Any]


def s(max_len: int | None = None, **kw: Any) -> S:
    """A string; bounded to 32 characters unless a format or `max_len` says otherwise."""
    if max_len is None and "format" not in kw:
        max_len = 32
    return {"type": "string", **({"maxLength": max_len} if max_len is not None else {}), **kw}


def i(lo: int | None = None, hi: int | None = None, **kw: Any) -> S:
    out: S = {"type": "integer", **kw}
    if lo is not None:
        out["minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    return out


def n(lo: float | None = None, hi: float | None = None, **kw: Any) -> S:
    out: S = {"type": "number", **kw}
    if lo is not None:
        out["minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    return out


def arr(items: S, lo: int = 0, hi: int = 4) -> S:
    return {"type": "array", "items": items, "minItems": lo, "maxItems": hi}


def obj(props: S, required: list[str] | None = None, additional: bool | S = False, **kw: Any) -> S:
    out: S = {"type": "object", "properties": props, "additionalProperties": additional, **kw}
    out["required"] = list(props) if required is None else required
    return out


B = {"type": "boolean"}

BASES: list[tuple[str, S]] = [
    (
        "Create a user profile for a new customer.",
        obj(
            {
                "id": s(format="uuid"),
                "username": s(20, pattern="^[a-z][a-z0-9_]{2,15}$"),
                "email": s(40, format="email"),
                "age": i(13, 120),
                "verified": B,
            },
            ["id", "username", "email"],
        ),
    ),
    (
        "Give the weather forecast for Rome as JSON.",
        obj(
            {
                "city": s(24),
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "days": arr(
                    obj(
                        {
                            "day": {"enum": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]},
                            "high": i(-30, 50),
                            "low": i(-40, 40),
                        }
                    ),
                    1,
                    3,
                ),
            }
        ),
    ),
    (
        "Write an order for two books.",
        {
            "type": "object",
            "$defs": {
                "money": obj({"amount": n(0, 10000), "currency": {"enum": ["EUR", "USD", "GBP"]}}),
                "line": obj(
                    {"sku": s(12, pattern="^[A-Z]{3}-[0-9]{4}$"), "qty": i(1, 99), "price": {"$ref": "#/$defs/money"}}
                ),
            },
            "properties": {
                "order_id": s(16),
                "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}, "minItems": 1, "maxItems": 3},
                "total": {"$ref": "#/$defs/money"},
                "status": {"enum": ["pending", "paid", "shipped", "cancelled"]},
            },
            "required": ["order_id", "lines", "total", "status"],
            "additionalProperties": False,
        },
    ),
    (
        "Describe a calendar event.",
        obj(
            {
                "title": s(40),
                "start": s(format="date-time"),
                "end": s(format="date-time"),
                "all_day": B,
                "attendees": arr(s(30, format="email"), 0, 3),
                "location": {"anyOf": [s(40), {"type": "null"}]},
            },
            ["title", "start"],
        ),
    ),
    (
        "Return a search API response with two results.",
        obj(
            {
                "query": s(30),
                "total": i(0, 1000000),
                "results": arr(
                    obj({"title": s(40), "url": s(60, format="uri"), "score": n(0, 1)}, ["title", "url"]), 0, 2
                ),
                "next_page": {"anyOf": [i(1, 100), {"type": "null"}]},
            }
        ),
    ),
    (
        "Classify the sentiment of: 'I love this phone'.",
        obj({"label": {"enum": ["positive", "negative", "neutral"]}, "confidence": n(0, 1)}),
    ),
    (
        "Extract the entities from: 'Ada Lovelace was born in London in 1815.'",
        obj(
            {
                "entities": arr(
                    obj(
                        {"text": s(24), "type": {"enum": ["PERSON", "PLACE", "DATE", "ORG"]}, "start": i(0, 200)},
                        ["text", "type"],
                    ),
                    1,
                    4,
                )
            }
        ),
    ),
    (
        "Write a server configuration.",
        obj(
            {
                "host": s(30, format="hostname"),
                "port": i(1, 65535),
                "tls": obj({"enabled": B, "cert_path": s(40)}, ["enabled"]),
                "workers": i(1, 64),
                "log_level": {"enum": ["debug", "info", "warning", "error"]},
            },
            ["host", "port"],
        ),
    ),
    (
        "Describe a product in the catalogue.",
        obj(
            {
                "name": s(30),
                "price": n(0, 5000, exclusiveMinimum=0),
                "tags": {"type": "array", "items": s(12), "maxItems": 4},
                "dimensions": obj({"width": n(0, 500), "height": n(0, 500), "depth": n(0, 500)}),
                "in_stock": B,
            },
            ["name", "price"],
        ),
    ),
    (
        "Give me a recipe for pancakes.",
        obj(
            {
                "name": s(30),
                "servings": i(1, 12),
                "ingredients": arr(
                    obj(
                        {
                            "item": s(20),
                            "amount": n(0, 1000),
                            "unit": {"enum": ["g", "ml", "tbsp", "tsp", "cup", "piece"]},
                        }
                    ),
                    1,
                    4,
                ),
                "steps": arr(s(60), 1, 3),
            }
        ),
    ),
    (
        "Log an HTTP request.",
        obj(
            {
                "method": {"enum": ["GET", "POST", "PUT", "DELETE", "PATCH"]},
                "path": s(40, pattern="^/[a-z0-9/_-]*$"),
                "status": i(100, 599),
                "duration_ms": n(0, 60000),
                "client_ip": s(format="ipv4"),
            }
        ),
    ),
    (
        "Answer with a tool call to get the weather in Paris.",
        obj(
            {
                "name": {"const": "get_weather"},
                "arguments": obj({"location": s(30), "unit": {"enum": ["celsius", "fahrenheit"]}}, ["location"]),
            }
        ),
    ),
    (
        "Create a shape: either a circle or a rectangle.",
        {
            "type": "object",
            "properties": {
                "shape": {
                    "oneOf": [
                        obj({"kind": {"const": "circle"}, "radius": n(0, 100)}),
                        obj({"kind": {"const": "rectangle"}, "width": n(0, 100), "height": n(0, 100)}),
                    ]
                },
                "color": s(12, pattern="^#[0-9a-f]{6}$"),
            },
            "required": ["shape", "color"],
            "additionalProperties": False,
        },
    ),
    (
        "Describe a book.",
        obj(
            {
                "title": s(40),
                "authors": arr(obj({"first": s(16), "last": s(16)}), 1, 3),
                "isbn": s(17, pattern="^97[89]-[0-9]{10}$"),
                "year": i(1450, 2030),
                "genres": {
                    "type": "array",
                    "items": {"enum": ["fiction", "science", "history", "poetry", "biography"]},
                    "maxItems": 2,
                },
            },
            ["title", "authors"],
        ),
    ),
    (
        "Summarise a meeting.",
        obj(
            {
                "date": s(format="date"),
                "participants": arr(s(20), 1, 4),
                "decisions": arr(s(60), 0, 3),
                "action_items": arr(
                    obj({"owner": s(20), "task": s(50), "due": s(format="date")}, ["owner", "task"]), 0, 2
                ),
            }
        ),
    ),
    (
        "Give a geographic location.",
        obj(
            {
                "name": s(30),
                "lat": n(-90, 90),
                "lon": n(-180, 180),
                "elevation_m": {"anyOf": [i(-500, 9000), {"type": "null"}]},
            },
            ["name", "lat", "lon"],
        ),
    ),
    (
        "Create a bank transaction record.",
        obj(
            {
                "id": s(format="uuid"),
                "timestamp": s(format="date-time"),
                "amount": n(-100000, 100000),
                "currency": s(3, pattern="^[A-Z]{3}$"),
                "type": {"enum": ["debit", "credit"]},
                "counterparty": obj(
                    {"name": s(30), "iban": s(34, pattern="^[A-Z]{2}[0-9]{2}[A-Z0-9]{4,30}$")}, ["name"]
                ),
            }
        ),
    ),
    (
        "Write a GitHub issue.",
        obj(
            {
                "title": s(60),
                "body": s(120),
                "labels": arr({"enum": ["bug", "enhancement", "question", "docs"]}, 0, 2),
                "priority": i(1, 5),
                "assignee": {"anyOf": [s(20), {"type": "null"}]},
            },
            ["title", "labels"],
        ),
    ),
    (
        "Describe a movie.",
        obj(
            {
                "title": s(40),
                "year": i(1888, 2030),
                "rating": n(0, 10, multipleOf=0.5),
                "cast": arr(obj({"actor": s(24), "role": s(24)}), 0, 3),
            }
        ),
    ),
    (
        "Report a sensor reading.",
        obj(
            {
                "sensor_id": s(12, pattern="^S[0-9]{3}$"),
                "readings": arr(obj({"t": i(0, 86400), "value": n(-50, 150)}), 1, 4),
                "battery": i(0, 100),
                "status": {"enum": ["ok", "degraded", "offline"]},
            }
        ),
    ),
    (
        "Define a feature flag.",
        obj(
            {
                "key": s(30, pattern="^[a-z][a-z0-9-]*$"),
                "enabled": B,
                "rollout": i(0, 100),
                "variants": {"type": "object", "additionalProperties": i(0, 100), "maxProperties": 3},
            },
            ["key", "enabled"],
        ),
    ),
    (
        "Give a quiz question with four options.",
        obj(
            {"question": s(80), "options": arr(s(30), 4, 4), "answer_index": i(0, 3), "explanation": s(80)},
            ["question", "options", "answer_index"],
        ),
    ),
    (
        "Describe a job posting.",
        obj(
            {
                "title": s(40),
                "company": s(30),
                "remote": B,
                "salary": obj({"min": i(0, 500000), "max": i(0, 500000), "currency": {"enum": ["EUR", "USD"]}}),
                "skills": arr(s(16), 1, 4),
                "level": {"enum": ["junior", "mid", "senior", "lead"]},
            },
            ["title", "company", "level"],
        ),
    ),
    (
        "Write a translation result.",
        obj(
            {
                "source_lang": s(2, pattern="^[a-z]{2}$"),
                "target_lang": s(2, pattern="^[a-z]{2}$"),
                "text": s(80),
                "alternatives": arr(s(80), 0, 2),
            },
            ["source_lang", "target_lang", "text"],
        ),
    ),
    (
        "Describe a contact card.",
        {
            "type": "object",
            "$defs": {
                "phone": obj(
                    {"kind": {"enum": ["home", "work", "mobile"]}, "number": s(16, pattern="^\\+?[0-9 ]{6,15}$")}
                ),
                "address": obj(
                    {
                        "street": s(40),
                        "city": s(24),
                        "zip": s(10, pattern="^[0-9]{5}$"),
                        "country": s(2, pattern="^[A-Z]{2}$"),
                    },
                    ["city", "country"],
                ),
            },
            "properties": {
                "name": s(30),
                "phones": {"type": "array", "items": {"$ref": "#/$defs/phone"}, "maxItems": 2},
                "address": {"$ref": "#/$defs/address"},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    ),
    (
        "Return a paginated list of users.",
        obj(
            {
                "page": i(1, 1000),
                "per_page": {"enum": [10, 20, 50]},
                "users": arr(obj({"id": i(1, 100000), "name": s(24), "active": B}), 0, 3),
            }
        ),
    ),
    (
        "Give a chess move with its evaluation.",
        obj(
            {
                "move": s(7, pattern="^[a-h][1-8][a-h][1-8][qrbn]?$"),
                "eval": n(-100, 100),
                "mate_in": {"anyOf": [i(1, 50), {"type": "null"}]},
            },
            ["move", "eval"],
        ),
    ),
    (
        "Create a todo list.",
        obj(
            {
                "list": s(24),
                "items": arr(
                    obj(
                        {"text": s(40), "done": B, "due": {"anyOf": [s(format="date"), {"type": "null"}]}},
                        ["text", "done"],
                    ),
                    1,
                    4,
                ),
            }
        ),
    ),
    (
        "Describe a flight booking.",
        obj(
            {
                "pnr": s(6, pattern="^[A-Z0-9]{6}$"),
                "passengers": arr(
                    obj({"first": s(16), "last": s(16), "seat": s(4, pattern="^[0-9]{1,2}[A-F]$")}, ["first", "last"]),
                    1,
                    3,
                ),
                "segments": arr(
                    obj(
                        {
                            "from": s(3, pattern="^[A-Z]{3}$"),
                            "to": s(3, pattern="^[A-Z]{3}$"),
                            "departure": s(format="date-time"),
                        }
                    ),
                    1,
                    2,
                ),
            }
        ),
    ),
    (
        "Give a math answer with steps.",
        obj(
            {"steps": arr(s(60), 1, 4), "answer": {"anyOf": [i(), n()]}, "units": {"anyOf": [s(10), {"type": "null"}]}},
            ["steps", "answer"],
        ),
    ),
    (
        "Describe a software package release.",
        obj(
            {
                "name": s(24, pattern="^[a-z][a-z0-9._-]*$"),
                "version": s(16, pattern="^[0-9]+\\.[0-9]+\\.[0-9]+$"),
                "dependencies": {"type": "object", "additionalProperties": s(16), "maxProperties": 3},
                "yanked": B,
            },
            ["name", "version"],
        ),
    ),
    (
        "Rate a restaurant.",
        obj(
            {
                "restaurant": s(30),
                "stars": i(1, 5),
                "price_level": {"enum": ["$", "$$", "$$$"]},
                "review": s(100),
                "would_return": B,
            }
        ),
    ),
    (
        "Give a color palette.",
        obj({"name": s(20), "colors": arr(obj({"hex": s(7, pattern="^#[0-9A-Fa-f]{6}$"), "weight": n(0, 1)}), 2, 4)}),
    ),
    (
        "Describe a medical appointment.",
        obj(
            {
                "patient_id": s(10, pattern="^P[0-9]{6}$"),
                "doctor": s(30),
                "when": s(format="date-time"),
                "reason": s(60),
                "urgent": B,
                "follow_up": {"anyOf": [obj({"in_days": i(1, 365)}), {"type": "null"}]},
            },
            ["patient_id", "doctor", "when"],
        ),
    ),
    (
        "Describe a network interface.",
        obj(
            {
                "name": s(12, pattern="^(eth|wlan)[0-9]$"),
                "mac": s(17, pattern="^([0-9a-f]{2}:){5}[0-9a-f]{2}$"),
                "ipv4": s(format="ipv4"),
                "ipv6": {"anyOf": [s(format="ipv6"), {"type": "null"}]},
                "mtu": i(576, 9000),
            },
            ["name", "mac"],
        ),
    ),
    (
        "Write a short poem with metadata.",
        obj(
            {
                "title": s(30),
                "lines": arr(s(50), 2, 4),
                "form": {"enum": ["haiku", "limerick", "free verse"]},
                "mood": {"type": "string", "enum": ["happy", "sad", "calm"]},
            }
        ),
    ),
    (
        "Describe a person with optional nested details.",
        {
            "type": "object",
            "properties": {
                "name": s(30),
                "pets": {
                    "type": "array",
                    "items": {"anyOf": [obj({"dog": s(16)}), obj({"cat": s(16)})]},
                    "maxItems": 2,
                },
                "address": {
                    "allOf": [
                        {"type": "object", "properties": {"city": s(20)}, "required": ["city"]},
                        {"properties": {"zip": s(5, pattern="^[0-9]{5}$")}},
                    ]
                },
            },
            "required": ["name"],
        },
    ),
]


def strict_variant(schema: S) -> S:
    """Every object property required and no extra properties (OpenAI strict style)."""
    out = copy.deepcopy(schema)

    def walk(x: Any, close: bool = True) -> None:
        if isinstance(x, dict):
            if close and x.get("type") == "object" and isinstance(x.get("properties"), dict):
                x["required"] = list(x["properties"])
                x["additionalProperties"] = False
            for k, v in x.items():
                # allOf members combine their properties: closing one would forbid the others'.
                if k == "allOf" and isinstance(v, list):
                    for m in v:
                        walk(m, close=False)
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(out)
    return out


def tight_variant(schema: S) -> S:
    """The first required property made optional; numeric ranges and arrays tightened."""
    out = copy.deepcopy(schema)
    req = out.get("required")
    if isinstance(req, list) and len(req) > 1:
        out["required"] = req[1:]

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if x.get("type") == "integer" and "minimum" in x and "maximum" in x:
                lo, hi = x["minimum"], x["maximum"]
                x["maximum"] = lo + max(1, (hi - lo) // 10)
            if x.get("type") == "array" and "maxItems" in x:
                x["maxItems"] = max(x.get("minItems", 0), min(x["maxItems"], 2))
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(out)
    return out


def main() -> None:
    cases = []
    for k, (prompt, schema) in enumerate(BASES):
        for variant, sch in (("base", schema), ("strict", strict_variant(schema)), ("tight", tight_variant(schema))):
            cases.append({"id": f"{k:02d}-{variant}", "prompt": prompt, "schema": sch})
    # Schemas llguidance cannot compile, with the keyword the error must name.
    unsupported = [
        {"schema": {"type": "object", "not": {"required": ["a"]}}, "keyword": "not"},
        {
            "schema": {"type": "object", "if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}},
            "keyword": "if",
        },
        {"schema": {"type": "array", "contains": {"type": "integer"}}, "keyword": "contains"},
        {"schema": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "keyword": "uniqueItems"},
        {"schema": {"type": "object", "dependentRequired": {"a": ["b"]}}, "keyword": "dependentRequired"},
    ]
    out = Path(__file__).resolve().parent.parent / "tests" / "goldens" / "grammar" / "schemas.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "generator": "python tools/gen_grammar_schemas.py",
        "cases": cases,
        "unsupported": unsupported,
    }
    out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"{len(cases)} schemas, {len(unsupported)} unsupported -> {out}")


if __name__ == "__main__":
    main()

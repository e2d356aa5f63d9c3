"""docs/text.md's Python blocks run, in order, and print what the page says; examples/embed.py prints its table."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _minilm import DATA, TOKENIZER, checked_model_path, needs_model, needs_tokenizers

pytestmark = [needs_model, needs_tokenizers]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "text.md"


def test_the_pages_python_blocks_run_and_print_what_it_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(encoding="utf-8"), re.S | re.M)
    assert len(blocks) == 5
    (tmp_path / "paraphrase-MiniLM-L3-v2.onnx").symlink_to(checked_model_path())
    (tmp_path / "tokenizer.json").symlink_to(TOKENIZER)
    (tmp_path / "sentences.json").symlink_to(DATA / "sentences.json")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i, block in enumerate(blocks):
            exec(compile(block, f"{PAGE.name} block {i}", "exec"), namespace)
    printed = out.getvalue().splitlines()
    assert printed[0] == "(3, 384) float32"
    assert printed[4] == "(2, 16) 9"  # after the 3 x 3 similarity matrix
    assert printed[5].startswith("[101, 1996, 4937, 7719, 2006, 1996, 13523, 1012, 102, 0,")
    assert printed[6:8] == ["[16, 32, 16]", "3 (384,)"]
    assert printed[8] == "0.0 0.0" and printed[9] == "True"
    assert namespace["embedder"].engine.closed


def test_the_example_prints_the_retrieval_table() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "embed.py"), "--threads", "2"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "12 documents, 384-d embeddings, buckets (16, 32, 64, 128, 256, 512)"
    assert "Which city is the French capital?" in lines[3] and lines[3].endswith(
        "Paris is the capital and largest city of France."
    )
    assert lines[-1] == "top-1 is the relevant document for 8 of 8 queries"

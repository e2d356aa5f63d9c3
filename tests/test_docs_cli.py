"""Every command-line example in docs/ runs here, so a stale example fails.

A ```` ```console ```` block holds ``$ amdinfer ...`` lines, each followed by the output it shows. The
command runs in a temporary folder that holds the files the docs name (builder models, calibration
data); its stderr then stdout must match the shown output, where:

* numbers match any number (timings, random statistics), runs of spaces match any run of spaces;
* a line ``...`` matches any number of lines, and ``...`` inside a line matches any text;
* ``[exit N]`` as the last line states the exit code (otherwise it must be 0).
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest

from amdinfer.cli import main
from amdinfer.testing import models

DOCS = Path(__file__).resolve().parent.parent / "docs"
README = DOCS.parent / "README.md"

_BLOCK = re.compile(r"^```console\n(.*?)^```", re.S | re.M)
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
# Hashes (cache keys): hex runs with at least one letter; a run of decimal digits is a number, not a hash.
_HEX = re.compile(r"\b(?=[0-9]*[a-f])[0-9a-f]{12,64}\b")


def examples() -> list[tuple[str, int, str, str]]:
    """``(doc, line, command, expected output)`` for every ``$ amdinfer`` line of a console block."""
    found = []
    for path in [*sorted(DOCS.glob("*.md")), README]:
        text = path.read_text()
        for block in _BLOCK.finditer(text):
            line0 = text[: block.start()].count("\n") + 2
            current: list[str] | None = None
            start = line0
            for i, line in enumerate(block.group(1).splitlines()):
                if line.startswith("$ "):
                    if current is not None:
                        found.append((path.name, start, current[0], "\n".join(current[1:])))
                    current, start = [line[2:]], line0 + i
                elif current is not None:
                    current.append(line)
            if current is not None:
                found.append((path.name, start, current[0], "\n".join(current[1:])))
    return found


def normalize(text: str) -> str:
    text = _HEX.sub("H", text)
    text = _NUMBER.sub("N", text)
    lines = (re.sub(r"[ \t]+", " ", line).strip() for line in text.strip().splitlines())
    return "\n".join(line for line in lines if line)


def pattern(expected: str) -> re.Pattern[str]:
    parts = []
    for line in normalize(expected).splitlines():
        if line == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(p) for p in line.split("...")) + r"\n")
    return re.compile("".join(parts), re.S)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The files the docs' examples name, and a fresh compiled-model cache (so "cache miss" stays true)."""
    d = tmp_path_factory.mktemp("docs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMDINFER_CACHE_DIR", str(tmp_path_factory.mktemp("docs-cache")))
        _write_files(d)
        yield d


def _write_files(d: Path) -> None:
    onnx.save(models.tiny_cnn(), d / "cnn.onnx")
    onnx.save(models.tiny_cnn(), d / "m.onnx")
    np.savez(d / "obj.npz", input=np.array([{"not": "numbers"}], dtype=object))  # a pickled object array
    onnx.save(models.transformer_encoder(), d / "encoder.onnx")
    rng = np.random.default_rng(0)
    np.savez(d / "calib.npz", input=rng.random((16, 3, 32, 32), dtype=np.float32))
    np.savez(d / "inputs.npz", input=rng.random((2, 3, 32, 32), dtype=np.float32))
    # verify --bisect: one planted fault, conv2.weight scaled by 1.02 (docs/cli.md, docs/verify.md)
    onnx.save(models.tiny_cnn(), d / "good.onnx")
    bad = models.tiny_cnn()
    w = next(t for t in bad.graph.initializer if t.name == "conv2.weight")
    w.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(w) * 1.02, w.name))
    onnx.save(bad, d / "bad.onnx")
    # predict and val (docs/cli.md): a builder detector and the shipped labelled set
    onnx.save(models.yolov8(image_size=64, num_classes=3), d / "det.onnx")
    shutil.copytree(Path(__file__).parent / "data" / "val_shapes", d / "shapes")


EXAMPLES = examples()


def test_the_docs_have_examples_of_every_subcommand() -> None:
    import importlib

    from amdinfer.cli import SUBCOMMANDS

    shown = {shlex.split(cmd)[1] for _, _, cmd, _ in EXAMPLES if len(shlex.split(cmd)) > 1}
    names = {importlib.import_module(m).NAME for m in SUBCOMMANDS}
    assert names - shown == set(), f"subcommands without a docs example: {sorted(names - shown)}"


def test_no_cli_example_hides_outside_a_console_block() -> None:
    for path in [*sorted(DOCS.glob("*.md")), README]:
        for block in re.finditer(r"^```(bash|sh|shell)\n(.*?)^```", path.read_text(), re.S | re.M):
            runs = [ln for ln in block.group(2).splitlines() if re.match(r"\s*(\$ )?amdinfer (?!doctor)", ln)]
            assert not runs, f"{path.name}: CLI examples belong in ```console blocks (tested): {runs}"


@pytest.mark.parametrize(("doc", "line", "command", "expected"), EXAMPLES, ids=[f"{e[0]}:{e[1]}" for e in EXAMPLES])
def test_docs_example(doc, line, command, expected, workdir, monkeypatch, capsys) -> None:
    monkeypatch.chdir(workdir)
    argv = shlex.split(command)
    assert argv[0] == "amdinfer", f"{doc}:{line}: console examples start with `$ amdinfer`"
    want_rc = 0
    lines = expected.rstrip().splitlines()
    if lines and re.fullmatch(r"\[exit \d+\]", lines[-1].strip()):
        want_rc = int(lines[-1].strip()[6:-1])
        expected = "\n".join(lines[:-1])
    rc = main(argv[1:])
    out = capsys.readouterr()
    got = normalize(out.err + "\n" + out.out) + "\n"
    assert rc == want_rc, f"{doc}:{line}: `{command}` exited {rc}, the docs say {want_rc}\n{out.err}{out.out}"
    assert pattern(expected).fullmatch(got), (
        f"{doc}:{line}: output of `{command}` no longer matches the docs\n--- docs\n{expected}\n--- now\n"
        f"{out.err}{out.out}"
    )

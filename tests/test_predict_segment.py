"""``amdinfer predict --task segment``: what it writes equals what ``amdinfer.segment`` returns for the same files
(the classes decoded back from the JSON's RLE), the CSV's pixel counts, the overlay pictures; the task is guessed
from the builder's metadata."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import amdinfer
from amdinfer.cli import main
from amdinfer.results._segmap import rle_decode
from amdinfer.testing.models import unet


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path / "amdinfer-cache"))
    monkeypatch.chdir(tmp_path)


def test_predict_segment_writes_what_the_recipe_returns(tmp_path: Path, capsys) -> None:
    from PIL import Image

    model = tmp_path / "unet.onnx"
    onnx.save(unet(depth=2), model)
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate([(30, 41), (64, 48)]):
        image = np.zeros((h, w, 3), np.uint8)
        image[:, w // 2 :, i] = 255  # dark left; red (then green) right
        image[: h // 3] = np.clip(image[: h // 3] + rng.integers(0, 40, (h // 3, w, 3)), 0, 255)
        Image.fromarray(image).save(folder / f"im{i}.png")
    argv = ["predict", str(model), str(folder), "--save-dir", str(tmp_path / "out"), "--providers", "cpu", "-q"]
    assert main([*argv, "--json"]) == 0  # the task comes from the metadata (semantic-segmentation)
    payload = json.loads(capsys.readouterr().out)
    assert payload["task"] == "segment" and payload["items"] == 2
    records = json.loads((tmp_path / "out" / "predictions.json").read_text())
    with amdinfer.segment(model, providers=["CPUExecutionProvider"]) as seg:
        want = [seg(str(folder / f"im{i}.png")) for i in range(2)]
    for record, result in zip(records, want):
        classes = np.zeros(result.image_shape, np.int64)
        for row in record["segments"]:
            classes[rle_decode(row["rle"])] = row["class"]
            assert row["name"] == result.labels[row["class"]] and row["pixels"] == result.area(row["class"])
        np.testing.assert_array_equal(classes, result.classes)
        assert record["shape"] == list(result.image_shape)
    csv = (tmp_path / "out" / "predictions.csv").read_text().splitlines()
    assert csv[0] == "image,class,name,pixels,fraction"
    assert sum(int(line.split(",")[3]) for line in csv[1:]) == 30 * 41 + 64 * 48
    picture = np.asarray(Image.open(tmp_path / "out" / "im0.png"))
    np.testing.assert_array_equal(picture, want[0].plot())

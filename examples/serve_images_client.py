"""Send JPEG/PNG files to a served YOLO detector and read typed detections back, over REST and gRPC.

Starts ``amdinfer serve MODEL --recipe yolo`` (``amdinfer.yolo(...)`` behind it) on loopback free ports, sends the
image files as an OIP v2 ``BYTES`` tensor (one file per element; the server decodes them in its pipeline) with
tritonclient, prints the answer per image, and stops the server. The default model is the random-weight test
YOLOv8 (``amdinfer.testing.models.yolov8``): the boxes are meaningless, the mechanics are the point; pass a
trained export with ``--model yolov8n.onnx`` and your pictures with ``--image``.

The request: input ``images``, datatype ``BYTES``, shape ``[N]``. The answer: ``boxes`` FP32 ``[K, 4]``,
``scores`` FP32 ``[K]``, ``classes`` INT64 ``[K]``, ``labels`` BYTES ``[K]`` (when the model names its
classes) and ``boxes_batch_index`` INT64 ``[K]`` (which image each box belongs to).

Needs the serve extra and tritonclient (``pip install 'amdinfer-onnx[serve]' 'tritonclient[http,grpc]'``);
without them it says so and exits 0.

    python examples/serve_images_client.py
    python examples/serve_images_client.py --model yolov8n.onnx --image bus.jpg --image zidane.jpg
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np


def server_argv(model: str, folder: Path, http: int, grpc: int) -> list[str]:
    """``amdinfer serve MODEL --recipe yolo ...``: the command a user runs, here on loopback free ports."""
    options: list[str] = []
    if model == "test":  # random weights, four named classes
        import onnx

        from amdinfer.testing.models import yolov8

        proto = yolov8(seed=3, image_size=64, num_classes=4)
        proto.metadata_props.add(key="names", value="{0: 'cat', 1: 'dog', 2: 'fox', 3: 'owl'}")
        onnx.save(proto, model := str(folder / "yolov8-test.onnx"))
        options = ["--conf", "0.05", "--imgsz", "64"]
    argv = [sys.executable, "-m", "amdinfer", "serve", model, "--name", "yolo", "--recipe", "yolo", *options]
    return [*argv, "--providers", "cpu", "--http-port", str(http), "--grpc-port", str(grpc), "--max-delay-ms", "5"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sample_files() -> dict[str, bytes]:
    """Two synthetic pictures, one as JPEG and one as PNG (Pillow, else OpenCV, encodes them)."""
    y, x = np.mgrid[0:120, 0:160]
    picture = np.stack([x * 255 // 160, y * 255 // 120, np.full_like(x, 90)], -1).astype(np.uint8)
    picture[30:90, 40:100] = (230, 40, 40)
    files = {}
    for name, fmt in (("picture.jpg", "JPEG"), ("picture.png", "PNG")):
        if importlib.util.find_spec("PIL"):
            from PIL import Image

            buf = io.BytesIO()
            Image.fromarray(picture).save(buf, fmt)
            files[name] = buf.getvalue()
        else:
            import cv2

            files[name] = cv2.imencode("." + fmt.lower(), picture[..., ::-1])[1].tobytes()
    return files


def wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the server was not ready within {timeout:.0f} s:\n{log.read_text()}")


def show(protocol: str, names: list[str], result: object) -> None:
    index = result.as_numpy("boxes_batch_index")  # type: ignore[attr-defined]
    boxes, scores = result.as_numpy("boxes"), result.as_numpy("scores")  # type: ignore[attr-defined]
    labels = result.as_numpy("labels")  # type: ignore[attr-defined]
    print(f"{protocol}: {len(index)} boxes for {len(names)} images")
    for i, name in enumerate(names):
        rows = np.flatnonzero(index == i)[:3]
        best = ", ".join(f"{labels[r].decode()} {scores[r]:.2f} {[round(float(v), 1) for v in boxes[r]]}" for r in rows)
        print(f"  {name}: {np.count_nonzero(index == i)} boxes; best: {best or '-'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="test", help="a YOLO ONNX file (default: the random-weight test model)")
    parser.add_argument("--image", action="append", help="JPEG/PNG file(s) to send (default: two synthetic ones)")
    args = parser.parse_args()
    if not all(importlib.util.find_spec(m) for m in ("kserve", "tritonclient")):
        print("skipped: needs the serve extra and tritonclient")
        return
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    files = {Path(p).name: Path(p).read_bytes() for p in args.image} if args.image else sample_files()
    images = np.empty(len(files), dtype=object)  # one encoded file per element
    images[:] = list(files.values())

    http, grpc = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        with open(log, "wb") as out:
            argv = server_argv(args.model, Path(tmp), http, grpc)
            server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
        try:
            wait_ready(server, http, log)
            rest_input = httpclient.InferInput("images", [len(images)], "BYTES")
            rest_input.set_data_from_numpy(images, binary_data=True)  # binary tensor extension: raw file bytes
            show("REST", list(files), httpclient.InferenceServerClient(f"127.0.0.1:{http}").infer("yolo", [rest_input]))
            grpc_input = grpcclient.InferInput("images", [len(images)], "BYTES")
            grpc_input.set_data_from_numpy(images)
            show("gRPC", list(files), grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}").infer("yolo", [grpc_input]))
        finally:
            server.send_signal(signal.SIGTERM)  # graceful: queued requests finish, the engine closes
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


if __name__ == "__main__":
    main()

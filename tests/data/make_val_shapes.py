"""Makes tests/data/val_shapes/: a tiny labelled detection set in Ultralytics' and COCO's layouts.

Four 96x64 PNG pictures with planted shapes (filled rectangles and a disc on a grey ground), their YOLO labels
(``labels/*.txt``, ``class cx cy w h`` normalized, six decimals), ``data.yaml`` and the same boxes as COCO json
(``instances.json``, categories with the ids 1, 3 and 7 to test the mapping). ``img3`` is a background: no label
file, as Ultralytics reads one. The boxes are the shapes' exact pixel extents (hand-checkable below).

Run: ``python tests/data/make_val_shapes.py`` (needs numpy and Pillow).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

OUT = Path(__file__).parent / "val_shapes"
W, H = 96, 64
NAMES = ("square", "bar", "disc")
CATEGORY_IDS = (1, 3, 7)
#: per image: (class, x1, y1, x2, y2) in pixels, x2/y2 exclusive (the box is the shape's extent)
SHAPES: dict[str, list[tuple[int, int, int, int, int]]] = {
    "img0": [(0, 4, 4, 20, 20), (0, 40, 30, 60, 50), (1, 70, 8, 90, 16)],
    "img1": [(1, 10, 40, 50, 48), (2, 60, 10, 84, 34)],
    "img2": [(0, 30, 12, 54, 36)],
    "img3": [],
}
COLOURS = ((200, 40, 40), (40, 160, 40), (40, 40, 200))


def picture(shapes: list[tuple[int, int, int, int, int]]) -> np.ndarray:
    img = np.full((H, W, 3), 128, np.uint8)
    yy, xx = np.mgrid[0:H, 0:W]
    for c, x1, y1, x2, y2 in shapes:
        if NAMES[c] == "disc":
            cx, cy, r = (x1 + x2 - 1) / 2, (y1 + y2 - 1) / 2, (x2 - x1) / 2
            img[(xx - cx) ** 2 + (yy - cy) ** 2 <= r * r] = COLOURS[c]
        else:
            img[y1:y2, x1:x2] = COLOURS[c]
    return img


def main() -> None:
    (OUT / "images").mkdir(parents=True, exist_ok=True)
    (OUT / "labels").mkdir(parents=True, exist_ok=True)
    coco: dict[str, list[dict[str, object]]] = {"images": [], "annotations": [], "categories": []}
    coco["categories"] = [{"id": i, "name": n} for i, n in zip(CATEGORY_IDS, NAMES)]
    for k, (stem, shapes) in enumerate(SHAPES.items()):
        Image.fromarray(picture(shapes)).save(OUT / "images" / f"{stem}.png", optimize=True)
        coco["images"].append({"id": k + 1, "file_name": f"{stem}.png", "width": W, "height": H})
        lines = []
        for c, x1, y1, x2, y2 in shapes:
            lines.append(f"{c} {(x1 + x2) / 2 / W:.6f} {(y1 + y2) / 2 / H:.6f} {(x2 - x1) / W:.6f} {(y2 - y1) / H:.6f}")
            ann = {"id": len(coco["annotations"]) + 1, "image_id": k + 1, "category_id": CATEGORY_IDS[c],
                   "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1), "iscrowd": 0}  # fmt: skip
            coco["annotations"].append(ann)
        if shapes:
            (OUT / "labels" / f"{stem}.txt").write_text("\n".join(lines) + "\n")
    names = "".join(f"  {i}: {n}\n" for i, n in enumerate(NAMES))
    (OUT / "data.yaml").write_text(f"# made by tests/data/make_val_shapes.py\npath: .\nval: images\nnames:\n{names}")
    (OUT / "instances.json").write_text(json.dumps(coco, indent=1) + "\n")


if __name__ == "__main__":
    main()

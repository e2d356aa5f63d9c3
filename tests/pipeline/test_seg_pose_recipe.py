"""amdinfer.yolo on segmentation and pose models (the offline builders): task choice, the stages it builds, answers
against the raw outputs mapped by hand, and the mask kernels on hand-computed cases."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import amdinfer
from amdinfer.errors import ModelError, OptionError
from amdinfer.tasks import SegmentMasks, detect_task
from amdinfer.tasks._mask_ops import bilinear, content_box, crop_masks, masks_at_input, unletterbox
from amdinfer.testing.models import yolov8, yolov8_pose, yolov8_seg

CPU = {"providers": ["CPUExecutionProvider"]}
IMAGE = np.random.default_rng(3).integers(0, 255, (48, 80, 3), dtype=np.uint8)


def _without_task(model: onnx.ModelProto) -> onnx.ModelProto:
    keep = [p for p in model.metadata_props if p.key not in ("task", "kpt_shape")]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    return model


class TestTask:
    def test_from_metadata_then_from_outputs(self) -> None:
        assert detect_task(yolov8_seg(image_size=64)) == "segment"
        assert detect_task(yolov8_pose(image_size=64)) == "pose"
        assert detect_task(_without_task(yolov8_seg(image_size=64))) == "segment"  # the rank-4 prototypes
        assert detect_task(yolov8(image_size=64)) == "detect"

    def test_bad_task_and_missing_outputs(self) -> None:
        with pytest.raises(OptionError, match="task: got 'obb'"):
            detect_task(yolov8(image_size=64), "obb")
        with pytest.raises(ModelError, match="expected two"):
            detect_task(yolov8(image_size=64), "segment")

    def test_tiles_are_refused_rather_than_dropping_masks(self) -> None:
        with pytest.raises(OptionError, match="would drop the masks and keypoints"):
            amdinfer.yolo(yolov8_pose(image_size=64), tiles=(32, 32), **CPU)

    def test_fuse_true_is_refused_for_masks(self) -> None:
        with pytest.raises(OptionError, match="masks and keypoints are made on the host"):
            amdinfer.yolo(yolov8_seg(image_size=64, num_classes=2), fuse=True, **CPU)


class TestSegmentRecipe:
    def test_builds_the_segment_chain_and_answers_masks_in_image_pixels(self) -> None:
        with amdinfer.yolo(yolov8_seg(image_size=64, num_classes=2), conf=0.01, **CPU) as det:
            assert [type(s).__name__ for s in det.postprocess] == ["SegmentDecode", "Nms", "SegmentMasks"]
            r = det(IMAGE)
        assert len(r) > 0 and r.masks.data.shape == (len(r), 48, 80)
        assert (r.masks.areas > 0).any()
        # every mask lies inside its box (cropped in input pixels, mapped back: at most a pixel of resize spill)
        for box, m in zip(r.boxes, r.masks.data):
            ys, xs = np.nonzero(m)
            if len(xs):
                assert xs.min() >= box[0] - 2 and xs.max() <= box[2] + 1
                assert ys.min() >= box[1] - 2 and ys.max() <= box[3] + 1
        assert r.plot(text=False).shape == IMAGE.shape

    def test_retina_masks_option(self) -> None:
        with amdinfer.yolo(yolov8_seg(image_size=64, num_classes=2), conf=0.01, retina_masks=True, **CPU) as det:
            assert det.postprocess[-1].retina_masks
            assert det(IMAGE).masks.data.shape[1:] == (48, 80)


class TestPoseRecipe:
    def test_keypoints_are_the_raw_outputs_mapped_back_by_hand(self) -> None:
        import onnxruntime as ort

        model = yolov8_pose(image_size=64)
        with amdinfer.yolo(model, conf=0.01, **CPU) as det:
            assert [type(s).__name__ for s in det.postprocess] == ["PoseDecode", "Nms", "ScaleKeypoints"]
            sample = det.preprocess[1](IMAGE)  # the letterbox: 80x48 -> 64x(round(48 * 0.8) = 38), top pad 13
            r = det(IMAGE)
        x = (np.asarray(sample.data, np.float32) / 255).transpose(2, 0, 1)[None]
        (raw,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"images": x}
        )
        pred = raw[0].T
        best = int(np.argmax(pred[:, 4]))  # the best-scoring anchor is the first detection
        kpts = pred[best, 5:].reshape(17, 3).astype(np.float64)
        want_x = np.clip(kpts[:, 0] / 0.8, 0, 80)
        want_y = np.clip((kpts[:, 1] - 13) / (38 / 48), 0, 48)
        np.testing.assert_allclose(r.keypoints.data[0, :, 0], want_x, atol=1e-3)
        np.testing.assert_allclose(r.keypoints.data[0, :, 1], want_y, atol=1e-3)
        np.testing.assert_allclose(r.keypoints.conf[0], kpts[:, 2], atol=1e-6)


class TestMaskKernels:
    def test_bilinear_by_hand(self) -> None:
        x = np.array([[[0.0, 4.0], [8.0, 12.0]]], np.float32)
        out = bilinear(x, (4, 4))
        # torch: source = (i + 0.5) / 2 - 0.5 -> -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to the edge)
        assert out[0, 0].tolist() == [0.0, 1.0, 3.0, 4.0]
        assert out[0, :, 0].tolist() == [0.0, 2.0, 6.0, 8.0]

    def test_crop_keeps_columns_x1_to_below_x2(self) -> None:
        m = crop_masks(np.ones((1, 4, 6), np.uint8), np.array([[1.5, 0.0, 4.0, 2.5]]))
        assert m[0].tolist() == [[0, 0, 1, 1, 0, 0]] * 3 + [[0] * 6]

    def test_content_box_and_unletterbox(self) -> None:
        assert content_box((16, 16), (8, 16)) == (4, 0, 12, 16)
        assert content_box((160, 160), (101, 173)) == (33, 0, 126, 160)  # (160 - 93) / 2 - 0.1 -> 33
        up = unletterbox(np.pad(np.ones((1, 8, 16), np.float32), ((0, 0), (4, 4), (0, 0))), (8, 16))
        assert up.shape == (1, 8, 16) and up.min() == 1.0

    def test_a_constant_prototype_gives_the_box(self) -> None:
        m = masks_at_input(np.ones((1, 4, 4), np.float32), np.array([[1.0]]), np.array([[2, 3, 9, 12]]), (16, 16))
        assert m[0].sum() == 7 * 9 and m[0, 3:12, 2:9].all()

    def test_stage_refuses_other_geometry_and_lost_coefficients(self) -> None:
        from amdinfer.preprocess import Resize
        from amdinfer.results import Detections
        from amdinfer.stages import Sample

        meta = Resize((16, 16))(np.zeros((8, 16, 3), np.uint8)).meta
        meta["yolo_protos"] = np.ones((1, 4, 4), np.float32)
        det = Detections([[0, 0, 8, 8]], [0.9], [0], coefficients=[[1.0]])
        with pytest.raises(amdinfer.InputError, match="expected a centred Letterbox"):
            SegmentMasks()(Sample(det, meta))
        with pytest.raises(amdinfer.InputError, match="no mask coefficients"):
            SegmentMasks()(Sample(Detections([[0, 0, 8, 8]], [0.9], [0]), meta))

"""Preprocessing stages against OpenCV, Pillow and hand-worked values; one class per stage, same method names."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from stage_contract import StageContract

from amdinfer.errors import BackendUnavailableError, InputError, OptionError, StageError
from amdinfer.preprocess import (
    BgrToRgb,
    Cast,
    CenterCrop,
    HwcToChw,
    Letterbox,
    LoadImage,
    Normalize,
    Resize,
    stack,
)
from amdinfer.stages import Preprocessor, Sample

cv2 = pytest.importorskip("cv2")

RNG = np.random.default_rng(0)


def _image(h: int, w: int, c: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)


def _ultralytics_letterbox(img, new_shape, auto=False, scale_fill=False, scaleup=True, center=True, stride=32):
    """A transcription of ``ultralytics.data.augment.LetterBox.__call__`` (cv2 resize and border): the peer."""
    shape = img.shape[:2]
    r = min(new_shape[0] / shape[0], new_shape[1] / shape[1])
    if not scaleup:
        r = min(r, 1.0)
    ratio = r, r
    new_unpad = round(shape[1] * r), round(shape[0] * r)
    dw, dh = new_shape[1] - new_unpad[0], new_shape[0] - new_unpad[1]
    if auto:
        dw, dh = np.mod(dw, stride), np.mod(dh, stride)
    elif scale_fill:
        dw, dh = 0.0, 0.0
        new_unpad = (new_shape[1], new_shape[0])
        ratio = new_shape[1] / shape[1], new_shape[0] / shape[0]
    if center:
        dw /= 2
        dh /= 2
    if shape[::-1] != new_unpad:
        img = cv2.resize(img, new_unpad, interpolation=cv2.INTER_LINEAR)
    top, bottom = round(dh - 0.1) if center else 0, round(dh + 0.1)
    left, right = round(dw - 0.1) if center else 0, round(dw + 0.1)
    img = cv2.copyMakeBorder(img, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(114, 114, 114))
    return img, ratio, (left, top)


class PreprocessorContract(StageContract):
    """The stage checks, and the base class's output check."""

    def stage(self) -> Preprocessor:
        raise NotImplementedError

    def test_leaves_input_sample_alone(self) -> None:
        image = _image(20, 30)
        before = image.copy()
        sample = Sample(image, {"orig_shape": (99, 99), "tag": 1})
        out = self.stage()(sample)
        assert sample.meta == {"orig_shape": (99, 99), "tag": 1}
        np.testing.assert_array_equal(image, before)
        assert out.meta["tag"] == 1


_FIRST_IMPORT_RACE = textwrap.dedent(
    """
    import threading, numpy as np
    from amdinfer.preprocess import Letterbox
    barrier, errors = threading.Barrier(4), []
    def work():
        barrier.wait()
        try:
            for _ in range(3):
                Letterbox(64)(np.zeros((30, 40, 3), np.uint8))
        except Exception as exc:
            errors.append(repr(exc))
    threads = [threading.Thread(target=work) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    print(errors)
    """
)


def test_first_opencv_import_from_several_threads() -> None:
    """``Pipeline.map``'s workers letterbox at once in a fresh process: OpenCV's first import replaces its own
    ``sys.modules`` entry, and a concurrent lookup used to fail with ``ValueError: cv2.__spec__ is None``
    (in 2 of 3 fresh processes here before the fix). Three fresh interpreters, run side by side."""
    pytest.importorskip("cv2")
    procs = [
        subprocess.Popen([sys.executable, "-c", _FIRST_IMPORT_RACE], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        assert out.decode().strip() == "[]", out.decode()


class TestLetterbox(PreprocessorContract):
    def stage(self) -> Letterbox:
        return Letterbox(32)

    @pytest.mark.parametrize(
        ("shape", "new_shape", "options"),
        [
            ((480, 640), (640, 640), {}),
            ((375, 500), (320, 320), {}),
            ((101, 57), (64, 96), {}),
            ((33, 47), (64, 64), {"scaleup": False}),
            ((120, 90), (64, 64), {"auto": True}),
            ((120, 90), (64, 80), {"scale_fill": True}),
            ((77, 130), (96, 96), {"center": False}),
            ((64, 64), (64, 64), {}),
        ],
    )
    def test_matches_oracle(self, shape, new_shape, options) -> None:
        image = _image(*shape, seed=shape[0])
        want, ratio, pad = _ultralytics_letterbox(image, new_shape, **options)
        out = Letterbox(new_shape, **options)(image)
        assert out.data.shape == want.shape
        assert out.data.dtype == np.uint8
        np.testing.assert_allclose(out.meta["letterbox"]["ratio"], ratio, rtol=1e-12)
        assert out.meta["affine"][2:] == pad
        # OpenCV resizes uint8 in fixed point; the kernel rounds exact bilinear values.
        diff = np.abs(out.data.astype(int) - want.astype(int))
        assert diff.max() <= 1, diff.max()

    @pytest.mark.parametrize(
        ("channels", "color"),
        [
            (None, (114, 114, 114)),
            (None, (7, 20, 30)),
            (1, (7,)),
            (3, (114, 114, 114)),
            (3, (10, 20, 30)),
            (4, (10, 20, 30, 40)),
            (5, (10, 20, 30, 40, 50)),
            (5, (9,)),
        ],
    )
    def test_padding_is_the_same_with_opencv_and_numpy(self, channels, color) -> None:
        """Both padding paths against a hand-made canvas: the pad colour per channel (its first value for a
        2-D grey image, as Ultralytics), the content in between."""
        dtype = np.uint8
        shape = (30, 40) if channels is None else (30, 40, channels)
        image = np.random.default_rng(len(shape)).integers(0, 256, shape).astype(dtype)
        want = np.empty((64, 64, *shape[2:]), dtype)
        want[...] = color[0] if channels is None else np.broadcast_to(np.asarray(color, dtype), (channels,))
        want[17:47, 12:52] = image  # ratio 1 (scaleup=False): 34 rows of padding split 17 + 17, 24 columns 12 + 12
        for backend in ("numpy", "opencv"):
            out = Letterbox(64, scaleup=False, color=color, backend=backend)(image).data
            assert out.shape == want.shape and out.dtype == want.dtype, backend
            np.testing.assert_array_equal(out, want, err_msg=backend)

    def test_metadata(self) -> None:
        out = Letterbox((64, 64))(np.zeros((32, 48, 3), np.uint8))
        assert out.meta["orig_shape"] == (32, 48)
        assert out.meta["input_shape"] == (64, 64)
        assert out.meta["letterbox"]["pad"] == (0.0, 10.5)
        # Per-axis gains (Ultralytics >= 8.4): 48 -> 64 columns, 32 -> round(32 * 4 / 3) = 43 rows.
        assert out.meta["affine"] == pytest.approx((64 / 48, 43 / 32, 0.0, 10.0))  # content from round(10.5 - 0.1)
        # The padding is the pad colour: 10 rows on top, 11 at the bottom; the image sits between.
        assert (out.data[:10] == 114).all() and (out.data[-11:] == 114).all()
        assert (out.data[10] == 0).all() and (out.data[-12] == 0).all()

    def test_rejects_bad_params(self) -> None:
        with pytest.raises(OptionError, match=r"new_shape: got 0"):
            Letterbox(0)
        with pytest.raises(OptionError, match=r"new_shape: got"):
            Letterbox((640,))
        with pytest.raises(OptionError, match=r"auto: got 'yes'"):
            Letterbox(auto="yes")
        with pytest.raises(OptionError, match=r"at most one"):
            Letterbox(auto=True, scale_fill=True)
        with pytest.raises(OptionError, match=r"stride: got 0"):
            Letterbox(stride=0)
        with pytest.raises(OptionError, match=r"color"):
            Letterbox(color="grey")

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(InputError, match=r"Letterbox: got shape \(2, 3, 4, 5\)"):
            Letterbox(32)(np.zeros((2, 3, 4, 5), np.uint8))
        with pytest.raises(InputError, match=r"Letterbox: got str.*LoadImage"):
            Letterbox(32)("image.jpg")


class TestResize(PreprocessorContract):
    def stage(self) -> Resize:
        return Resize(16)

    @pytest.mark.parametrize(("shape", "size"), [((40, 60), (20, 30)), ((31, 17), (64, 48)), ((50, 50), (13, 77))])
    def test_matches_oracle(self, shape, size) -> None:
        image = _image(*shape)
        out = Resize(size)(image).data
        want = cv2.resize(image, (size[1], size[0]), interpolation=cv2.INTER_LINEAR)
        assert out.shape == want.shape and out.dtype == np.uint8
        assert np.abs(out.astype(int) - want.astype(int)).max() <= 1

    def test_metadata(self) -> None:
        # torchvision's Resize(int): shorter side to size, longer int(size * long / short).
        out = Resize(224)(_image(480, 640))
        assert out.data.shape == (224, 298, 3)
        assert out.meta["orig_shape"] == (480, 640) and out.meta["input_shape"] == (224, 298)
        assert out.meta["affine"] == pytest.approx((298 / 640, 224 / 480, 0.0, 0.0))
        assert Resize(10)(_image(30, 20)).data.shape == (15, 10, 3)

    def test_rejects_bad_params(self) -> None:
        with pytest.raises(OptionError, match=r"size: got -1"):
            Resize(-1)
        with pytest.raises(OptionError, match=r"size: got"):
            Resize((1.5, 2))

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(InputError, match=r"Resize: got list"):
            Resize(4)([[1, 2]])


class TestCenterCrop(PreprocessorContract):
    def stage(self) -> CenterCrop:
        return CenterCrop(8)

    def test_matches_oracle(self) -> None:
        image = np.arange(7 * 9, dtype=np.uint8).reshape(7, 9)
        # torchvision: top = round((7 - 4) / 2) = 2 (round half to even), left = round((9 - 4) / 2) = 2.
        np.testing.assert_array_equal(CenterCrop((4, 4))(image).data, image[2:6, 2:6])
        np.testing.assert_array_equal(CenterCrop((3, 5))(image).data, image[2:5, 2:7])

    def test_metadata(self) -> None:
        out = CenterCrop((4, 4))(_image(7, 9))
        assert out.meta["orig_shape"] == (7, 9)
        assert out.meta["input_shape"] == (4, 4)
        assert out.meta["affine"] == (1.0, 1.0, -2.0, -2.0)

    def test_rejects_bad_params(self) -> None:
        with pytest.raises(OptionError, match=r"size: got"):
            CenterCrop("big")

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(InputError, match=r"CenterCrop: got an image of size \(4, 4\), expected at least \(5, 5\)"):
            CenterCrop(5)(np.zeros((4, 4, 3), np.uint8))


class TestBgrToRgb(PreprocessorContract):
    def stage(self) -> BgrToRgb:
        return BgrToRgb()

    def test_matches_oracle(self) -> None:
        image = _image(5, 7)
        np.testing.assert_array_equal(BgrToRgb()(image).data, cv2.cvtColor(image, cv2.COLOR_BGR2RGB))

    def test_rejects_bad_params(self) -> None:
        with pytest.raises(TypeError):
            BgrToRgb(1)  # type: ignore[call-arg]

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(InputError, match=r"BgrToRgb: got shape \(5, 7\), expected \(H, W, 3\)"):
            BgrToRgb()(np.zeros((5, 7)))


class TestHwcToChw(PreprocessorContract):
    def stage(self) -> HwcToChw:
        return HwcToChw()

    def test_matches_oracle(self) -> None:
        image = _image(5, 7).astype(np.float32)
        want = cv2.dnn.blobFromImage(image)[0]  # NCHW, no scaling or swap
        out = HwcToChw()(image).data
        np.testing.assert_array_equal(out, want)
        assert out.flags.c_contiguous
        assert HwcToChw()(np.zeros((4, 6))).data.shape == (1, 4, 6)

    def test_rejects_bad_params(self) -> None:
        with pytest.raises(TypeError):
            HwcToChw("CHW")  # type: ignore[call-arg]

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(InputError, match=r"HwcToChw: got shape \(3,\)"):
            HwcToChw()(np.zeros(3))


class TestNormalize(PreprocessorContract):
    def stage(self) -> Normalize:
        return Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3), scale=1 / 255)

    def test_matches_oracle(self) -> None:
        image = _image(4, 6)
        mean, std, scale = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 1 / 255
        want = np.empty(image.shape)
        for c in range(3):
            want[..., c] = (image[..., c] * scale - mean[c]) / std[c]
        out = Normalize(mean, std, scale)(image).data
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
        chw = Normalize(mean, std, scale, channel_axis=0)(image.transpose(2, 0, 1)).data
        np.testing.assert_allclose(chw, want.transpose(2, 0, 1), rtol=1e-6, atol=1e-6)
        # Scale alone (YOLO): OpenCV's blob with scalefactor 1/255.
        blob = cv2.dnn.blobFromImage(image, scalefactor=1 / 255)[0].transpose(1, 2, 0)
        np.testing.assert_allclose(Normalize(scale=1 / 255)(image).data, blob, rtol=1e-6)
        assert Normalize(127.5, 127.5, dtype="float16")(image).data.dtype == np.float16

    def test_rejects_bad_params(self) -> None:
        with pytest.raises(OptionError, match=r"std: got .*non-zero"):
            Normalize(0, (1, 0, 1))
        with pytest.raises(OptionError, match=r"mean: got 'a'"):
            Normalize("a")
        with pytest.raises(OptionError, match=r"scale: got nan"):
            Normalize(scale=float("nan"))
        with pytest.raises(OptionError, match=r"dtype: got int8, expected a floating dtype"):
            Normalize(dtype="int8")

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(InputError, match=r"mean has 3 values, but the image of shape \(3, 4, 6\) has 6 channels"):
            Normalize((1, 2, 3))(np.zeros((3, 4, 6), np.uint8))
        with pytest.raises(InputError, match=r"Normalize: got list"):
            Normalize()([1, 2])


class TestCast(PreprocessorContract):
    def stage(self) -> Cast:
        return Cast("float16")

    def test_matches_oracle(self) -> None:
        x = RNG.standard_normal((3, 4)).astype(np.float32)
        np.testing.assert_array_equal(Cast("float16")(x).data, x.astype(np.float16))
        assert Cast(np.float32)(x).data is x  # no copy when already right

    def test_rejects_bad_params(self) -> None:
        with pytest.raises(OptionError, match=r"dtype: got 'floaty'"):
            Cast("floaty")

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(InputError, match=r"Cast: got list"):
            Cast("float32")([1.0])


class TestLoadImage(PreprocessorContract):
    def stage(self) -> LoadImage:
        return LoadImage()

    @pytest.mark.parametrize("backend", ["pillow", "opencv"])
    def test_matches_oracle(self, backend, tmp_path) -> None:
        if backend == "pillow":
            pytest.importorskip("PIL")
        rgb = _image(9, 13)
        ok, png = cv2.imencode(".png", rgb[..., ::-1])  # OpenCV writes BGR arrays
        assert ok
        path = tmp_path / "x.png"
        path.write_bytes(png.tobytes())
        for source in (path, str(path), png.tobytes()):
            out = LoadImage(backend=backend)(source)
            np.testing.assert_array_equal(out.data, rgb)
            assert out.meta["orig_shape"] == (9, 13)
        np.testing.assert_array_equal(LoadImage("BGR", backend=backend)(path).data, rgb[..., ::-1])
        grey = LoadImage("L", backend=backend)(path).data
        assert grey.shape == (9, 13) and grey.dtype == np.uint8
        assert np.abs(grey.astype(int) - cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY).astype(int)).max() <= 1

    def test_exif_orientation_agrees(self) -> None:
        pil = pytest.importorskip("PIL.Image")
        import io

        image = np.zeros((4, 6, 3), np.uint8)
        image[0, 0] = 255
        picture = pil.fromarray(image)
        exif = picture.getexif()
        exif[0x0112] = 6  # rotate 90 degrees clockwise on display
        buf = io.BytesIO()
        picture.save(buf, format="JPEG", exif=exif, quality=100)
        a = LoadImage(backend="pillow")(buf.getvalue()).data
        b = LoadImage(backend="opencv")(buf.getvalue()).data
        assert a.shape == b.shape == (6, 4, 3)
        np.testing.assert_array_equal(a, b)

    def test_rejects_bad_params(self) -> None:
        with pytest.raises(OptionError, match=r"mode: got 'CMYK'"):
            LoadImage("CMYK")
        with pytest.raises(OptionError, match=r"backend: got 'imageio'"):
            LoadImage(backend="imageio")

    def test_rejects_bad_input(self, tmp_path) -> None:
        with pytest.raises(InputError, match=r"LoadImage: cannot read"):
            LoadImage()(tmp_path / "missing.png")
        with pytest.raises(InputError, match=r"LoadImage: 5 bytes: not a decodable image"):
            LoadImage(backend="opencv")(b"hello")
        with pytest.raises(InputError, match=r"LoadImage: got int"):
            LoadImage()(3)

    def test_missing_decoder_is_an_error(self, monkeypatch) -> None:
        import amdinfer.preprocess._decode as pre

        monkeypatch.setattr(pre, "_have", lambda module: False)
        with pytest.raises(BackendUnavailableError, match=r"pip install pillow"):
            LoadImage(backend="pillow")
        with pytest.raises(BackendUnavailableError, match=r"no image decoder installed"):
            LoadImage()(b"\x89PNG")
        rgb = np.ones((2, 2, 3), np.uint8)
        assert LoadImage()(rgb).data is rgb  # arrays need no decoder


class TestStack:
    def test_stacks_and_keeps_metadata(self) -> None:
        a, b = Letterbox(32)(_image(20, 30)), Letterbox(32)(_image(30, 20))
        batch, metas = stack([a, b])
        assert batch.shape == (2, 32, 32, 3)
        assert [m["orig_shape"] for m in metas] == [(20, 30), (30, 20)]

    def test_rejects_mixed_shapes(self) -> None:
        with pytest.raises(StageError, match=r"item 1 has shape \(2,\) int64, item 0 has \(3,\) int64"):
            stack([np.zeros(3, np.int64), np.zeros(2, np.int64)])
        with pytest.raises(StageError, match=r"got no items"):
            stack([])


class TestBaseClassChecks:
    def test_wrong_return_type_names_the_stage(self) -> None:
        class Broken(Preprocessor):
            def process(self, data, meta):
                return [1, 2]

        with pytest.raises(StageError, match=r"Broken.process: returned list, expected a numpy array"):
            Broken()(np.zeros(2))


# ---------------------------------------------------------------------------------------------- the image rule
#: Images that are not uint8 pixels, the hint each refusal must give (issue 20: the stage-by-stage pipeline
#: answered all of them, the fused one refused them).
BAD_DTYPES = [
    (np.full((6, 8, 3), 100 * 257, np.uint16), r"\(image >> 8\)\.astype\(np\.uint8\)"),
    (np.full((6, 8, 3), 0.5, np.float32), r"floats in \[0, 1\] use \(image \* 255\)\.round\(\)\.astype\(np\.uint8\)"),
    (np.zeros((6, 8, 3), np.int8), r"np\.clip\(image, 0, 255\)\.astype\(np\.uint8\)"),
    (np.zeros((6, 8, 3), bool), r"image\.astype\(np\.uint8\) \* 255"),
]


class TestImageRule:
    """One rule (``check_image``) for the images the geometric stages and ``LoadImage``'s pass-through take."""

    @pytest.mark.parametrize("stage", [Letterbox(32), Resize(16), CenterCrop(4), LoadImage(), LoadImage("L")])
    @pytest.mark.parametrize(("image", "hint"), BAD_DTYPES, ids=["uint16", "float01", "int8", "bool"])
    def test_refuses_other_dtypes(self, stage, image, hint) -> None:
        name = type(stage).__name__
        got = rf"{name}: got dtype {image.dtype} \(an image of shape \(6, 8, 3\)\), expected uint8 .*; .*{hint}"
        with pytest.raises(InputError, match=got):
            stage(image)

    def test_rgba(self) -> None:
        rgba = _image(6, 8, 4)
        for stage in (Letterbox(32), LoadImage()):
            want = r"got an image with 4 channels of shape \(6, 8, 4\), expected uint8 \(H, W, 3\).*image\[\.\.\., :3\]"
            with pytest.raises(InputError, match=f"{type(stage).__name__}: {want}"):
                stage(rgba)
        # A pad colour per channel says which channel count is meant; Resize and CenterCrop take any.
        assert Letterbox(32, color=(1, 2, 3, 4))(rgba).data.shape == (32, 32, 4)
        assert Resize((3, 4))(rgba).data.shape == (3, 4, 4)
        np.testing.assert_array_equal(CenterCrop(2)(rgba).data, rgba[2:4, 3:5])

    def test_load_image_arrays_must_be_what_decoding_gives(self) -> None:
        grey = _image(6, 8, 1)[..., 0]
        rgb = _image(6, 8)
        assert LoadImage()(rgb).data is rgb and LoadImage("L")(grey).data is grey
        with pytest.raises(
            InputError,
            match=r"LoadImage: got a 2-D \(grey\) image of shape \(6, 8\), expected uint8 "
            r"\(H, W, 3\); repeat a grey image",
        ):
            LoadImage()(grey)
        with pytest.raises(
            InputError,
            match=r"LoadImage: got an image with 3 channels .* expected uint8 \(H, W\); "
            r"decode it as grey",
        ):
            LoadImage("L")(rgb)

    def test_geometric_stages_take_grey(self) -> None:
        grey = _image(6, 8, 1)[..., 0]
        assert Letterbox(16)(grey).data.shape == (16, 16)
        assert Resize((3, 4))(grey).data.shape == (3, 4)
        assert CenterCrop(2)(grey).data.shape == (2, 2)


class TestDecode16Bit:
    """Both decoders turn 16-bit images into the same 8-bit pixels: ``v >> 8`` (hand-computed here)."""

    @staticmethod
    def _write(path, array) -> None:
        """Save an RGB(A) or grey array as the file ``path`` (OpenCV writes BGR(A))."""
        order = {3: [2, 1, 0], 4: [2, 1, 0, 3]}
        ok = cv2.imwrite(str(path), array if array.ndim == 2 else array[..., order[array.shape[2]]])
        assert ok, path

    @pytest.mark.parametrize("suffix", [".png", ".tiff"])
    @pytest.mark.parametrize("channels", [None, 3, 4])
    def test_both_decoders_take_the_high_byte(self, tmp_path, suffix, channels) -> None:
        pytest.importorskip("PIL")
        shape = (5, 7) if channels is None else (5, 7, channels)
        v = np.random.default_rng(channels or 1).integers(0, 65536, shape, dtype=np.uint16)
        path = tmp_path / f"x{suffix}"
        self._write(path, v)
        high = (v >> 8).astype(np.uint8)
        want_rgb = np.repeat(high[..., None], 3, axis=2) if channels is None else high[..., :3]
        for backend in ("pillow", "opencv"):
            got = LoadImage(backend=backend)(path).data
            assert got.dtype == np.uint8
            np.testing.assert_array_equal(got, want_rgb, err_msg=backend)
            if channels is None:
                np.testing.assert_array_equal(LoadImage("L", backend=backend)(path).data, high, err_msg=backend)

    def test_16_bit_pgm(self, tmp_path) -> None:
        """Pillow opens 16-bit PGM as mode 'I' (int32 holding 0..65535); the same rule applies."""
        pytest.importorskip("PIL")
        v = np.random.default_rng(3).integers(0, 65536, (4, 6), dtype=np.uint16)
        path = tmp_path / "x.pgm"
        self._write(path, v)
        for backend in ("pillow", "opencv"):
            np.testing.assert_array_equal(LoadImage("L", backend=backend)(path).data, v >> 8, err_msg=backend)

    def test_palette_and_alpha_agree(self, tmp_path) -> None:
        pil = pytest.importorskip("PIL.Image")
        rgba = _image(5, 7, 4)
        pil.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
        index = np.random.default_rng(4).integers(0, 4, (5, 7), dtype=np.uint8)
        colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (10, 20, 30)]
        p = pil.fromarray(index, "P")
        p.putpalette([c for rgb in colours for c in rgb])
        p.save(tmp_path / "p.png")
        for backend in ("pillow", "opencv"):
            np.testing.assert_array_equal(LoadImage(backend=backend)(tmp_path / "a.png").data, rgba[..., :3])
            np.testing.assert_array_equal(
                LoadImage(backend=backend)(tmp_path / "p.png").data, np.asarray(colours, np.uint8)[index]
            )

    def test_float_images_are_refused(self, tmp_path) -> None:
        pytest.importorskip("PIL")
        path = tmp_path / "f.tiff"
        assert cv2.imwrite(str(path), np.random.default_rng(5).random((4, 6), dtype=np.float32))
        for backend in ("pillow", "opencv"):
            with pytest.raises(InputError, match=r"LoadImage: '.*f\.tiff': (a float32 image|not a decodable)"):
                LoadImage(backend=backend)(path)


class TestElongated:
    """A side that rounds to 0 pixels keeps 1 (cv2.resize cannot make 0; Ultralytics fails there)."""

    @pytest.mark.parametrize(
        ("hw", "resized"), [((20000, 3), (64, 1)), ((1001, 7), (64, 1)), ((3, 20000), (1, 64)), ((640, 3), (64, 1))]
    )
    def test_letterbox_keeps_one_pixel(self, hw, resized) -> None:
        from amdinfer.reference import letterbox, resize_bilinear

        image = np.random.default_rng(hw[0]).integers(0, 256, (*hw, 3), dtype=np.uint8)
        want, ratio, _ = letterbox(image, 64)
        # By hand: the content is the image resized to `resized`, centred with the padding rule round(d -/+ 0.1).
        top, left = round((64 - resized[0]) / 2 - 0.1), round((64 - resized[1]) / 2 - 0.1)
        assert want.shape == (64, 64, 3) and ratio == (64 / max(hw),) * 2
        np.testing.assert_array_equal(
            want[top : top + resized[0], left : left + resized[1]], resize_bilinear(image, resized[::-1])
        )
        assert (want[:top] == 114).all() and (want[:, :left] == 114).all()
        numpy_out = Letterbox(64, backend="numpy")(image)
        np.testing.assert_array_equal(numpy_out.data, want)  # the stage is the kernel
        opencv_out = Letterbox(64, backend="opencv")(image)
        assert np.abs(opencv_out.data.astype(int) - want.astype(int)).max() <= 1
        sx, sy = resized[1] / hw[1], resized[0] / hw[0]
        assert numpy_out.meta["affine"] == opencv_out.meta["affine"] == (sx, sy, float(left), float(top))

"""One recipe registry (issue 37): each recipe is one record, and the Python API, ``amdinfer serve --recipe``,
the model repository and quantize's task chooser all read it.

No KServe here: the registry, the command line's parser, the repository folder reader and
:class:`~amdinfer.serve.ModelRepository`'s checks are pure Python (``tests/serving/test_recipe_serving.py``
builds each served recipe's workers). The truth is the public API itself (``amdinfer.yolo`` is what the
``yolo`` record builds) and hand-written expectations of each recipe's options.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
from pathlib import Path

import onnx
import pytest

import amdinfer
from amdinfer.cli import build_parser
from amdinfer.errors import InputError, OptionError
from amdinfer.quantize import task_from_model
from amdinfer.quantize._task_base import TASKS
from amdinfer.recipes import RECIPES, Recipe, get_recipe
from amdinfer.serve._cli_args import RECIPE_FLAGS
from amdinfer.serve._model_folder import parse_load_config, read_repository
from amdinfer.serve._repository import ModelRepository
from amdinfer.testing.models import tiny_cnn, yolov8

#: what each recipe is, written out by hand: the public builder and the task that judges it
EXPECTED = {
    "yolo": (amdinfer.yolo, "detect"),
    "classify": (amdinfer.classify, "classify"),
    "ocr": (amdinfer.ocr, "ocr"),
    "segment": (amdinfer.segment, "generic"),
    "embed": (amdinfer.embed, "embed"),
}
#: the further models a served recipe needs in ``recipe_options`` (file names in a repository folder)
NEEDS = {"yolo": {}, "classify": {}, "ocr": {"rec": "rec.onnx"}, "segment": {}}


def _served() -> list[str]:
    return [n for n, r in RECIPES.items() if not r.not_served]


def _recipe_action() -> argparse.Action:
    (serve,) = [a for a in build_parser()._subparsers._group_actions if isinstance(a, argparse._SubParsersAction)]
    parser = serve.choices["serve"]
    return next(a for a in parser._actions if a.dest == "recipe")


class TestRegistry:
    def test_each_recipe_once_with_its_builder_and_task(self) -> None:
        assert list(RECIPES) == list(EXPECTED)
        assert all(isinstance(r, Recipe) and r.name == name for name, r in RECIPES.items())
        builders = [r.builder for r in RECIPES.values()]
        assert len(set(builders)) == len(builders)
        for name, (function, task) in EXPECTED.items():
            assert RECIPES[name].builder_function() is function, name
            assert RECIPES[name].task == task and task in TASKS
            assert task_from_model(None, recipe=name) == (task, f"the {name} recipe")

    def test_records_are_frozen(self) -> None:
        with pytest.raises(AttributeError):
            RECIPES["yolo"].task = "classify"  # type: ignore[misc]

    def test_builder_options_are_the_builders_keywords(self) -> None:
        for recipe in RECIPES.values():
            params = inspect.signature(recipe.builder_function()).parameters
            for option in recipe.options:
                assert option.name in params, f"{recipe.name}: {option.name} is not a keyword of {recipe.builder}"

    def test_an_option_of_several_recipes_is_one_record(self) -> None:
        seen: dict[str, object] = {}
        for recipe in RECIPES.values():
            for option in recipe.options:
                assert seen.setdefault(option.name, option) == option, option.name

    def test_flags_parse_with_their_type(self) -> None:
        for recipe in RECIPES.values():
            for option in recipe.options:
                if option.flag:
                    assert option.kinds[0] in (int, float, str), (recipe.name, option.name)

    def test_ocr_names_its_models(self) -> None:
        models = RECIPES["ocr"].models
        assert [(m.name, m.required) for m in models] == [("rec", True), ("cls", False)]

    @pytest.mark.parametrize("served", [False, True])
    def test_an_unknown_recipe_names_it_and_lists_the_known_ones(self, served: bool) -> None:
        known = _served() if served else list(RECIPES)
        with pytest.raises(OptionError) as info:
            get_recipe("yolov9", served=served)
        assert str(info.value) == f"recipe: got 'yolov9', expected one of {known}"
        with pytest.raises(OptionError, match=r"recipe: got \['yolo'\], expected one of"):
            get_recipe(["yolo"])  # unhashable: the same error, not a TypeError from the dict

    def test_quantize_refuses_an_unknown_recipe_the_same_way(self) -> None:
        with pytest.raises(OptionError, match=r"^recipe: got 'nope', expected one of \['yolo', 'classify', 'ocr', "):
            task_from_model(None, recipe="nope")

    def test_embed_is_known_but_not_served(self) -> None:
        assert "embed" not in _served()
        with pytest.raises(
            OptionError, match=r"got 'embed', expected one of \['yolo', 'classify', 'ocr', 'segment'\] \(embed"
        ):
            get_recipe("embed", served=True)

    def test_option_checks(self) -> None:
        yolo = RECIPES["yolo"]
        assert yolo.check_options({"conf": 1, "fuse": "auto", "agnostic": True}, "w") == {
            "conf": 1, "fuse": "auto", "agnostic": True,
        }  # fmt: skip
        for bad, match in [
            ({"topk": 3}, r"^w: got option 'topk' for recipe 'yolo', expected options among \['agnostic', "),
            ({"conf": "0.3"}, r"^w: option 'conf' got '0.3', expected a float$"),
            ({"imgsz": 64.0}, r"^w: option 'imgsz' got 64.0, expected an int$"),
            ({"imgsz": True}, r"^w: option 'imgsz' got True, expected an int$"),
            ({"fuse": 1}, r"^w: option 'fuse' got 1, expected one of \[True, False, 'auto'\]$"),
            ({"decoder": "turbo"}, r"^w: option 'decoder' got 'turbo', expected one of \['auto', 'opencv', "),
        ]:
            with pytest.raises(OptionError, match=match):
                yolo.check_options(bad, "w")


class TestCommandLine:
    def test_recipe_choices_are_the_served_recipes(self) -> None:
        assert _recipe_action().choices == _served()
        assert list(RECIPE_FLAGS) == _served()

    def test_each_recipe_flag_parses_and_belongs_to_its_record(self) -> None:
        from amdinfer.serve._cli import _recipe_options

        values = {int: "3", float: "0.5", str: "x.onnx"}
        for name in _served():
            recipe = RECIPES[name]
            assert RECIPE_FLAGS[name] == recipe.flags
            argv = ["serve", "m.onnx", "--recipe", name]
            want = {}
            for option in recipe.options:
                if option.flag:
                    text = option.choices[-1] if option.choices else values[option.kinds[0]]
                    argv += [option.cli, text]
                    want[option.name] = option.kinds[0](text)
            assert _recipe_options(build_parser().parse_args(argv)) == want

    def test_a_flag_of_another_recipe_is_refused(self) -> None:
        from amdinfer.serve._cli import _recipe_options

        args = build_parser().parse_args(["serve", "det.onnx", "--recipe", "ocr", "--rec", "r.onnx", "--conf", "0.5"])
        with pytest.raises(OptionError, match=r"^--conf: not an option of --recipe ocr$"):
            _recipe_options(args)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A repository with one model per served recipe (the files' contents are not read here) and a file outside."""
    root = tmp_path / "repo"
    for name in _served():
        (root / name).mkdir(parents=True)
        onnx.save(yolov8(image_size=64) if name == "yolo" else tiny_cnn(), root / name / "model.onnx")
        for file in NEEDS[name].values():
            onnx.save(tiny_cnn(), root / name / file)
    onnx.save(tiny_cnn(), tmp_path / "outside.onnx")
    return root


def _toml(recipes: dict[str, str]) -> str:
    return "".join(f'[models.{name}]\nrecipe = "{name}"\n{extra}\n' for name, extra in recipes.items())


def _needs(name: str) -> str:
    table = ", ".join(f'{k} = "{name}/{v}"' for k, v in NEEDS[name].items())
    return f"recipe_options = {{ {table} }}" if table else ""


class TestRepository:
    def test_every_served_recipe_is_taken_with_its_models_inside_the_folder(self, folder: Path) -> None:
        (folder / "models.toml").write_text(_toml({name: _needs(name) for name in _served()}))
        models = read_repository(folder)
        assert sorted(models) == sorted(_served())
        for name in _served():
            config = models[name]
            assert not isinstance(config, str), config
            assert config.recipe == name
            want = {k: str((folder / name / v).resolve()) for k, v in NEEDS[name].items()}
            assert config.recipe_options == want

    def test_ocr_without_rec_is_refused_at_start(self, folder: Path) -> None:
        (folder / "models.toml").write_text(_toml({"ocr": ""}))
        with pytest.raises(OptionError, match=r"\[models.ocr\]: recipe_options: 'ocr' needs rec \(the recogniser"):
            read_repository(folder)

    @pytest.mark.parametrize("rec", ["../outside.onnx", "ocr/missing.onnx", "/etc/passwd"])
    def test_a_further_model_outside_the_folder_makes_that_model_unloadable(self, folder: Path, rec: str) -> None:
        (folder / "models.toml").write_text(_toml({"ocr": f'recipe_options = {{ rec = "{rec}" }}', "yolo": ""}))
        models = read_repository(folder)
        assert isinstance(models["ocr"], str) and "recipe_options rec" in models["ocr"]
        assert not isinstance(models["yolo"], str)  # the others load

    @pytest.mark.parametrize(
        ("extra", "match"),
        [
            ('recipe = "yolov9"', r"\[models.m\]: option 'recipe': got 'yolov9', expected one of \['yolo', "),
            ('recipe = "embed"', r"option 'recipe': got 'embed', expected one of .* \(embed is not served"),
            ('recipe = "classify"\nrecipe_options = { conf = 0.5 }', r"got option 'conf' for recipe 'classify'"),
            ("recipe_options = { conf = 0.5 }", r"\[models.m\]: got recipe_options \['conf'\] without a recipe"),
        ],
    )
    def test_bad_recipes_and_options_are_refused_at_start(self, folder: Path, extra: str, match: str) -> None:
        onnx.save(tiny_cnn(), folder / "m.onnx")
        (folder / "models.toml").write_text(f"[models.m]\n{extra}\n")
        with pytest.raises(OptionError, match=match):
            read_repository(folder)

    def test_a_load_request_names_no_model_outside_the_folder(self, folder: Path) -> None:
        (folder / "models.toml").write_text(_toml({"ocr": f"{_needs('ocr')}\nload = false"}))
        repo = ModelRepository(folder, warmup=False)
        config = '{"recipe_options": {"rec": "/etc/passwd"}}'
        assert parse_load_config("ocr", config) == {"recipe_options": {"rec": "/etc/passwd"}}
        with pytest.raises(InputError, match=r"^model 'ocr': recipe_options rec: /etc/passwd resolves to .*, outside"):
            asyncio.run(repo.load("ocr", config=config))
        wrong = r"^load 'ocr': config: recipe_options: got option 'topk' for recipe 'ocr'"
        with pytest.raises(InputError, match=wrong):
            asyncio.run(repo.load("ocr", config='{"recipe_options": {"rec": "ocr/rec.onnx", "topk": 3}}'))

"""`edge models export-triton --name`: a name is never a path. `--name ../important` deleted a folder outside the
repository and wrote there; `a/b` and a newline were accepted and printed as the URL to use; a symbolic link gave
"unexpected OSError ... report it"; external data pointing outside the model's folder "unexpected ValidationError".
Now one rule for names (Triton's), and an export replaces only the files it writes, and only with --force.

Every export here runs `confined_to` its test's folder: against a regression (`--name /` once reached
`shutil.rmtree("/")`) a write or removal outside fails the test instead of happening."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_inference.cli.app import cli
from edge_inference.models.errors import ModelError
from edge_inference.models.triton_repository import ExportOptions, export_repository
from tests.confine import confined_to
from tests.helpers import write_onnx_model

pytest.importorskip("tritonclient.grpc.model_config_pb2", reason="needs the triton extra")

OPTIONS = ExportOptions(max_batch_size=0, kind="KIND_CPU", pixels=False)


def small_model(folder: Path) -> Path:
    return write_onnx_model(folder / "small.onnx", [1, 3, 32, 32], [1, 10, 6])


def files_under(folder: Path) -> set[str]:
    return {path.relative_to(folder).as_posix() for path in folder.rglob("*")}


def edge(folder: Path, *args: str) -> tuple[int, str]:
    with confined_to(folder):
        result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout + result.stderr


@settings(max_examples=150)
@given(name=st.one_of(st.text(max_size=40), st.from_regex(r"[A-Za-z0-9_.\-/]{1,20}", fullmatch=True)))
def test_a_name_writes_one_folder_inside_the_repository_or_is_refused_in_one_line(name):
    with tempfile.TemporaryDirectory() as place:
        root = Path(place)
        model = small_model(root)
        repository = root / "repository"
        repository.mkdir()
        before = files_under(root)
        try:
            with confined_to(root):
                exported = export_repository(model, repository, name, OPTIONS)
        except ModelError as refused:
            assert "\n" not in str(refused) and "cannot be a model's name" in str(refused)
            assert files_under(root) == before  # nothing written, nothing removed, anywhere
            return
        assert exported.folder.resolve().parent == repository.resolve()
        written = {f"repository/{name}{part}" for part in ("", "/1", "/config.pbtxt", "/1/model.onnx")}
        assert files_under(root) - before == written
        assert f'name: "{name}"' in (repository / name / "config.pbtxt").read_text()


def test_a_name_that_climbs_out_of_the_repository_deletes_and_writes_nothing(tmp_path):
    important = tmp_path / "important"
    important.mkdir()
    (important / "keep.txt").write_text("the user's")
    repository = tmp_path / "repository"
    code, said = edge(
        tmp_path, "models", "export-triton", str(small_model(tmp_path)), str(repository), "--name", "../important"
    )
    assert code == 1 and said.startswith("error: '../important' cannot be a model's name on a Triton server")
    assert files_under(important) == {"keep.txt"} and not repository.exists()
    for name in ("a/b", "cam\nera", "..", ".hidden", ""):
        code, said = edge(
            tmp_path, "models", "export-triton", str(small_model(tmp_path)), str(repository), "--name", name
        )
        assert code == 1 and "cannot be a model's name" in said and "unexpected" not in said, said


def test_an_existing_models_folder_is_replaced_only_with_force_and_only_its_own_files(tmp_path):
    model, repository = small_model(tmp_path), tmp_path / "repository"
    assert edge(tmp_path, "models", "export-triton", str(model), str(repository), "--name", "cam")[0] == 0
    (repository / "cam" / "NOTES.md").write_text("what the site keeps beside the model")
    (repository / "cam" / "2").mkdir()
    (repository / "cam" / "2" / "model.onnx").write_bytes(b"a second version")
    code, said = edge(tmp_path, "models", "export-triton", str(model), str(repository), "--name", "cam")
    assert code == 1 and "exists: --force replaces the model's own files there" in said, said
    assert (repository / "cam" / "NOTES.md").exists()
    code, said = edge(tmp_path, "models", "export-triton", str(model), str(repository), "--name", "cam", "--force")
    assert code == 0, said
    assert files_under(repository / "cam") == {"NOTES.md", "2", "2/model.onnx", "1", "1/model.onnx", "config.pbtxt"}


def test_a_symlinked_models_folder_is_one_line(tmp_path):
    elsewhere, repository = tmp_path / "elsewhere", tmp_path / "repository"
    elsewhere.mkdir()
    repository.mkdir()
    (repository / "cam").symlink_to(elsewhere)
    code, said = edge(tmp_path, "models", "export-triton", str(small_model(tmp_path)), str(repository), "--name", "cam")
    assert code == 1 and "is a symbolic link" in said and "unexpected" not in said, said
    assert files_under(elsewhere) == set()


def test_external_data_outside_the_models_folder_is_one_line(tmp_path):
    import onnx

    model = small_model(tmp_path)
    loaded = onnx.load(str(model))
    inside = tmp_path / "inside"
    inside.mkdir()
    onnx.save(loaded, str(inside / "split.onnx"), save_as_external_data=True, size_threshold=0, location="w.bin")
    split = onnx.load(str(inside / "split.onnx"), load_external_data=False)
    for tensor in split.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../../etc/passwd"
    onnx.save(split, str(inside / "split.onnx"))
    code, said = edge(tmp_path, "models", "export-triton", str(inside / "split.onnx"), str(tmp_path / "repository"))
    assert code == 1 and said.startswith("error: split.onnx cannot be read as ONNX") and "unexpected" not in said, said

"""Atomic writes through the kedro-datasets classes HED uses."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest
from kedro_datasets.json import JSONDataset
from kedro_datasets.matplotlib import MatplotlibDataset
from kedro_datasets.pandas import CSVDataset, ParquetDataset

from hed.records.atomic_io import install_atomic_local_writes

install_atomic_local_writes()


class Unserialisable:
    def __repr__(self) -> str:
        return "x"


class FailingFrame(pd.DataFrame):
    """A frame whose CSV writer fails after writing part of the output."""

    def to_csv(self, path_or_buf=None, **kwargs):
        path_or_buf.write("run,step\n")
        raise OSError(28, "No space left on device")


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_csv_and_json_round_trip_byte_identical(tmp_path):
    frame = pd.DataFrame({"run": ["a", "b"], "step": [1, 2], "x": [0.25, 1e-9]})
    csv = CSVDataset(filepath=str(tmp_path / "t.csv"), save_args={"index": False})
    csv.save(frame)
    first = (tmp_path / "t.csv").read_bytes()
    csv.save(csv.load())
    assert (tmp_path / "t.csv").read_bytes() == first
    js = JSONDataset(filepath=str(tmp_path / "c.json"))
    js.save({"a": [1, 2], "b": "é"})
    assert js.load() == {"a": [1, 2], "b": "é"}
    assert _files(tmp_path) == ["c.json", "t.csv"]  # no temporary files left


def test_failing_json_save_leaves_nothing(tmp_path):
    js = JSONDataset(filepath=str(tmp_path / "c.json"))
    with pytest.raises(Exception, match="not JSON serializable"):
        js.save({"ok": 1, "bad": Unserialisable()})
    assert _files(tmp_path) == []


def test_failing_save_keeps_the_previous_file(tmp_path):
    path = tmp_path / "t.csv"
    CSVDataset(filepath=str(path)).save(pd.DataFrame({"a": [1]}))
    before = path.read_bytes()
    with pytest.raises(Exception, match="No space left"):
        CSVDataset(filepath=str(path)).save(FailingFrame({"a": [2]}))
    assert path.read_bytes() == before
    assert _files(tmp_path) == ["t.csv"]


def test_versioned_parquet_and_png(tmp_path):
    from kedro.io.core import Version

    pq = ParquetDataset(filepath=str(tmp_path / "p.parquet"), version=Version(None, None))
    pq.save(pd.DataFrame({"a": [1, 2]}))
    assert pq.load()["a"].tolist() == [1, 2]
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    MatplotlibDataset(filepath=str(tmp_path / "f.png")).save(fig)
    plt.close(fig)
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    assert not [f for f in _files(tmp_path) if os.path.basename(f).startswith(".")]


def test_unwritable_target_names_the_path(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where a folder should be")
    with pytest.raises(Exception, match="not_a_folder") as err:
        CSVDataset(filepath=str(blocker / "t.csv")).save(pd.DataFrame({"a": [1]}))
    assert "\n" not in str(err.value)
    assert _files(tmp_path) == ["not_a_folder"]


def test_owned_temporary_folder_removes_only_dead_writers_folders(tmp_path):
    import subprocess

    from hed.records.atomic_io import _host, owned_temporary_folder

    child = subprocess.Popen(["sleep", "0"])
    child.wait()  # its pid now names a process that no longer runs
    killed = tmp_path / f"hed-run.step_3-{_host()}-{child.pid}-abc123"
    alive = tmp_path / f"hed-run.step_3-{_host()}-{os.getpid()}-def456"
    elsewhere = tmp_path / f"hed-run.step_3-otherhost-{child.pid}-ghi789"
    other_step = tmp_path / f"hed-run.step_30-{_host()}-{child.pid}-jkl012"
    for folder in (killed, alive, elsewhere, other_step):
        folder.mkdir()
        (folder / "rows.arrows").write_bytes(b"x" * 10)
    new = owned_temporary_folder("hed-run.step_3-", tmp_path)
    assert new.is_dir() and not any(new.iterdir())
    assert new.name.startswith(f"hed-run.step_3-{_host()}-{os.getpid()}-")
    assert not killed.exists()  # this host, process gone
    assert alive.exists() and elsewhere.exists() and other_step.exists()


# ------------------------------------------------------------------ atomic_path (HED's own files)


def test_atomic_path_commits_only_a_finished_block(tmp_path):
    from hed.records.atomic_io import atomic_path

    target = tmp_path / "sub" / "manifest.json"
    with atomic_path(target, mode=0o644) as temp:
        assert temp.parent == target.parent and temp.name.startswith(".manifest.json.")
        assert temp.name.endswith(".tmp") and not target.exists()
        temp.write_bytes(b'{"a": 1}\n')
    assert target.read_bytes() == b'{"a": 1}\n'
    assert (target.stat().st_mode & 0o777) == 0o644
    # a failing block leaves the previous file as it was and no temporary
    with pytest.raises(RuntimeError, match="half"):
        with atomic_path(target) as temp:
            temp.write_bytes(b'{"a": ')
            raise RuntimeError("half written")
    assert target.read_bytes() == b'{"a": 1}\n'
    assert _files(tmp_path) == ["sub/manifest.json"]


def test_atomic_path_into_a_file_is_one_line(tmp_path):
    from hed.errors import OutputWriteError
    from hed.records.atomic_io import atomic_path

    (tmp_path / "blocker").write_text("x")
    with pytest.raises(OutputWriteError) as exc:
        with atomic_path(tmp_path / "blocker" / "out.json") as temp:
            temp.write_text("never")
    message = str(exc.value)
    assert "\n" not in message and "blocker is a file, not a folder" in message


def test_atomic_folder_replaces_the_target_only_when_complete(tmp_path):
    from hed.records.atomic_io import atomic_folder

    target = tmp_path / "global_step_0" / "actor_hf"
    with atomic_folder(target) as temp:
        (temp / "config.json").write_text("{}")
        assert not target.exists()
    assert (target / "config.json").read_text() == "{}"
    assert (target.stat().st_mode & 0o777) == 0o755
    with pytest.raises(OSError, match="disk full"):
        with atomic_folder(target) as temp:
            (temp / "config.json").write_text('{"half": ')
            raise OSError("disk full")
    assert (target / "config.json").read_text() == "{}"  # the complete folder is kept
    assert sorted(p.name for p in target.parent.iterdir()) == ["actor_hf"]  # no leftover


# ------------------------------------------------------------------ fsspec's internals

#: What atomic_io relies on in fsspec beyond its public API (pyproject bounds fsspec above).
OPENER_NEEDS = {"__init__": ("path", "mode", "autocommit", "fs"), "_open": (), "discard": ()}
FILESYSTEM_NEEDS = {"_open": ("path", "mode", "block_size"), "_strip_protocol": (), "_parent": ()}


def missing_internals(opener: type, filesystem: type) -> list[str]:
    """``Class.member`` (or ``Class.member(parameter)``) for each internal of
    :data:`OPENER_NEEDS` / :data:`FILESYSTEM_NEEDS` the classes lack."""
    import inspect

    missing = []
    for cls, needs in ((opener, OPENER_NEEDS), (filesystem, FILESYSTEM_NEEDS)):
        for member, parameters in needs.items():
            function = getattr(cls, member, None)
            if not callable(function):
                missing.append(f"{cls.__name__}.{member}")
                continue
            known = inspect.signature(function).parameters
            missing += [f"{cls.__name__}.{member}({p})" for p in parameters if p not in known]
    return missing


def test_the_installed_fsspec_has_the_internals_atomic_io_subclasses(tmp_path):
    import fsspec
    from fsspec.implementations.local import LocalFileOpener, LocalFileSystem

    missing = missing_internals(LocalFileOpener, LocalFileSystem)
    assert not missing, (
        f"fsspec {fsspec.__version__} lacks {missing}, which hed.records.atomic_io subclasses "
        "(_AtomicLocalFile, AtomicLocalFileSystem): adapt atomic_io to it, or bound fsspec "
        "below this version in pyproject.toml"
    )
    # LocalFileOpener.__init__ opens through the subclass's _open (where the temporary is made)
    opened = []

    class Probe(LocalFileOpener):
        def _open(self):
            opened.append(self.path)
            self.f = open(tmp_path / "probe", "wb")  # closed below

    Probe(str(tmp_path / "target"), "wb", autocommit=False, fs=LocalFileSystem()).f.close()
    assert opened == [str(tmp_path / "target")]


def test_the_fsspec_check_names_what_a_changed_fsspec_lacks():
    class Opener:
        def __init__(self, path, mode, fs=None): ...

        def discard(self): ...

    class FileSystem:
        def _open(self, path, mode="rb"): ...

        _strip_protocol = "not callable"

        def _parent(self, path): ...

    assert missing_internals(Opener, FileSystem) == [
        "Opener.__init__(autocommit)",
        "Opener._open",
        "FileSystem._open(block_size)",
        "FileSystem._strip_protocol",
    ]

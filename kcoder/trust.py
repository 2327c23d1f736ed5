"""What kcoder believes from disk, and how it touches files a candidate could have planted.

- Signed records: the tuning cache and the device ceilings are facts kcoder acts on later.
  They are written with an HMAC-SHA256 whose key lives in `$KCODER_CACHE/private/` (folder
  0700, key 0600), a folder the sandbox never mounts; an entry whose MAC is missing or wrong
  is treated as absent (measured again). Under `--sandbox none` a candidate runs as the user
  and could read the key: the MAC then only catches damage, not a forger.
- Plain files only: kcoder's unconfined processes open files in folders a candidate may
  write with O_NOFOLLOW (and O_EXCL for new ones), relative to a folder descriptor opened
  without following a link, so a planted link is an error, never a redirect.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kcoder.paths import cache_root

KEY_BYTES = 32
MAC_FIELD = "kcoder_mac"


class UnsafeFile(OSError):
    """A path that is a link, not a regular file, or not where it was asked for."""


def private_dir() -> Path:
    """kcoder's own folder in the cache (the signing key): never mounted into a sandbox."""
    return cache_root() / "private"


def _key() -> bytes:
    folder = private_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    path = folder / "trust.key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        data = read_plain(path, KEY_BYTES + 1)
        if len(data) != KEY_BYTES:
            raise UnsafeFile(f"{path}: the signing key is damaged (delete it to make a new one)") from None
        return data
    key = secrets.token_bytes(KEY_BYTES)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
    return key


def mac(data: Any) -> str:
    """The HMAC of a JSON-able value (canonical form: sorted keys, no spaces)."""
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hmac.new(_key(), blob, hashlib.sha256).hexdigest()


def signed(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with its MAC in MAC_FIELD."""
    body = {k: v for k, v in data.items() if k != MAC_FIELD}
    return {**body, MAC_FIELD: mac(body)}


def verified(data: Any) -> dict[str, Any] | None:
    """`data` without its MAC when the MAC is kcoder's, else None (unsigned, forged, damaged;
    or the key cannot be read here, as inside a sandbox)."""
    if not isinstance(data, dict) or not isinstance(data.get(MAC_FIELD), str):
        return None
    body = {k: v for k, v in data.items() if k != MAC_FIELD}
    try:
        expected = mac(body)
    except OSError:
        return None
    return body if hmac.compare_digest(expected, data[MAC_FIELD]) else None


def _open_folder(path: Path) -> int:
    """A descriptor of `path`'s folder, opened without following a link in its place."""
    try:
        return os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise UnsafeFile(f"{path.parent}: {exc.strerror or exc} (a link where a folder should be?)") from None


def _open_at(folder: int, path: Path, name: str, flags: int, mode: int) -> int:
    """Open `name` in the opened `folder` (`path` names it in errors), following no link."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder)
    except OSError as exc:
        raise UnsafeFile(f"{path}: {exc.strerror or exc} (a link or a file kcoder did not make?)") from None


def _open_in(path: Path, flags: int, mode: int = 0o644) -> int:
    """Open `path` relative to its folder, following a link at neither (O_NOFOLLOW on both)."""
    folder = _open_folder(path)
    try:
        return _open_at(folder, path, path.name, flags, mode)
    finally:
        os.close(folder)


def open_plain(path: Path | str) -> Any:
    """A binary file object for reading a regular file that is not a link."""
    path = Path(path)
    fd = _open_in(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeFile(f"{path}: not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_plain(path: Path | str, limit: int | None = None) -> bytes:
    """The bytes of a regular file that is not a link (at most `limit`)."""
    with open_plain(path) as fh:
        return fh.read() if limit is None else fh.read(limit)


def create_new(path: Path | str, mode: int = 0o644) -> Any:
    """A binary file object for a file that must not exist yet (O_EXCL: a planted name or
    link is an error)."""
    return os.fdopen(_open_in(Path(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb")


@contextmanager
def writing_whole(path: Path | str, mode: int = 0o644) -> Iterator[Any]:
    """A binary file object whose contents become `path` whole when the block ends: a fresh
    file under a random name (O_EXCL), renamed over `path` (a link there is replaced, never
    followed). Both the creation and the rename act on the folder opened once without
    following a link, so swapping the folder for a link midway redirects nothing."""
    path = Path(path)
    tmp = f".{path.name}.{secrets.token_hex(6)}.tmp"
    folder = _open_folder(path)
    try:
        with os.fdopen(_open_at(folder, path, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as fh:
            yield fh
        os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
    finally:
        try:
            os.unlink(tmp, dir_fd=folder)  # left only when the block failed
        except FileNotFoundError:
            pass
        os.close(folder)


def replace_file(path: Path | str, data: bytes, mode: int = 0o644) -> None:
    """Write `data` to `path` whole (see writing_whole)."""
    with writing_whole(path, mode) as fh:
        fh.write(data)


def remove_plain(path: Path | str) -> None:
    """Remove the file `path` names, relative to its folder opened without following a link
    (a link in its place is removed, never its target)."""
    path = Path(path)
    try:
        folder = _open_folder(path)
    except UnsafeFile:
        return
    try:
        os.unlink(path.name, dir_fd=folder)
    except FileNotFoundError:
        pass
    finally:
        os.close(folder)

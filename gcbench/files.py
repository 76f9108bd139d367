"""Writes a file atomically, so readers see the old file or the whole new one; checks
up front that a file or folder can be written at all.

The data goes to a temporary name (`TMP_PREFIX` + the file's name + a random suffix) in
the same folder, is flushed to disk, and is renamed into place; a crash leaves either
the whole file or none, plus at most a temporary that callers may remove. The file gets
the mode a plain `open(path, "w")` would give it (0666 less the umask), not mkstemp's
0600, so reports and results can be served and shared. Dependency-free (stdlib only,
plus gcbench's own exception tree), so torch-free and ray-free modules such as
`gcbench.zoo` can use it.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import zlib
from pathlib import Path

from gcbench.errors import ConfigError

__all__ = [
    "TMP_PREFIX", "atomic_write", "check_writable", "file_mode", "gunzip_limited",
    "read_limited", "umask",
]  # fmt: skip

TMP_PREFIX = ".tmp-"
# atomic_write's temporary name adds TMP_PREFIX, a dot and 8 random characters.
_TMP_EXTRA = len(TMP_PREFIX) + 9
# What gcbench may add below a folder it writes: <run-id>/cells/<temporary of a cell file>.
_FOLDER_ROOM = 160


def umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc), else
    by setting and restoring it."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def file_mode() -> int:
    """The permission bits a newly created file gets: 0666 less the umask."""
    return 0o666 & ~umask()


def atomic_write(path: Path, data: bytes, durable: bool = True) -> None:
    """Write `data` to `path` so that readers see the old file, or all of the new one.
    `durable=False` skips the fsync, for files that can be written again from others
    (report pages): the rename stays atomic, a power cut may lose the new contents."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), file_mode())  # mkstemp makes 0600 whatever the umask
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_limited(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """At most `limit` bytes of `path`, a regular file; a longer file is a ConfigError
    after reading `limit` + 1 bytes, never more. Anything but a regular file (a named
    pipe, which would block the read forever, a device such as /dev/zero, a folder) is a
    ConfigError before a byte is read. `what` names the kind of file in the messages
    ("profile", "suite", ...)."""
    try:  # O_NONBLOCK: opening a named pipe without a writer would block
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ConfigError([f"{path}: cannot read {what}: {e.strerror or e}"]) from None
    mode = os.fstat(fd).st_mode  # before fdopen, which refuses a folder with an OSError
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a folder" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "a device")  # fmt: skip
        raise ConfigError([f"{path}: cannot read {what}: not a regular file ({kind})"])
    with os.fdopen(fd, "rb") as f:
        try:
            raw = f.read(limit + 1)
        except OSError as e:
            raise ConfigError([f"{path}: cannot read {what}: {e.strerror or e}"]) from None
        size = os.fstat(fd).st_size
    if len(raw) > limit:
        shown = f"{size:,} bytes" if size > limit else f"more than {limit:,} bytes"
        raise ConfigError([f"{path}: file is {shown}; {what} files are limited to {limit:,}"])
    return raw


def gunzip_limited(raw: bytes, limit: int, where: str, what: str) -> bytes:
    """`raw` decompressed if it is gzip (else as it is), never beyond `limit` bytes: a
    file that would expand further (a "gzip bomb") is a ConfigError once `limit` + 1
    bytes are out. Corrupt data is a ValueError."""
    if raw[:2] != b"\x1f\x8b":
        return raw
    out: list[bytes] = []
    n = 0
    while raw:  # a gzip file may hold several members
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            piece = d.decompress(raw, limit + 1 - n)
        except zlib.error as e:
            raise ValueError(f"not gzip data ({e})") from None
        n += len(piece)
        out.append(piece)
        if n > limit or d.unconsumed_tail:
            raise ConfigError(
                [f"{where}: decompresses to more than {limit:,} bytes; {what} files are "
                 f"limited to {limit:,}"]
            )  # fmt: skip
        if not d.eof:
            raise ValueError("not gzip data (truncated)")
        raw = d.unused_data
    return b"".join(out)


def check_writable(path: str | os.PathLike[str], what: str, *, file: bool = False) -> None:
    """Check, before any work, that gcbench can write `path`: a folder it creates or fills
    (the default), or with `file=True` a file that `atomic_write` puts there.

    Refused, as a ConfigError of one line `<what>: cannot write <path>: <why>`: a file
    where a folder is expected or a folder (or device) where a file is, a path inside a
    file, a name too long for the file system (a file's temporary name included), and a
    folder that cannot be written (its nearest existing ancestor probed with a temporary
    file that is removed at once). `what` names the flag or setting, e.g. "--results".
    Nothing is left behind, and where the file system has O_TMPFILE (Linux: ext4, xfs,
    btrfs, tmpfs) not even a changed folder time.
    """
    path = Path(path)

    def fail(why: str) -> None:
        raise ConfigError([f"{what}: cannot write {path}: {why}"])

    def exists(p: Path) -> bool:  # a name too long is an error of stat, not a missing file
        try:
            p.stat()
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as e:
            if e.errno == errno.ENAMETOOLONG:
                return False
            raise
        return True

    folder = path.parent if file else path
    while not exists(folder) and folder != folder.parent:
        folder = folder.parent
    try:
        name_max = os.pathconf(folder, "PC_NAME_MAX")
        path_max = os.pathconf(folder, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    # a file needs room for its temporary name; a folder for the names gcbench puts in it
    longest = max((len(os.fsencode(p)) for p in path.parts), default=0)
    if file and len(os.fsencode(path.name)) + _TMP_EXTRA > name_max:
        fail(f"the file name is too long (at most {name_max - _TMP_EXTRA} bytes)")
    if longest > name_max:
        fail(f"a name in it is too long (at most {name_max} bytes)")
    room = _TMP_EXTRA if file else _FOLDER_ROOM
    if len(os.fsencode(os.path.abspath(path))) + room > path_max:
        fail(f"the path is too long (at most {path_max - room} bytes here)")
    if file:
        if path.is_dir():
            fail("it is a folder; give a file name")
        if path.exists() and not path.is_file():
            fail("it is not a regular file")
        if not path.name or path.name in (".", ".."):
            fail("no file name")
    elif path.exists() and not path.is_dir():
        fail("it is a file, not a folder")
    if not folder.is_dir():
        fail(f"{folder} is a file, not a folder")
    try:
        _probe(folder)
    except OSError as e:
        why = e.strerror or errno.errorcode.get(e.errno or 0, str(e))
        fail(f"{folder} is not writable ({why})")


def _probe(folder: Path) -> None:
    """Create a file in `folder` and remove it (OSError if that fails): an unnamed one
    where the file system can (O_TMPFILE, which leaves the folder untouched, its mtime
    included), else a named temporary."""
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile:
        try:
            os.close(os.open(folder, tmpfile | os.O_WRONLY, 0o600))
            return
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    fd, probe = tempfile.mkstemp(prefix=TMP_PREFIX, dir=folder)
    os.close(fd)
    os.unlink(probe)

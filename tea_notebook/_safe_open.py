"""Opening paths beneath a folder without ever leaving it, even while the folder changes.

Every host-side read or write inside a run folder goes through here: the run folder is writable by
sandboxed code, which can leave a symbolic link, a named pipe or a swapped folder wherever the host
is about to look. The files environment uses :class:`Beneath` directly; other host code (todo.md,
run views, the tool maker's check folders, document conversions, exports) uses the one-line
helpers :func:`read_beneath`, :func:`write_beneath`, :func:`exists_beneath` and
:func:`folder_beneath`. This module sits below every floor so that runtime/ can use it too
(``tea_notebook.envs.safe_open`` re-exports it).

Checking a path and then using it by name (``resolve()``, then ``open()``) leaves a window in which
anything else that can write in the folder (code in the sandbox, another action) swaps a sub-folder
for a symbolic link to somewhere else, and the open lands there. :class:`Beneath` closes the window:
it holds the folder open as a directory descriptor and reaches a path by walking it one component
at a time, each ``openat`` relative to the folder opened just before it, with ``O_NOFOLLOW`` (and
``O_DIRECTORY`` on the way). Symbolic links are read with ``readlinkat`` and followed by the walk
itself, only while they stay beneath the folder; ``..`` returns to the folder the walk came from and
never climbs above the root. Whatever is swapped at any moment, every open happens relative to a
folder already known to lie beneath the root.

Only regular files and folders are opened. Files are opened ``O_NONBLOCK`` and checked with
``fstat`` before a byte moves, so a named pipe, socket or device is refused with an error naming
what it is instead of blocking the thread.

``openat2(RESOLVE_BENEATH)`` (Linux ≥ 5.6, no Python wrapper) would walk in the kernel, but it
refuses absolute links that point back inside the folder, which the files environment accepts; the
walk here costs one ``openat`` per component, small next to reading the file.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tea_notebook.errors import EnvironmentFailure

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOCTTY = getattr(os, "O_NOCTTY", 0)
_NOFOLLOW = os.O_NOFOLLOW | _CLOEXEC | _NOCTTY
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW

#: how each kind of :meth:`Beneath.open` opens the last component
MODES = {
    "read": os.O_RDONLY | os.O_NONBLOCK,
    "edit": os.O_RDWR | os.O_NONBLOCK,
    "write": os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK,
    "append": os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK,
    "any": os.O_RDONLY | os.O_NONBLOCK,  # a regular file or a folder (list)
}
MAX_LINKS = 40  # symbolic links followed in one path, as the kernel allows
MAX_TURNS = 64  # restarts when the folder changes under a walk (a link appears, a folder vanishes)
MAX_DEPTH = 100  # folders deeper than this are listed but not entered by walk()


def kind(mode: int) -> str:
    """What a file is, in words, from its ``st_mode``."""
    for test, name in (
        (stat.S_ISREG, "regular file"),
        (stat.S_ISDIR, "folder"),
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISFIFO, "named pipe (FIFO)"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "special file"


@dataclass
class Opened:
    """A regular file or folder opened beneath the root: its descriptor, its path relative to the
    root with links resolved (``"."`` for the root), its ``fstat`` and whether the open created it."""

    fd: int
    rel: str
    stat: os.stat_result
    created: bool = False

    @property
    def is_dir(self) -> bool:
        """True for a folder."""
        return stat.S_ISDIR(self.stat.st_mode)

    def close(self) -> None:
        """Close the descriptor (twice is fine)."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __enter__(self) -> "Opened":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Entry:
    """One name met by :meth:`Beneath.walk`: its path relative to the root and its ``lstat``.
    ``dir_fd`` is the open folder holding it, valid only until the walk moves on."""

    rel: str
    name: str
    stat: os.stat_result
    dir_fd: int


def check_kind(path: str, st: os.stat_result, mode: str) -> None:
    """Refuse anything but a regular file (or, for ``mode="any"``, a folder), naming what it is."""
    if stat.S_ISREG(st.st_mode) or (mode == "any" and stat.S_ISDIR(st.st_mode)):
        return
    if stat.S_ISDIR(st.st_mode):
        raise EnvironmentFailure(f"{path!r} is a folder, not a file (use list)")
    raise EnvironmentFailure(
        f"{path!r} is a {kind(st.st_mode)}, not a regular file; only regular files can be read or written"
    )


def _missing(path: str) -> EnvironmentFailure:
    """The failure for a path with nothing at its end (or a folder missing on the way)."""
    failure = EnvironmentFailure(f"{path!r} does not exist in the run folder")
    failure.missing = True  # type: ignore[attr-defined]  # read by read_beneath() and exists_beneath()
    return failure


def _parts(path: str) -> list[str]:
    """The components of a path given by the agent; refuses NUL characters and absolute paths."""
    raw = str(path).strip() if path is not None else ""
    if "\0" in raw:
        raise EnvironmentFailure(f"path {raw!r} refused: it contains a NUL character")
    if raw.startswith("/") or Path(raw).anchor:
        raise EnvironmentFailure(
            f"path {raw!r} refused: absolute paths are not allowed; use a path relative to the run folder"
        )
    return raw.split("/") if raw else []


class Beneath:
    """A folder held open as a directory descriptor, and everything opened beneath it.

    Every action of the files environment goes through :meth:`open` (one path) or :meth:`walk` plus
    :meth:`open_entry` (a tree): there is no other way in. The descriptor is closed by :meth:`close`
    or when the object is garbage collected, so an action still holding a reference keeps it valid.
    """

    def __init__(self, folder: str | os.PathLike[str]):
        self.path = Path(os.path.abspath(folder))
        self.real = Path(os.path.realpath(folder))
        self.fd = os.open(self.real, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
        self._real_parts = self.real.parts[1:]
        # absolute links may name the folder by its real path or by the path it was opened with
        self._prefixes = [self._real_parts, self.path.parts[1:]]

    def close(self) -> None:
        """Release the folder's descriptor."""
        fd, self.fd = getattr(self, "fd", -1), -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:  # already gone: nothing left to release
            pass

    # -- the walk ---------------------------------------------------------------------------
    def _lexically_inside(self, parts: list[str]) -> bool:
        """Whether ``parts`` stays beneath the root counting ``..`` by name alone (``../<root's own
        name>/x`` comes back in). Refuses ``a/../../x`` even when ``a`` does not exist."""
        depth = above = 0
        for name in parts:
            if name in ("", "."):
                continue
            if name == "..":
                if depth:
                    depth -= 1
                else:
                    above = min(above + 1, len(self._real_parts))
            elif above:
                if name != self._real_parts[-above]:
                    return False
                above -= 1
            else:
                depth += 1
        return above == 0

    @staticmethod
    def _outside(path: str, via_link: bool, target: str | None = None) -> EnvironmentFailure:
        via = "a symbolic link" if via_link else "'..'"
        to = f", to {target}" if target else ""
        failure = EnvironmentFailure(f"path {path!r} refused: it leads outside the run folder (through {via}{to})")
        failure.leads_outside = True  # type: ignore[attr-defined]  # read by lookup()
        return failure

    def _locate(
        self, path: str, make_parents: bool = False, folder: bool = False
    ) -> tuple[int, str | None, list[str], os.stat_result | None]:
        """Walk ``path``: returns an open descriptor of the folder holding the last component (the
        caller closes it), the last name (``None`` when the path ends at a folder through ``.`` or
        ``..``, or ``folder`` is set: the descriptor is then that folder), the resolved components
        from the root, and the ``lstat`` of the last name (``None`` when it does not exist). Links,
        also a last one, are followed; missing folders on the way (with ``folder``, the last one
        too) are created with ``make_parents``."""
        parts = _parts(path)
        if not self._lexically_inside(parts):
            raise self._outside(path, via_link=False)
        todo = deque(parts)
        held: list[int] = []  # descriptors of the folders entered below the root, innermost last
        names: list[str] = []
        above = links = turns = 0
        via_link = False

        def here() -> int:
            return held[-1] if held else self.fd

        def follow(name: str) -> bool:
            """Splice the link ``name`` into the walk; False when it is no longer a link."""
            nonlocal links, via_link, above
            try:
                target = os.readlink(name, dir_fd=here())
            except OSError:
                return False
            links += 1
            via_link = True
            if links > MAX_LINKS:
                raise EnvironmentFailure(f"path {path!r} refused: too many levels of symbolic links")
            pieces = target.split("/")
            if target.startswith("/"):
                kept = [p for p in pieces if p not in ("", ".")]
                for prefix in self._prefixes:
                    if tuple(kept[: len(prefix)]) == prefix:
                        pieces = kept[len(prefix) :]
                        break
                else:
                    raise self._outside(path, via_link=True, target=target)
                while held:
                    os.close(held.pop())
                names.clear()
                above = 0
            todo.extendleft(reversed(pieces))
            return True

        def turn() -> None:
            nonlocal turns
            turns += 1
            if turns > MAX_TURNS:
                raise EnvironmentFailure(f"{path!r} kept changing while it was being opened; try again")

        try:
            while todo:
                name = todo.popleft()
                if name in ("", "."):
                    continue
                if name == "..":
                    if held:
                        os.close(held.pop())
                        names.pop()
                    else:
                        above = min(above + 1, len(self._real_parts))
                    continue
                if above:  # above the root (a link's '..'): only the way straight back in is allowed
                    if name != self._real_parts[-above]:
                        raise self._outside(path, via_link, posixpath.join(*(".." for _ in range(above)), name))
                    above -= 1
                    continue
                if not todo and not folder:  # the last component: look at it, the caller opens it
                    try:
                        st: os.stat_result | None = os.stat(name, dir_fd=here(), follow_symlinks=False)
                    except FileNotFoundError:
                        st = None
                    except OSError as exc:
                        raise self._failure(path, exc) from None
                    if st is not None and stat.S_ISLNK(st.st_mode):
                        if not follow(name):
                            todo.appendleft(name)
                            turn()
                        continue
                    last = held.pop() if held else os.dup(self.fd)
                    return last, name, [*names, name], st
                try:
                    fd = os.open(name, _FOLDER, dir_fd=here())
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        if follow(name):
                            continue
                        if exc.errno == errno.ENOTDIR:
                            raise EnvironmentFailure(
                                f"{path!r} cannot be reached: {'/'.join([*names, name])!r} is a file, not a folder"
                            ) from None
                    elif exc.errno == errno.ENOENT and make_parents:
                        try:
                            os.mkdir(name, 0o777, dir_fd=here())
                        except FileExistsError:
                            pass
                        except OSError as mk:
                            raise self._failure(path, mk) from None
                    elif exc.errno == errno.ENOENT:
                        raise _missing(path) from None
                    else:
                        raise self._failure(path, exc) from None
                    todo.appendleft(name)  # it changed between two looks, or was just created
                    turn()
                    continue
                held.append(fd)
                names.append(name)
            if above:
                raise self._outside(path, via_link)
            last = held.pop() if held else os.dup(self.fd)
            return last, None, names, None
        finally:
            for fd in held:
                os.close(fd)

    @staticmethod
    def _failure(path: str, exc: OSError) -> EnvironmentFailure:
        return EnvironmentFailure(f"{path!r} cannot be opened: {exc.strerror or exc}")

    # -- opening ----------------------------------------------------------------------------
    def _open_at(self, dir_fd: int, name: str, path: str, mode: str) -> int | None:
        """THE opener of a last component, relative to an open folder: ``O_NOFOLLOW``,
        ``O_NONBLOCK``, then ``fstat`` and :func:`check_kind`. ``None`` when the name changed
        (became a link, vanished) since it was looked at: the caller walks again."""
        try:
            fd = os.open(name, MODES[mode] | _NOFOLLOW, 0o666, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOENT, errno.EMLINK):
                return None
            if exc.errno in (errno.ENXIO, errno.EISDIR, errno.EOPNOTSUPP):
                # a FIFO without a reader (for writing), a socket, a folder: say which
                try:
                    check_kind(path, os.stat(name, dir_fd=dir_fd, follow_symlinks=False), mode)
                except FileNotFoundError:
                    return None
            raise self._failure(path, exc) from None
        try:
            check_kind(path, os.fstat(fd), mode)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open(self, path: str, mode: str = "read") -> Opened:
        """Open ``path`` (relative to the root) as a regular file, or with ``mode="any"`` also a
        folder. Modes: ``read``, ``edit`` (read and write), ``write`` and ``append`` (both create
        the file and its missing folders; ``write`` does not truncate: the caller does, once the
        size is known to fit), ``any``. Raises :class:`EnvironmentFailure` naming ``path``."""
        creates = bool(MODES[mode] & os.O_CREAT)
        for _ in range(MAX_TURNS):
            dir_fd, name, parts, seen = self._locate(path, make_parents=creates)
            try:
                if name is None:  # the path ends at a folder through '.' or '..'
                    st = os.fstat(dir_fd)
                    check_kind(path, st, mode)
                    fd, dir_fd = dir_fd, -1
                    return Opened(fd, "/".join(parts) or ".", st)
                if seen is None and not creates:
                    raise _missing(path)
                if seen is not None:
                    check_kind(path, seen, mode)  # refused before it is even opened
                file_fd = self._open_at(dir_fd, name, path, mode)
                if file_fd is not None:
                    return Opened(file_fd, "/".join(parts), os.fstat(file_fd), created=seen is None)
            finally:
                if dir_fd >= 0:
                    os.close(dir_fd)
        raise EnvironmentFailure(f"{path!r} kept changing while it was being opened; try again")

    def folder(self, path: str, create: bool = False) -> Opened:
        """Open the folder ``path`` (``""`` or ``"."``: the root itself), making it and its missing
        parents when ``create``. Links on the way are followed only while they stay beneath the
        root; a file where a folder belongs is refused. Raises :class:`EnvironmentFailure`."""
        dir_fd, _, parts, _ = self._locate(path or ".", make_parents=create, folder=True)
        return Opened(dir_fd, "/".join(parts) or ".", os.fstat(dir_fd))

    def lookup(self, path: str) -> tuple[str, os.stat_result | None] | None:
        """Where ``path`` leads (relative to the root, links followed) and its ``lstat`` (``None``
        when nothing is there), without opening it; ``None`` when it leads outside the folder."""
        try:
            dir_fd, name, parts, seen = self._locate(path)
        except EnvironmentFailure as exc:
            if getattr(exc, "leads_outside", False):
                return None
            raise
        try:
            if name is None:
                return "/".join(parts) or ".", os.fstat(dir_fd)
            return "/".join(parts), seen
        finally:
            os.close(dir_fd)

    # -- trees ------------------------------------------------------------------------------
    def walk(self, top: Opened, recursive: bool = True, folders_first: bool = True) -> Iterator[Entry]:
        """Everything in the open folder ``top``, depth first, sorted by name (folders before the
        rest when ``folders_first``). Links are reported, never entered; sub-folders are opened
        ``O_NOFOLLOW`` relative to their parent, so a folder swapped for a link is not entered."""
        yield from self._visit(top.fd, "" if top.rel == "." else top.rel, recursive, folders_first, 0)

    def _visit(self, fd: int, rel: str, recursive: bool, folders_first: bool, depth: int) -> Iterator[Entry]:
        items: list[tuple[str, os.stat_result]] = []
        try:
            with os.scandir(fd) as it:
                for item in it:
                    try:
                        items.append((item.name, item.stat(follow_symlinks=False)))
                    except OSError:  # gone since it was listed
                        continue
        except OSError:
            return
        items.sort(key=lambda x: (folders_first and not stat.S_ISDIR(x[1].st_mode), x[0]))
        for name, st in items:
            child = f"{rel}/{name}" if rel else name
            yield Entry(child, name, st, fd)
            if recursive and stat.S_ISDIR(st.st_mode) and depth < MAX_DEPTH:
                try:
                    sub = os.open(name, _FOLDER, dir_fd=fd)
                except OSError:
                    continue
                try:
                    yield from self._visit(sub, child, recursive, folders_first, depth + 1)
                finally:
                    os.close(sub)

    def open_entry(self, entry: Entry, mode: str = "read") -> Opened | None:
        """Open a regular file met by :meth:`walk` through the same opener as :meth:`open`;
        ``None`` when it changed since it was listed (it is then skipped)."""
        check_kind(entry.rel, entry.stat, mode)
        fd = self._open_at(entry.dir_fd, entry.name, entry.rel, mode)
        return None if fd is None else Opened(fd, entry.rel, os.fstat(fd))


# -- one-line helpers for host code ------------------------------------------------------------------
class _Held:
    """``with _Held(root, create) as beneath``: a :class:`Beneath` of ``root`` (a folder path, made
    when missing and ``create``; the caller vouches that sandboxed code cannot replace the folder
    itself), closed at the end; a :class:`Beneath` given is used as it is and left open."""

    def __init__(self, root: str | os.PathLike[str] | Beneath, create: bool = False):
        self.root, self.create = root, create
        self.made: Beneath | None = None

    def __enter__(self) -> Beneath:
        if isinstance(self.root, Beneath):
            return self.root
        if self.create:
            os.makedirs(self.root, exist_ok=True)
        try:
            self.made = Beneath(self.root)
        except FileNotFoundError:
            raise EnvironmentFailure(f"the folder {os.fspath(self.root)!r} does not exist") from None
        except OSError as exc:
            raise EnvironmentFailure(f"the folder {os.fspath(self.root)!r} cannot be opened: {exc.strerror}") from None
        return self.made

    def __exit__(self, *exc: object) -> None:
        if self.made is not None:
            self.made.close()


def read_beneath(root: str | os.PathLike[str] | Beneath, path: str, limit: int) -> bytes | None:
    """The bytes of the regular file ``path`` beneath the folder ``root``; ``None`` when nothing is
    there (or the folder does not exist). Links are followed only while they stay beneath ``root``;
    a link that leads out, a named pipe, socket, device or folder, and a file over ``limit`` bytes
    are refused with an :class:`EnvironmentFailure` naming ``path``. Nothing blocks."""
    if not isinstance(root, Beneath) and not os.path.isdir(root):
        return None
    with _Held(root) as beneath:
        try:
            opened = beneath.open(path, "read")  # refuses what leads out or is not a file
        except EnvironmentFailure as exc:
            if getattr(exc, "missing", False):
                return None
            raise
        with opened:
            if opened.stat.st_size > limit:
                raise EnvironmentFailure(f"{path!r} is {opened.stat.st_size:,} bytes, over the limit of {limit:,}")
            chunks, size = [], 0
            while size <= limit:
                try:
                    chunk = os.read(opened.fd, min(1 << 20, limit + 1 - size))
                except BlockingIOError:  # a regular file never blocks; be sure anyway
                    break
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > limit:
                raise EnvironmentFailure(f"{path!r} grew past the limit of {limit:,} bytes while it was read")
            return b"".join(chunks)


def write_beneath(root: str | os.PathLike[str] | Beneath, path: str, data: bytes | str, *, mode: int = 0o644) -> str:
    """Write ``data`` (text is UTF-8) to the file ``path`` beneath the folder ``root``, whole or not
    at all: into a new temporary file in the same folder, then renamed over the name within that
    folder's descriptor. Missing folders (``root`` too) are made; links on the way are followed only
    while they stay beneath ``root``; whatever is at the last name (a link, a named pipe, a file
    someone else holds open) is replaced, never written through. The file gets exactly ``mode``.
    Returns the path written, relative to ``root``; raises :class:`EnvironmentFailure` naming it."""
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    head, _, name = str(path).rstrip("/").rpartition("/")
    if name in ("", ".", ".."):
        raise EnvironmentFailure(f"{path!r} names a folder, not a file")
    with _Held(root, create=True) as beneath:
        try:
            parent = beneath.folder(head, create=True)
        except EnvironmentFailure as exc:
            raise EnvironmentFailure(f"{path!r} cannot be written: {exc}") from None
        with parent:
            return _replace(parent, name, path, payload, mode)


def _replace(parent: Opened, name: str, path: str, payload: bytes, mode: int) -> str:
    """Write ``payload`` to a new file in the open folder ``parent`` and rename it to ``name``."""
    tmp = f".{name[:64]}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=parent.fd)
    except OSError as exc:
        raise EnvironmentFailure(f"{path!r} cannot be written: {exc.strerror or exc}") from None
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=parent.fd, dst_dir_fd=parent.fd)
    except BaseException as exc:
        try:
            os.unlink(tmp, dir_fd=parent.fd)
        except OSError:
            pass
        if not isinstance(exc, OSError):
            raise
        if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
            raise EnvironmentFailure(f"{path!r} cannot be written: a folder is in its place") from None
        raise EnvironmentFailure(f"{path!r} cannot be written: {exc.strerror or exc}") from None
    return name if parent.rel == "." else f"{parent.rel}/{name}"


def exists_beneath(root: str | os.PathLike[str] | Beneath, path: str) -> bool:
    """Whether anything (a link too, whatever it points at) is at ``path`` beneath ``root``: what
    :func:`write_beneath` would replace. Raises :class:`EnvironmentFailure` when the folders on the
    way lead outside ``root``."""
    head, _, name = str(path).rstrip("/").rpartition("/")
    if name in ("", ".", ".."):
        raise EnvironmentFailure(f"{path!r} names a folder, not a file")
    if not isinstance(root, Beneath) and not os.path.isdir(root):
        return False
    with _Held(root) as beneath:
        try:
            parent = beneath.folder(head)
        except EnvironmentFailure as exc:
            if getattr(exc, "missing", False):
                return False
            raise
        with parent:
            try:
                os.stat(name, dir_fd=parent.fd, follow_symlinks=False)
            except FileNotFoundError:
                return False
            return True


def folder_beneath(root: str | os.PathLike[str] | Beneath, path: str, create: bool = True) -> Opened:
    """The folder ``path`` beneath ``root``, open (the caller closes it), made with its missing
    parents when ``create``; links on the way are followed only while they stay beneath ``root``."""
    with _Held(root, create=create) as beneath:
        return beneath.folder(path, create=create)

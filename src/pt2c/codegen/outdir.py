"""The artifact folder: pt2c writes only where it may, and all at once.

pt2c writes into

* a folder that does not exist yet (its missing parents are created),
* an empty folder, or
* a folder it wrote before, recognised by the marker file ``.pt2c-files`` (JSON: pt2c's version and
  the relative paths of the files it wrote), which it writes last.

Anything else -- a non-empty folder without the marker, a file, a symlink to something that is not a
folder, a place it cannot write -- is refused with :class:`~pt2c.errors.OutputError` before the compile
starts. ``force`` writes pt2c's files into any folder, replacing only files of the names pt2c writes;
every other file is left alone. Without ``force``, a file in a folder pt2c wrote before that pt2c would
now overwrite but did not write itself (not in the marker) is refused too.

The artifact is written into a fresh staging folder first (a hidden sibling ``.<out>.pt2c-XXXXXXXX``
made by ``tempfile.mkdtemp``; inside the output folder, as ``.pt2c-staging-XXXXXXXX``, when the sibling
cannot be made on the same file system), then moved into place: a new folder by one rename of the whole
staging folder; an existing folder file by file, each file it replaces first moved aside into the
staging folder, so that a failure puts everything back. Files listed in the old marker that the new
compile does not write are removed (regular files and symlinks only, never folders), then the new
marker is written.

Symlinks inside the output folder are never followed: a rename replaces the link itself, a removal
removes the link, and a folder pt2c writes into (``pt2c_kernels/``) must be a real folder, or nothing is
moved. Where the OS allows it, every operation is relative to a descriptor of a folder opened with
``O_NOFOLLOW``, so a symlink swapped in while pt2c runs is not followed either. The output folder itself
may be a symlink to a folder (the user named it). Whatever fails, the staging folder is removed and the
output folder is left as it was; a new folder is not created, nor are its missing parents.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

from pt2c.version import __version__
from pt2c.errors import ModelNameError, OutputError

MARKER = ".pt2c-files"
MAX_NAME_LEN = 64  # the model name becomes file names (<name>Config.cmake.in, ...) and C symbols
SUBDIRS = ("pt2c_kernels", "custom_ops")  # folders pt2c writes into: they must be real folders

HINT = ("use a new or empty folder, or --force (force=True in Python) to write pt2c's files into it, "
        "which replaces only files of the names pt2c writes and leaves every other file alone")

_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# descriptor-relative operations (POSIX): a folder checked once stays the folder operated on
_USE_FDS = bool(_O_DIRECTORY and _O_NOFOLLOW) and os.stat in os.supports_follow_symlinks and all(
    f in os.supports_dir_fd for f in (os.open, os.stat, os.unlink, os.rmdir, os.mkdir, os.rename))


def check_name(name: Any) -> str:
    """An explicit model name: a C identifier of at most MAX_NAME_LEN characters (ModelNameError)."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        shown = repr(name) if not isinstance(name, str) or len(name) <= 80 else repr(name[:60] + "...")
        raise ModelNameError(f"model name {shown} must be a C identifier (it prefixes every symbol)")
    if len(name) > MAX_NAME_LEN:
        raise ModelNameError(f"model name {name[:24]}... is {len(name)} characters long, at most {MAX_NAME_LEN} "
                             "(it becomes file names and C symbols): pass a shorter --name")
    return name


# ---------------------------------------------------------------------------- checks


def _why(e: BaseException) -> str:
    return (getattr(e, "strerror", None) or str(e) or type(e).__name__).rstrip(".")


def _abspath(out_dir: Any) -> str:
    try:
        p = os.fspath(out_dir)
        if not isinstance(p, str):
            p = os.fsdecode(p)
        if "\0" in p:
            raise ValueError("embedded NUL")
    except (TypeError, ValueError) as e:
        raise OutputError(f"{out_dir!r} is not a usable output folder path ({e})") from None
    return os.path.abspath(p)  # lexical: a symlink named as the folder itself is kept (and followed)


def _safe_rel(p: Any) -> bool:
    """A relative path from a marker: inside the folder, no '..', no absolute or drive paths."""
    if not isinstance(p, str) or not p or p == MARKER or len(p) > 1024:
        return False
    if "\\" in p or ":" in p or "\0" in p or p.startswith("/"):
        return False
    parts = p.split("/")
    return len(parts) <= 8 and all(x not in ("", ".", "..") for x in parts)


def _marker_bytes(files: Any) -> bytes:
    doc = {"written_by": "pt2c", "pt2c_version": __version__, "files": sorted(files)}
    return (json.dumps(doc, indent=2) + "\n").encode()


def _read_marker(path: str) -> list[str] | None:
    """The files pt2c wrote into ``path`` (from its marker), or None: no marker, not a regular file
    (a symlink is not read), or not pt2c's JSON."""
    try:
        fd = os.open(os.path.join(path, MARKER), os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            data = json.loads(f.read(1 << 24).decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("written_by") != "pt2c" or not isinstance(data.get("files"), list):
        return None
    return [p for p in data["files"] if _safe_rel(p)]  # anything else is ignored: never removed


def _inspect(path: str, force: bool, ignore: str | None = None) -> tuple[str, list[str]]:
    """("new" | "empty" | "pt2c" | "forced", files the old marker lists); OutputError where pt2c may not write."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "new", []
    except OSError as e:
        raise OutputError(f"cannot use {path} as the output folder: {_why(e)}; pick a folder you can write") from None
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        try:
            st = os.stat(path)
        except OSError:
            raise OutputError(f"{path} is a symlink to {target!r}, which does not exist; pt2c does not create "
                              "a folder through a symlink: pass -o a new or empty folder") from None
        if not stat.S_ISDIR(st.st_mode):
            raise OutputError(f"{path} is a symlink to {target!r}, which is not a folder; "
                              "pass -o a new or empty folder") from None
    elif not stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{path} is a file, not a folder; pass -o a new or empty folder "
                          "(or one pt2c wrote before)")
    try:
        entries = sorted(e for e in os.listdir(path) if e != ignore)
    except OSError as e:
        raise OutputError(f"cannot read the output folder {path}: {_why(e)}") from None
    if not entries:
        return "empty", []
    for sub in SUBDIRS:
        try:
            sst = os.lstat(os.path.join(path, sub))
        except OSError:
            continue
        if not stat.S_ISDIR(sst.st_mode):
            what = "a symlink" if stat.S_ISLNK(sst.st_mode) else "a file"
            raise OutputError(f"{os.path.join(path, sub)} is {what}, not a folder: pt2c writes its kernels there "
                              "and never writes through a symlink; remove it, or pass -o a new or empty folder")
    old = _read_marker(path)
    if old is not None:
        return "pt2c", old
    if force:
        return "forced", []
    if MARKER in entries:
        raise OutputError(f"{path} holds a {MARKER} that is not a list of files pt2c wrote; refusing to write "
                          f"into it: {HINT}")
    shown = ", ".join(entries[:5]) + (f", ... ({len(entries)} entries)" if len(entries) > 5 else "")
    raise OutputError(f"{path} is not empty ({shown}) and pt2c did not write it (no {MARKER}); refusing to "
                      f"write into it: {HINT}")


def _check_writable(path: str, kind: str) -> None:
    if kind != "new":
        if not os.access(path, os.W_OK | os.X_OK):
            raise OutputError(f"the output folder {path} is not writable; pick a folder you can write")
        return
    anc = os.path.dirname(path)
    while not os.path.lexists(anc):
        anc = os.path.dirname(anc)
    if not os.path.isdir(anc):
        raise OutputError(f"cannot create {path}: {anc} is not a folder; pass -o a new or empty folder")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise OutputError(f"cannot create {path}: {anc} is not writable; pick a folder you can write")


def check_output_dir(out_dir: Any, force: bool = False) -> str:
    """Raise OutputError unless pt2c may write into ``out_dir`` (see the module docstring); writes nothing.
    Returns "new", "empty", "pt2c" (a folder pt2c wrote before) or "forced"."""
    path = _abspath(out_dir)
    kind, _ = _inspect(path, force)
    _check_writable(path, kind)
    return kind


# ---------------------------------------------------------------------------- folders, without following links


class _Dir:
    """A real folder: a descriptor opened with O_NOFOLLOW where the OS has them (every operation is then
    relative to it), else its path. Entries are never followed: lstat, rename and unlink act on a link."""

    def __init__(self, path: str, fd: int | None = None):
        self.path, self.fd = path, fd

    @classmethod
    def root(cls, path: str) -> _Dir:  # the output folder itself (may be a symlink to a folder: the user's choice)
        if _USE_FDS:
            return cls(path, os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC))
        return cls(path)

    def _p(self, name: str) -> str:
        return os.path.join(self.path, name)

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            if self.fd is not None:
                return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            return os.lstat(self._p(name))
        except FileNotFoundError:
            return None

    def sub(self, name: str) -> _Dir:
        if self.fd is not None:  # ELOOP / ENOTDIR if it is a symlink or a file by now
            return _Dir(self._p(name), os.open(name, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC,
                                               dir_fd=self.fd))
        if not stat.S_ISDIR(os.lstat(self._p(name)).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a real folder", self._p(name))
        return _Dir(self._p(name))

    def mkdir(self, name: str) -> None:
        os.mkdir(name, dir_fd=self.fd) if self.fd is not None else os.mkdir(self._p(name))

    def rmdir(self, name: str) -> None:
        os.rmdir(name, dir_fd=self.fd) if self.fd is not None else os.rmdir(self._p(name))

    def unlink(self, name: str) -> None:
        os.unlink(name, dir_fd=self.fd) if self.fd is not None else os.unlink(self._p(name))

    def move_in(self, src: str, name: str) -> None:  # src: an absolute path in the staging folder
        os.replace(src, name, dst_dir_fd=self.fd) if self.fd is not None else os.replace(src, self._p(name))

    def move_out(self, name: str, dst: str) -> None:  # the entry itself (a link stays a link)
        os.replace(name, dst, src_dir_fd=self.fd) if self.fd is not None else os.replace(self._p(name), dst)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _split(rel: str) -> tuple[str, str]:
    d, _, base = rel.rpartition("/")
    return d, base


# ---------------------------------------------------------------------------- the writer


class OutputFolder:
    """Checks ``out_dir`` now (OutputError) and makes the staging folder; write the artifact into
    ``.staging``, then :meth:`commit`. Used as a context manager: on any exception, or without a
    commit, the staging folder (and any parent folder made for a new output folder) is removed."""

    def __init__(self, out_dir: Any, *, force: bool = False):
        self.path = _abspath(out_dir)
        self.force = bool(force)
        self.kind = check_output_dir(self.path, self.force)
        self._made_parents: list[str] = []
        self._inside = False  # staging folder inside the output folder (no same-device sibling possible)
        self._keep_staging = False
        self.committed = False
        self.staging = Path(self._make_staging())
        self._staging_alive = True
        self._n_backup = 0

    # -- staging

    def _make_staging(self) -> str:
        parent, base = os.path.split(self.path)
        prefix = "." + (base[:40] or "out") + ".pt2c-"
        if self.kind == "new":
            try:
                missing = []
                p = parent
                while not os.path.lexists(p):
                    missing.append(p)
                    p = os.path.dirname(p)
                for d in reversed(missing):
                    os.mkdir(d)
                    self._made_parents.append(d)
                return tempfile.mkdtemp(prefix=prefix, dir=parent)
            except OSError as e:
                self._remove_parents()
                at = f" ({e.filename})" if e.filename and e.filename != self.path else ""
                raise OutputError(f"cannot create {self.path}: {_why(e)}{at}; pick a folder you can write") from None
        try:  # a sibling on the same file system: renames into the output folder cannot cross devices
            if os.stat(parent).st_dev == os.stat(self.path).st_dev:
                return tempfile.mkdtemp(prefix=prefix, dir=parent)
        except OSError:
            pass
        try:
            d = tempfile.mkdtemp(prefix=".pt2c-staging-", dir=self.path)
        except OSError as e:
            raise OutputError(f"cannot write into {self.path}: {_why(e)}; pick a folder you can write") from None
        self._inside = True
        return d

    def _remove_parents(self) -> None:
        for d in reversed(self._made_parents):
            try:
                os.rmdir(d)
            except OSError:
                break
        self._made_parents = []

    def discard(self) -> None:
        """Remove the staging folder (unless a failed rollback left the user's files in it)."""
        if self._staging_alive and not self._keep_staging:
            shutil.rmtree(self.staging, ignore_errors=True)  # never follows links inside it
            self._staging_alive = False
        if not self.committed:
            self._remove_parents()

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.discard()

    # -- commit

    def _staged_files(self) -> list[str]:
        files = []
        for root, _dirs, names in os.walk(self.staging):
            rel = os.path.relpath(root, self.staging)
            for n in names:
                p = n if rel == "." else os.path.join(rel, n).replace(os.sep, "/")
                if not stat.S_ISREG(os.lstat(os.path.join(root, n)).st_mode) or not _safe_rel(p):
                    raise OutputError(f"internal error: unexpected entry {p!r} in the staging folder {self.staging}")
                files.append(p)
        return sorted(files)

    def commit(self) -> list[str]:
        """Move the staged artifact into the output folder; returns the files written (relative paths)."""
        if self.committed:
            raise RuntimeError("already committed")
        files = self._staged_files()
        kind, old = _inspect(self.path, self.force, ignore=self.staging.name if self._inside else None)
        if kind == "new" and not self._inside:
            self._commit_new(files)
        else:  # (a folder made meanwhile by someone else is checked like any existing folder)
            self._check_staging_device()
            self._merge(files, old)
        self.committed = True
        self._made_parents = []
        self.discard()
        return files

    def _commit_new(self, files: list[str]) -> None:
        with open(self.staging / MARKER, "wb") as f:
            f.write(_marker_bytes(files))
        probe = self.staging / ".pt2c-mode-probe"  # mkdtemp's 0700 -> the mode a plain mkdir gives (umask)
        try:
            os.mkdir(probe)
            mode = stat.S_IMODE(os.stat(probe).st_mode)
            os.rmdir(probe)
            os.chmod(self.staging, mode)
            os.rename(self.staging, self.path)  # one step: the folder appears whole, or not at all
        except OSError as e:
            raise OutputError(f"cannot create {self.path}: {_why(e)}") from None
        self._staging_alive = False

    def _check_staging_device(self) -> None:
        try:
            same = os.stat(self.staging).st_dev == os.stat(self.path).st_dev
        except OSError as e:
            raise OutputError(f"cannot write into {self.path}: {_why(e)}") from None
        if not same:
            raise OutputError(f"{self.path} changed while pt2c compiled (it is on another file system now); "
                              "nothing was written: compile again")

    def _backup(self) -> str:
        self._n_backup += 1
        return os.path.join(self.staging, ".pt2c-replaced", str(self._n_backup))

    def _dir(self, dirs: dict[str, _Dir], rel: str, journal: list | None = None) -> _Dir | None:
        """The real folder ``rel`` inside the output folder; None when missing (made when journal is given).
        OutputError when it, or a folder above it, is a symlink or a file."""
        if rel in dirs:
            return dirs[rel]
        up, name = _split(rel)
        parent = self._dir(dirs, up, journal)
        if parent is None:
            return None
        st = parent.lstat(name)
        if st is None:
            if journal is None:
                return None
            parent.mkdir(name)
            journal.append(("mkdir", parent, name, ""))
        elif not stat.S_ISDIR(st.st_mode):
            what = "a symlink" if stat.S_ISLNK(st.st_mode) else "a file"
            raise OutputError(f"{os.path.join(self.path, rel)} is {what}, not a folder: pt2c writes into {rel}/ "
                              "and never writes through a symlink; remove it, or pass -o a new or empty folder")
        dirs[rel] = d = parent.sub(name)
        return d

    def _merge(self, files: list[str], old: list[str]) -> None:
        new, old_set = set(files), set(old)
        try:
            root = _Dir.root(self.path)
        except OSError as e:
            raise OutputError(f"cannot write into {self.path}: {_why(e)}") from None
        dirs: dict[str, _Dir] = {"": root}
        journal: list[tuple[str, _Dir, str, str]] = []
        try:
            # 1. every check before anything moves
            conflicts = []
            for f in files:
                d = self._dir(dirs, _split(f)[0])
                st = d.lstat(_split(f)[1]) if d is not None else None
                if st is None:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    raise OutputError(f"{os.path.join(self.path, f)} is a folder; pt2c writes a file of that name: "
                                      "remove or rename it, or pass -o a new or empty folder")
                if f not in old_set and not self.force:
                    conflicts.append(f)
            for f in old_set - new:
                self._dir(dirs, _split(f)[0])
            st = root.lstat(MARKER)
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise OutputError(f"{os.path.join(self.path, MARKER)} is a folder; pt2c writes its list of files "
                                  "there: remove it, or pass -o a new or empty folder")
            if conflicts:
                shown = ", ".join(conflicts[:5]) + (", ..." if len(conflicts) > 5 else "")
                raise OutputError(f"{self.path} holds {len(conflicts)} file(s) that pt2c would overwrite but did not "
                                  f"write ({shown}); nothing was written: {HINT}")
            # 2. move: every entry replaced or removed goes aside into the staging folder first
            os.mkdir(os.path.join(self.staging, ".pt2c-replaced"))
            try:
                self._put(dirs, journal, MARKER, self._marker_file(new | old_set, "interim"))  # covers a crash
                for f in files:
                    self._put(dirs, journal, f, os.path.join(self.staging, f))
                for f in sorted(old_set - new):
                    self._take(dirs, journal, f)
                self._put(dirs, journal, MARKER, self._marker_file(new, "final"))
            except BaseException as e:
                failed = self._rollback(journal)
                if failed:
                    self._keep_staging = True
                    raise OutputError(f"writing into {self.path} failed ({_why(e)}) and {len(failed)} file(s) could "
                                      f"not be put back ({', '.join(failed[:5])}); the originals are in "
                                      f"{self.staging}/.pt2c-replaced") from None
                if isinstance(e, OSError):
                    raise OutputError(f"writing into {self.path} failed: {_why(e)}; the folder was left as it "
                                      "was") from None
                raise
            # 3. done: the entries moved aside go (files and links only), then emptied folders pt2c wrote
            for kind, _d, _name, b in journal:
                if kind == "backup":
                    try:
                        os.unlink(b)
                    except OSError:
                        pass
            gone = {_split(f)[0] for f in old_set} - {_split(f)[0] for f in new} - {""}
            for rel in sorted(gone, key=lambda r: -r.count("/")):
                up, name = _split(rel)
                parent = dirs.get(up)
                if parent is not None and rel in dirs:
                    try:
                        parent.rmdir(name)  # only if empty; a symlink is never a key of dirs
                    except OSError:
                        pass
        finally:
            for d in dirs.values():
                d.close()

    def _marker_file(self, files: set[str], tag: str) -> str:
        p = os.path.join(self.staging, ".pt2c-replaced", f"marker-{tag}")
        with open(p, "wb") as f:
            f.write(_marker_bytes(files))
        return p

    def _put(self, dirs: dict[str, _Dir], journal: list, rel: str, src: str) -> None:
        up, name = _split(rel)
        d = self._dir(dirs, up, journal)
        assert d is not None
        if d.lstat(name) is not None:
            b = self._backup()
            d.move_out(name, b)
            journal.append(("backup", d, name, b))
        d.move_in(src, name)
        journal.append(("new", d, name, src))

    def _take(self, dirs: dict[str, _Dir], journal: list, rel: str) -> None:
        up, name = _split(rel)
        d = self._dir(dirs, up)
        if d is None:
            return
        st = d.lstat(name)
        if st is None or not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            return  # never a folder (or anything but a file or a link)
        b = self._backup()
        d.move_out(name, b)
        journal.append(("backup", d, name, b))

    @staticmethod
    def _rollback(journal: list) -> list[str]:
        failed = []
        for kind, d, name, b in reversed(journal):
            try:
                if kind == "new":
                    d.unlink(name)
                elif kind == "backup":
                    d.move_in(b, name)
                elif kind == "mkdir":
                    d.rmdir(name)
            except OSError:
                if kind == "backup":
                    failed.append(os.path.join(d.path, name))
        return failed

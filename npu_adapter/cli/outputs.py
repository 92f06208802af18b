"""Where the ``npu-adapter`` commands write: output files and directories.

Every output is checked before any work starts (its temporary sibling is created at once, so a
folder that cannot be written to is named with ``--out`` before the model is even loaded), is
written beside its final place and renamed into it only when complete (``os.replace``), and gets
the permissions the umask gives, as ``cp`` or ``tar`` would: temporary files and folders are
created with plain ``open``/``mkdir`` (modes 0666/0777 less the umask) instead of
``tempfile.mkstemp``/``mkdtemp``, whose private 0600/0700 modes would otherwise end up on the
user's report or model.
"""

import contextlib
import os
import secrets
import shutil

from npu_adapter.errors import NpuConfigError, UsageError

__all__ = ["OutputDirectory", "OutputFile", "check_not_input", "make_sibling_directory"]

_ATTEMPTS = 100


def _sibling_names(path, tag):
    folder, name = os.path.split(os.path.abspath(path).rstrip(os.sep))
    for _ in range(_ATTEMPTS):
        yield os.path.join(folder, f".{name}.{tag}-{secrets.token_hex(4)}")


def make_sibling_directory(path, tag="partial"):
    """A new, empty directory next to ``path`` (``.<name>.<tag>-<random>``), with the mode the
    umask gives; raises ``OSError`` when it cannot be created."""
    for candidate in _sibling_names(path, tag):
        try:
            os.mkdir(candidate)
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"no free temporary name next to {path}")


def _create_sibling_file(path):
    for candidate in _sibling_names(path, "tmp"):
        try:
            return candidate, open(candidate, "xb")  # closed by OutputFile
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name next to {path}")


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_not_input(out, model, flag="--out"):
    """Refuse an output path that is the input ``model`` itself, by any path (``./x/../m.pb``, a
    symbolic link), or an existing file of the input SavedModel directory: writing there would
    replace the model being read."""
    if not model or not out or not os.path.exists(out):
        return
    if _same_file(out, model):
        raise UsageError(f"{flag} {out} is the same file as the input model {model}: writing "
                         "there would replace the model; choose another output path")
    real_model = os.path.realpath(model)
    if os.path.isdir(model) and os.path.realpath(out).startswith(real_model + os.sep):
        raise UsageError(f"{flag} {out} is a file of the input SavedModel {model}: writing "
                         "there would replace part of the model; choose another output path")


class OutputFile:
    """One output file, written atomically.

    ``with OutputFile(path, suffixes) as out: ... out.write(data)``: the constructor checks that
    ``path`` ends in one of ``suffixes`` and creates the temporary file in its folder (so an
    unwritable folder is an error on ``flag`` before any work); when the block succeeds the file
    is renamed to ``path``, when it fails (or nothing was written) the temporary file is removed
    and ``path`` is left as it was.
    """

    def __init__(self, path, suffixes=None, flag="--out"):
        self.path = os.fspath(path)
        self.flag = flag
        if suffixes and not self.path.endswith(tuple(suffixes)):
            raise NpuConfigError(flag, self.path, "a file name ending in " + " or ".join(suffixes))
        allowed = "a file path in an existing, writable folder"
        folder = os.path.dirname(os.path.abspath(self.path))
        if os.path.isdir(self.path):
            raise NpuConfigError(flag, self.path, allowed, detail="it is a directory")
        if not os.path.isdir(folder):
            raise NpuConfigError(flag, self.path, allowed, detail=f"there is no folder {folder}")
        try:
            self._tmp, self._file = _create_sibling_file(self.path)
        except OSError as exc:
            raise NpuConfigError(flag, self.path, allowed,
                                 detail=exc.strerror or str(exc)) from None
        self.written = False

    def write(self, data):
        """Append ``data`` (bytes) to the file."""
        self._write(lambda f: f.write(data))

    def copy_from(self, source_path):
        """Append the content of the file at ``source_path``."""
        with open(source_path, "rb") as source:
            self._write(lambda f: shutil.copyfileobj(source, f))

    def _write(self, action):
        try:
            action(self._file)
        except OSError as exc:
            raise NpuConfigError(self.flag, self.path, "a file path in a writable folder",
                                 detail=exc.strerror or str(exc)) from None
        self.written = True

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        self._file.close()
        if kind is None and self.written:
            try:
                os.replace(self._tmp, self.path)
                return False
            except OSError as error:
                with contextlib.suppress(OSError):
                    os.unlink(self._tmp)
                raise NpuConfigError(self.flag, self.path, "a file path in a writable folder",
                                     detail=error.strerror or str(error)) from None
        with contextlib.suppress(OSError):
            os.unlink(self._tmp)
        return False


class OutputDirectory:
    """Build an output directory in a temporary sibling and put it in place on success.

    ``with OutputDirectory(out) as work:`` — everything is written under ``work``; when the block
    succeeds each top-level entry of ``work`` replaces the same-named entry of ``out`` (created
    when missing; other entries of ``out`` are left alone). When it fails, ``out`` is untouched
    and the partial tree is kept in ``<out>.failed/`` with ``ERROR.txt`` holding the error;
    :attr:`failed_dir` then names it. A block that fails before writing anything leaves nothing
    behind. Enter it before any work: entering creates the temporary sibling, which is the
    check that ``out`` can be written.
    """

    def __init__(self, out_dir, flag="--out"):
        self.flag = flag
        self.given = os.fspath(out_dir)
        self.out_dir = os.path.abspath(self.given)
        self.work = None
        self.failed_dir = None
        parent, name = os.path.split(self.out_dir.rstrip(os.sep))
        if not name:
            raise NpuConfigError(flag, self.given, "a directory other than the root")
        if os.path.exists(self.out_dir) and not os.path.isdir(self.out_dir):
            raise NpuConfigError(flag, self.given, "a directory",
                                 detail="a file of that name exists")
        self._parent, self._name = parent, name

    def __enter__(self):
        try:
            os.makedirs(self._parent, exist_ok=True)
            self.work = make_sibling_directory(self.out_dir)
        except OSError as exc:
            raise NpuConfigError(self.flag, self.given, "a directory that can be created",
                                 detail=exc.strerror or str(exc)) from None
        return self.work

    def __exit__(self, kind, exc, tb):
        if kind is None:
            self._commit()
            return False
        self.failed_dir = self.out_dir + ".failed"
        if not os.listdir(self.work):  # failed before writing anything: nothing to keep
            os.rmdir(self.work)
            self.failed_dir = None
            return False
        with contextlib.suppress(OSError):
            if os.path.isdir(self.failed_dir):
                shutil.rmtree(self.failed_dir)
            os.replace(self.work, self.failed_dir)
            with open(os.path.join(self.failed_dir, "ERROR.txt"), "w", encoding="utf-8") as f:
                f.write(f"{kind.__name__}: {exc}\n")
        if os.path.isdir(self.work):  # could not be kept: do not leave a stray partial tree
            shutil.rmtree(self.work, ignore_errors=True)
            self.failed_dir = None
        if isinstance(exc, Exception):
            exc.failed_dir = self.failed_dir
        return False

    def _commit(self):
        try:
            if not os.path.isdir(self.out_dir):
                os.replace(self.work, self.out_dir)
                return
            for entry in sorted(os.listdir(self.work)):
                target = os.path.join(self.out_dir, entry)
                if os.path.isdir(target) and not os.path.islink(target):
                    shutil.rmtree(target)
                elif os.path.lexists(target):
                    os.unlink(target)
                os.replace(os.path.join(self.work, entry), target)
            os.rmdir(self.work)
        except OSError as exc:
            shutil.rmtree(self.work, ignore_errors=True)
            raise NpuConfigError(self.flag, self.given, "a writable directory",
                                 detail=exc.strerror or str(exc)) from None

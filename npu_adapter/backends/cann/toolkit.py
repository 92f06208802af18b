"""Finding the CANN toolkit and setting up its environment, as its ``set_env.sh`` does.

Nothing here has side effects except :func:`import_acl`: detection only reads environment
variables and looks at files. The order:

1. the toolkit home: ``$ASCEND_TOOLKIT_HOME``, else ``$ASCEND_HOME_PATH``, else the first
   default install that exists (``/usr/local/Ascend/ascend-toolkit/latest``,
   ``$HOME/Ascend/ascend-toolkit/latest``, ``/usr/local/Ascend/cann``);
2. ``atc``: on ``PATH``, else ``<home>/bin/atc`` (CANN 8), ``<home>/compiler/bin/atc`` (6.x/7.x)
   or ``<home>/atc/bin/atc`` (5.x);
3. pyACL: the module ``acl`` on ``sys.path``, else under ``<home>/python/site-packages``;
4. the operator package: ``$ASCEND_OPP_PATH``, else ``<home>/opp``; a ``built-in`` directory
   inside means the new layout;
5. the SoC: the ``soc_config`` option, else ``$SOC_VERSION``.

:meth:`CannToolkit.environment` gives the environment ``atc`` runs with: the caller's, plus what
``set_env.sh`` exports when the user has not sourced it (``ASCEND_TOOLKIT_HOME``,
``ASCEND_HOME_PATH``, ``ASCEND_OPP_PATH``, ``ASCEND_AICPU_PATH``, ``TOOLCHAIN_HOME``, and the
``bin``/``lib64``/``site-packages`` entries of ``PATH``, ``LD_LIBRARY_PATH``, ``PYTHONPATH``).
"""

import dataclasses
import hashlib
import importlib
import importlib.util
import os
import shutil
import sys

from npu_adapter.backends.cann.errors import CannNotAvailableError

__all__ = ["CannToolkit", "DEFAULT_HOMES", "detect", "import_acl"]

DEFAULT_HOMES = (
    "/usr/local/Ascend/ascend-toolkit/latest",
    "~/Ascend/ascend-toolkit/latest",
    "/usr/local/Ascend/cann",
)
_ATC_IN_HOME = ("bin/atc", "compiler/bin/atc", "atc/bin/atc")
_DRIVER_LIBS = ("/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/lib64/common",
                "/usr/local/Ascend/driver/lib64/driver")
_VERSION_FILES = ("version.cfg", "version.info", "compiler/version.info", "runtime/version.info")
_SETUP_HINT = "source <toolkit>/set_env.sh (e.g. /usr/local/Ascend/ascend-toolkit/set_env.sh)"


@dataclasses.dataclass(frozen=True)
class CannToolkit:
    """What of CANN was found. Paths are None when absent; ``*_source`` says where each came
    from (an environment variable, ``PATH``, a default location)."""

    home: object = None
    home_source: object = None
    atc: object = None
    atc_source: object = None
    acl: object = None          # origin of the ``acl`` module (file path) when importable
    acl_source: object = None
    opp_path: object = None
    opp_source: object = None
    opp_layout: object = None   # "new" (built-in/ subdirectory), "old", or None
    soc: object = None
    soc_source: object = None
    environ: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def environment(self):
        """The environment for running ``atc``: the caller's, completed as ``set_env.sh``
        would complete it for :attr:`home` (existing values are kept, path lists extended)."""
        env = dict(self.environ)
        home = self.home
        if not home:
            return env
        for key, value in (("ASCEND_TOOLKIT_HOME", home), ("ASCEND_HOME_PATH", home),
                           ("ASCEND_OPP_PATH", os.path.join(home, "opp")),
                           ("ASCEND_AICPU_PATH", home),
                           ("TOOLCHAIN_HOME", os.path.join(home, "toolkit"))):
            env.setdefault(key, value)
        bins = [os.path.join(home, "bin")]
        if self.atc:
            bins.append(os.path.dirname(self.atc))
        _prepend(env, "PATH", bins)
        _prepend(env, "LD_LIBRARY_PATH", [os.path.join(home, "lib64"), *_DRIVER_LIBS])
        _prepend(env, "PYTHONPATH", [os.path.join(home, "python", "site-packages"),
                                     os.path.join(home, "opp", "built-in", "op_impl", "ai_core",
                                                  "tbe")])
        return env

    def atc_identity(self):
        """A text that changes when the ``atc`` in use changes (its real path, size and
        modification time, and the toolkit's version file): part of the compile-cache key."""
        if not self.atc:
            return ""
        real = os.path.realpath(self.atc)
        parts = [real]
        try:
            st = os.stat(real)
            parts += [str(st.st_size), str(st.st_mtime_ns)]
        except OSError:
            pass
        for name in _VERSION_FILES:
            path = os.path.join(self.home, name) if self.home else None
            if path and os.path.isfile(path):
                with open(path, "rb") as f:
                    parts.append(hashlib.sha256(f.read()).hexdigest())
                break
        return "|".join(parts)

    def require_atc(self):
        """The path of ``atc``; :class:`CannNotAvailableError` when there is none."""
        if not self.atc:
            where = f" or under {self.home}" if self.home else ""
            raise CannNotAvailableError(
                "atc", f"the CANN model compiler `atc` is not on PATH{where}; install the CANN "
                       f"toolkit and {_SETUP_HINT}, or set ASCEND_TOOLKIT_HOME")
        return self.atc


def _prepend(env, key, entries):
    current = [p for p in env.get(key, "").split(os.pathsep) if p]
    new = [e for e in entries if e not in current]
    if new:
        env[key] = os.pathsep.join(new + current)


def _home(env):
    for key in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"):
        value = env.get(key, "")
        if value:
            return value, key
    for candidate in DEFAULT_HOMES:
        path = os.path.expanduser(candidate)
        if os.path.isdir(path):
            return path, "default location"
    return None, None


def _acl_origin(home):
    module = sys.modules.get("acl")
    if module is not None:
        return getattr(module, "__file__", None) or "acl", "sys.path"
    spec = importlib.util.find_spec("acl")
    if spec is not None:
        return spec.origin or "acl", "sys.path"
    site = os.path.join(home, "python", "site-packages") if home else None
    if site and os.path.isdir(site):
        for name in sorted(os.listdir(site)):
            if name == "acl" or name.startswith("acl."):
                return os.path.join(site, name), "toolkit site-packages"
    return None, None


def detect(config=None, environ=None):
    """Look for CANN; returns a :class:`CannToolkit` (never raises).

    ``config`` is an ``NpuConfig`` (or any object with ``soc_config``); ``environ`` defaults to
    ``os.environ``.
    """
    env = dict(os.environ if environ is None else environ)
    home, home_source = _home(env)
    atc = shutil.which("atc", path=env.get("PATH", os.defpath))
    atc_source = "PATH" if atc else None
    if atc is None and home:
        for sub in _ATC_IN_HOME:
            candidate = os.path.join(home, sub)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                atc, atc_source = candidate, f"toolkit home ({home_source})"
                break
    acl, acl_source = _acl_origin(home)
    opp = env.get("ASCEND_OPP_PATH", "")
    opp_source = "ASCEND_OPP_PATH" if opp else None
    if not opp and home and os.path.isdir(os.path.join(home, "opp")):
        opp, opp_source = os.path.join(home, "opp"), "toolkit home"
    layout = None
    if opp and os.path.isdir(opp):
        layout = "new" if os.path.isdir(os.path.join(opp, "built-in")) else "old"
    soc = getattr(config, "soc_config", "") if config is not None else ""
    soc_source = "soc_config option" if soc else None
    if not soc and env.get("SOC_VERSION"):
        soc, soc_source = env["SOC_VERSION"], "SOC_VERSION"
    return CannToolkit(home=home, home_source=home_source, atc=atc, atc_source=atc_source,
                       acl=acl, acl_source=acl_source, opp_path=opp or None,
                       opp_source=opp_source, opp_layout=layout, soc=soc or None,
                       soc_source=soc_source, environ=env)


def import_acl(toolkit=None):
    """Import pyACL (``acl``), adding ``<home>/python/site-packages`` to ``sys.path`` when the
    module is only there (what ``set_env.sh`` puts on ``PYTHONPATH``).

    Raises:
        CannNotAvailableError: the module is missing or fails to load (its shared libraries
            need ``LD_LIBRARY_PATH`` from ``set_env.sh`` at process start).
    """
    try:
        return importlib.import_module("acl")
    except ImportError as first:
        error = first
    toolkit = toolkit or detect()
    site = os.path.join(toolkit.home, "python", "site-packages") if toolkit.home else None
    if site and os.path.isdir(site) and site not in sys.path:
        sys.path.append(site)
        try:
            return importlib.import_module("acl")
        except ImportError as second:
            error = second
    raise CannNotAvailableError(
        "acl", f"pyACL (`import acl`) cannot be imported ({error}); {_SETUP_HINT} before "
               "starting Python: its libraries are found through LD_LIBRARY_PATH, which must be "
               "set when the process starts") from error

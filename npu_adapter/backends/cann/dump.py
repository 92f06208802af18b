"""Data dump on CANN: the ``dump`` section of an ``acl.json`` from the session's dump options.

pyACL dumps the models loaded after ``acl.mdl.set_dump(<acl.json>)``. The section written here:

====================  ==========================================================
``dump_path``         the ``dump_path`` option (its real path)
``dump_list``         one entry per model, ``model_name`` = the ``.om`` file stem,
                      ``layer`` = the ``dump_layer`` option split on spaces (absent:
                      every layer)
``dump_mode``         ``dump_mode`` (``input`` / ``output`` / ``all``)
``dump_data``         ``dump_data`` (``tensor`` / ``stats``)
``dump_step``         ``dump_step`` (``0|5|10-20``), when set
====================  ==========================================================

CANN writes ``{dump_path}/{time}/{device}/{model_name}/{model_id}/{step}/`` with one file per
dumped op (``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}``).
"""

import dataclasses
import json

__all__ = ["DumpSettings", "dump_settings"]


@dataclasses.dataclass(frozen=True)
class DumpSettings:
    """The dump options of a session (hashable)."""

    path: str
    mode: str = "output"
    data: str = "tensor"
    step: str = ""
    layers: tuple = ()

    def acl_json(self, model_names):
        """The acl.json text dumping ``model_names`` (deterministic)."""
        entries = []
        for name in sorted(set(model_names)):
            entry = {"model_name": name}
            if self.layers:
                entry["layer"] = list(self.layers)
            entries.append(entry)
        dump = {"dump_path": self.path, "dump_list": entries, "dump_mode": self.mode,
                "dump_data": self.data}
        if self.step:
            dump["dump_step"] = self.step
        return json.dumps({"dump": dump}, sort_keys=True, indent=1)


def dump_settings(config):
    """:class:`DumpSettings` when ``enable_dump`` is on, else None."""
    if not getattr(config, "enable_dump", False):
        return None
    layers = tuple(name for name in (config.dump_layer or "").split() if name)
    return DumpSettings(path=config.dump_path, mode=config.dump_mode or "output",
                        data=config.dump_data or "tensor", step=config.dump_step or "",
                        layers=layers)

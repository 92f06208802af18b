"""A TF1 alias launcher: run a TF 1.15 script on TensorFlow 2 with ``tf`` = ``tf.compat.v1``.

As the launchers ModelZoo scripts are commonly run with: import TensorFlow, put a module that
wraps ``tf.compat.v1`` (no ``__spec__``) into ``sys.modules["tensorflow"]``, then run the script
as ``__main__``::

    python bench/scripts/tf1_launch.py SCRIPT [ARGS...]
"""

import runpy
import sys
import types

import tensorflow as _tf


def _alias_module():
    alias = types.ModuleType("tensorflow")
    alias.__dict__.update({k: v for k, v in vars(_tf.compat.v1).items()
                           if not k.startswith("__")})
    alias.__spec__ = None
    return alias


if __name__ == "__main__":
    sys.modules["tensorflow"] = _alias_module()
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")

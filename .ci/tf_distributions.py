"""CI check: exactly one installed distribution provides the `tensorflow` package, and it imports.

Usage: python .ci/tf_distributions.py [--expect NAME==VERSION ...]

Prints the distributions that install `tensorflow/__init__.py` (tensorflow, tensorflow-cpu,
tensorflow-aarch64, vendor builds, ...) with numpy's and protobuf's versions, and exits 1 unless
there is exactly one, TensorFlow imports, and every `--expect NAME==VERSION` is installed at
that version (to prove an install kept the user's TensorFlow, numpy and protobuf).
"""

import argparse
import importlib.metadata
import sys


def tensorflow_distributions():
    """Names and versions of the distributions whose files include tensorflow/__init__.py."""
    found = []
    for dist in importlib.metadata.distributions():
        files = dist.files or ()
        if any(str(path).replace("\\", "/") == "tensorflow/__init__.py" for path in files):
            found.append((dist.metadata["Name"], dist.version))
    return sorted(set(found))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--expect", action="append", default=[], metavar="NAME==VERSION")
    args = parser.parse_args()
    dists = tensorflow_distributions()
    print("TensorFlow distributions:", ", ".join(f"{n}=={v}" for n, v in dists) or "none")
    for name in ("numpy", "protobuf"):
        print(f"{name}=={importlib.metadata.version(name)}")
    problems = []
    if len(dists) != 1:
        problems.append(f"expected exactly one TensorFlow distribution, found {len(dists)}")
    for expected in args.expect:
        name, _, version = expected.partition("==")
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have != version:
            problems.append(f"{name}: expected {version}, installed {have}")
    try:
        import tensorflow as tf

        print("import tensorflow:", tf.__version__)
    except Exception as exc:  # the point of the check: any failure to import is reported
        problems.append(f"import tensorflow failed: {type(exc).__name__}: {exc}")
    for problem in problems:
        print("FAIL:", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

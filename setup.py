"""Install npu-adapter: the library, its passes, the npu_bridge drop-in and the CLI."""

import pathlib

from setuptools import setup

PACKAGES = [
    "npu_adapter",
    "npu_adapter.config",
    "npu_adapter.backends",
    "npu_adapter.backends.cann",
    "npu_adapter.backends.cpu",
    "npu_adapter.backends.xla",
    "npu_adapter.cli",
    "npu_adapter.graph",
    "npu_adapter.passes",
    "npu_adapter.pipeline",
    "npu_adapter.precision",
    "npu_adapter.report",
    "npu_adapter.session",
    "npu_adapter.testing",
    "npu_adapter.third_party",
    "npu_bridge",
    "npu_bridge._kernels",
    "npu_bridge.estimator",
    "npu_bridge.estimator.npu",
    "npu_bridge.hccl",
    "npu_bridge.hccl.manage",
    "npu_bridge.experimental",
    "npu_bridge.helper",
    "npu_bridge.image",
    "npu_bridge.npu_cpu",
    "npu_bridge.profiler",
    "npu_bridge.scoped_graph_manager",
    "npu_bridge.tbe",
]

setup(
    name="npu-adapter",
    version="0.1.0",
    description=(
        "Pure-Python reimplementation of the TF Adapter (npu_bridge) front end for "
        "TF1-style scripts on TensorFlow 2.x"
    ),
    long_description=pathlib.Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=PACKAGES,
    # `passes/` and `third_party/` live at the top of the repository (design card) but are
    # installed inside the library namespace, so `import passes` never clashes with anything.
    package_dir={
        "npu_adapter.passes": "passes",
        "npu_adapter.third_party": "third_party",
    },
    package_data={"npu_adapter.third_party": ["*.json", "*.md", "*.txt", "LICENSE*"]},
    install_requires=[
        "tensorflow>=2.15,<2.22",
        # Keras 2 for tf.compat.v1.layers / rnn cells / keras.applications in v1 graphs; each
        # release pins its own TF minor, so pip picks the pair matching the installed TF.
        "tf_keras>=2.15,<2.22",
        "numpy",
        "protobuf",
        "absl-py",
    ],
    extras_require={
        "test": ["pytest", "hypothesis", "ruff"],
    },
    entry_points={"console_scripts": ["npu-adapter=npu_adapter.cli:main"]},
)

"""Install npu-adapter: the library, its passes, the npu_bridge drop-in and the CLI."""

import pathlib

from setuptools import setup

TF_VERSIONS = ">=2.15,<2.22"
"""The TensorFlow releases npu-adapter supports (2.15 to 2.21), as a version specifier."""

PROJECT_URL = "https://github.com/npu-adapter/npu-adapter"
"""Where the project lives (home page, documentation, issues)."""

PACKAGES = [
    "npu_adapter",
    "npu_adapter.config",
    "npu_adapter.datadump",
    "npu_adapter.backends",
    "npu_adapter.backends.cann",
    "npu_adapter.backends.cpu",
    "npu_adapter.backends.xla",
    "npu_adapter.cli",
    "npu_adapter.distributed",
    "npu_adapter.graph",
    "npu_adapter.passes",
    "npu_adapter.pipeline",
    "npu_adapter.precision",
    "npu_adapter.profiling",
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
    # CANN's top-level `hccl` package (scripts import `hccl.manage.api` directly).
    "hccl",
    "hccl.manage",
    "hccl.split",
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
        "Pure-Python reimplementation of the TF Adapter (npu_bridge) front end: TF1-style "
        "Ascend scripts on TensorFlow 2.15-2.21"
    ),
    long_description=pathlib.Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    license="Apache-2.0",
    license_files=["LICENSE"],
    author="npu-adapter contributors",
    url=PROJECT_URL,
    project_urls={"Documentation": PROJECT_URL + "#readme", "Issues": PROJECT_URL + "/issues"},
    keywords=["tensorflow", "ascend", "npu", "tf-adapter", "npu_bridge", "graph rewrite"],
    classifiers=[
        "Development Status :: 4 - Beta",
        "Intended Audience :: Developers",
        "Intended Audience :: Science/Research",
        "License :: OSI Approved :: Apache Software License",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.9",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Topic :: Software Development :: Libraries :: Python Modules",
    ],
    packages=PACKAGES,
    # `passes/` and `third_party/` live at the top of the repository (design card) but are
    # installed inside the library namespace, so `import passes` never clashes with anything.
    package_dir={
        "npu_adapter.passes": "passes",
        "npu_adapter.third_party": "third_party",
    },
    package_data={"npu_adapter.third_party": ["*.json", "*.md", "*.txt", "LICENSE*"]},
    # No TensorFlow here: users of Ascend have tensorflow-cpu, tensorflow-aarch64 or a vendor
    # build, and requiring the distribution named `tensorflow` (or tf_keras, which requires it)
    # would install a second TensorFlow over theirs. A fresh environment asks for the `tf` extra
    # (the README's install command); numpy and protobuf come with any TensorFlow build and are
    # listed unpinned so pip never upgrades the ones it brought.
    install_requires=["numpy", "protobuf", "absl-py"],
    extras_require={
        # Keras 2 (tf_keras) for tf.compat.v1.layers on TF >= 2.16; each tf_keras release pins
        # its TF minor, so pip picks a matching pair.
        "tf": [f"tensorflow{TF_VERSIONS}", f"tf_keras{TF_VERSIONS}"],
        "test": ["pytest", "hypothesis", "ruff"],
    },
    entry_points={"console_scripts": ["npu-adapter=npu_adapter.cli:main"]},
)

"""The optional C accelerators of the Batch views (loghubd/models.py, loghubd/arrow.py) and of
LZ4 bodies (loghubd/protocol/compress.py); all else about the package is in pyproject.toml.

They are declared here rather than as `[tool.setuptools] ext-modules` in pyproject.toml, which
setuptools still calls experimental and warns about (a BuildBackendWarning block) on every
build. `optional=True`: without a C compiler the build says so and goes on, and loghubd runs on
the pure Python paths."""

from setuptools import Extension, setup

WIRE = ["loghubd/_wire.h"]

setup(
    ext_modules=[
        Extension("loghubd._fastlog", ["loghubd/_fastlog.c"], depends=WIRE, optional=True),
        Extension("loghubd._fastjsonl", ["loghubd/_fastjsonl.c"], depends=WIRE, optional=True),
        Extension("loghubd._fastarrow", ["loghubd/_fastarrow.c"], depends=WIRE, optional=True),
        Extension("loghubd._fastlz4", ["loghubd/_fastlz4.c"], optional=True),
    ]
)

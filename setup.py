"""Packages of the chunkyard distribution (everything else is in pyproject.toml).

configs/ stays at the repository root (the repository's own project reads it there) and is
installed as `retrieval.bundled`, so an installed chunkyard finds its bundled configs with
importlib.resources wherever it runs.
"""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(
            include=["chunking*", "retrieval*", "evaluation*", "pipeline*", "assets*", "orchestration*"]
        ),
        "retrieval.bundled",
    ],
    package_dir={"retrieval.bundled": "configs"},
)

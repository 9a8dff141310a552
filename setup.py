"""Packages of the chunkyard distribution (everything else is in pyproject.toml).

One top-level package, `chunkyard`, is installed. Its subpackages keep their folders at the
repository root (`chunking/`, `retrieval/`, ...; `chunkyard/` itself holds only the Python API),
and configs/ is installed as `chunkyard.bundled`, so an installed chunkyard finds its bundled
configs with importlib.resources wherever it runs.
"""

from setuptools import find_packages, setup

FOLDERS = ("chunking", "retrieval", "evaluation", "pipeline", "assets", "orchestration")

packages = ["chunkyard", "chunkyard.bundled"]
package_dir = {"chunkyard": "chunkyard", "chunkyard.bundled": "configs"}
for folder in FOLDERS:
    for package in find_packages(include=[folder, f"{folder}.*"]):
        packages.append(f"chunkyard.{package}")
        package_dir[f"chunkyard.{package}"] = package.replace(".", "/")

setup(packages=packages, package_dir=package_dir)

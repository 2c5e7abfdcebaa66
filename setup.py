"""Package discovery for the `backends/` -> `allsmi.backends` mapping (pyproject.toml holds
everything else). setuptools' own `packages.find` cannot combine that mapping with
discovery, so the list is found here: every folder with an `__init__.py`."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent


def _packages(folder: str, name: str) -> list[str]:
    return [name] + [f"{name}.{sub}" for sub in find_packages(str(HERE / folder))]


setup(packages=_packages("allsmi", "allsmi") + _packages("backends", "allsmi.backends"))

"""Local PEP 503 indexes of fixture wheels for a release: the Neuron index, the PyTorch CPU index and a PyPI with
the traps a lock must never fall into (the placeholder torch-neuronx 1.0 and a CUDA torch needing nvidia packages).
neuronx-cc and nki carry AWS's local version labels and torch the real Requires-Dist (tests/testbed/traits.toml).
"""

from __future__ import annotations

from pathlib import Path

from neuron_torch.matrix import Matrix
from tests.testbed import traits
from tests.testbed.pep503 import write_index
from tests.testbed.traits import labelled
from tests.testbed.wheels import FixtureWheel, build_wheel

# The native wheels' build number is not published; the fixtures use this one.
FIXTURE_BUILD = "1871"
# torch's real Requires-Dist (traits.toml) as fixtures, with the dependencies of their own that matter here.
PYPI_DEPENDENCIES = (
    FixtureWheel("filelock", "3.16.1"),
    FixtureWheel("typing-extensions", "4.12.2"),
    FixtureWheel("setuptools", "80.9.0"),
    FixtureWheel("sympy", "1.14.0", ("mpmath<1.4,>=1.1.0",)),
    FixtureWheel("mpmath", "1.3.0"),
    FixtureWheel("networkx", "3.5"),
    FixtureWheel("jinja2", "3.1.6", ("MarkupSafe>=2.0",)),
    FixtureWheel("markupsafe", "3.0.3"),
    FixtureWheel("fsspec", "2025.9.0"),
    FixtureWheel("numpy", "2.1.3"),
    FixtureWheel("nvidia-cublas-cu12", "12.4.5.8"),
    FixtureWheel("torch-neuronx", "1.0"),
)


def neuronx_version(pattern: str) -> str:
    return pattern.replace("*", FIXTURE_BUILD)


def build_release_indexes(matrix: Matrix, root: Path) -> dict[str, str]:
    """Write the three indexes under root; return {index name: file:// URL} for `neuron-torch lock --index`."""
    wheels = root / "wheels"
    neuron = [
        build_wheel(FixtureWheel("neuronx-cc", labelled(name, version), ("numpy>=1.24",)), wheels / "neuron")
        for name, version in matrix.packages.items()
        if name == "neuronx-cc"
    ]
    neuron += [build_wheel(FixtureWheel("nki", labelled("nki", matrix.packages["nki"])), wheels / "neuron")]
    cpu = []
    pypi = [build_wheel(wheel, wheels / "pypi") for wheel in PYPI_DEPENDENCIES]
    for family in matrix.families.values():
        requires = (
            f"torch=={family.torch}",
            f"neuronx-cc=={matrix.packages['neuronx-cc']}",
            f"nki=={matrix.packages['nki']}",
        )
        neuron.append(
            build_wheel(
                FixtureWheel("torch-neuronx", neuronx_version(family.torch_neuronx), requires), wheels / "neuron"
            )
        )
        cpu.append(build_wheel(FixtureWheel("torch", family.torch_pin, traits.requires("torch")), wheels / "cpu"))
        # PyPI's torch is the CUDA build: same version, no local tag, and it drags in nvidia packages.
        pypi.append(build_wheel(FixtureWheel("torch", family.torch, ("nvidia-cublas-cu12",)), wheels / "pypi"))
    urls = {}
    for name, dists in (("neuron", neuron), ("pytorch-cpu", cpu), ("pypi", pypi)):
        urls[name] = write_index(dists, root / "simple" / name).resolve().as_uri()
    return urls

"""neuron_cell.instances.judge: a listed type, an unlisted size of a supported family, and each refusal's reason."""

from __future__ import annotations

import pytest

from neuron_cell.instances import InstanceTable, Judged, UnsupportedInstance, judge

TABLE = InstanceTable(
    release="neuron-9.9",
    known={"trn2.48xlarge": "trn2", "trn3.48xlarge": "trn3"},
    families=["trn2", "trn3"],
    unsupported={"trn1": "Trn1 is not listed in 9.9"},
)


def test_a_listed_type_is_its_family_and_listed() -> None:
    assert judge(TABLE, "trn2.48xlarge") == Judged("trn2", listed=True)


@pytest.mark.parametrize("size", ["3xlarge", "xlarge", "large", "metal", "metal-48xl"])
def test_an_unlisted_size_of_a_supported_family_is_not_listed(size: str) -> None:
    assert judge(TABLE, f"trn3.{size}") == Judged("trn3", listed=False)


@pytest.mark.parametrize(
    ("instance", "message"),
    [
        ("trn1.32xlarge", "instance type trn1.32xlarge is not supported: Trn1 is not listed in 9.9. Supported: "
                          "trn2.48xlarge, trn3.48xlarge"),
        ("trn2.48xlage", "instance type 'trn2.48xlage': '48xlage' is not an EC2 instance size"),
        ("trn2", "instance type 'trn2': '' is not an EC2 instance size"),
        ("p5.48xlarge", "instance type 'p5.48xlarge' is not supported; supported families: trn2, trn3 (known types: "
                        "trn2.48xlarge, trn3.48xlarge)"),
        ("x" * 300, "... (300 characters)"),
        ("TRN2.48XLARGE", "instance type 'TRN2.48XLARGE': EC2 instance types are lower case, without spaces: "
                          "give 'trn2.48xlarge'"),
        (" trn1.32xlarge ", "EC2 instance types are lower case, without spaces: give 'trn1.32xlarge'"),
    ],
)  # fmt: skip
def test_a_refused_type_names_the_reason(instance: str, message: str) -> None:
    with pytest.raises(UnsupportedInstance) as raised:
        judge(TABLE, instance)
    assert message in str(raised.value)

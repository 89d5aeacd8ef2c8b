"""neuron_torch.urls.check_url: a URL the user gives is checked when read, and a bad one is named with an example."""

from __future__ import annotations

import pytest

from neuron_torch.errors import NeuronTorchError
from neuron_torch.urls import PROXY_SCHEMES, check_url


@pytest.mark.parametrize("url", ["https://mirror.example/simple", "http://10.0.0.1:8080/x/", "file:///srv/wheels"])
def test_an_index_url_is_returned_as_given(url: str) -> None:
    assert check_url(url, "--index neuron") == url


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("not-a-url", "is not a URL of http:, https:, file:"),
        ("ftp://mirror.example/simple", "is not a URL of"),
        ("https:///no-host", "is not a URL of"),
        ("https://mirror.example:port/", "is not a URL (Port could not be cast"),
        ("https://mirror.example/a b", "is not a URL of"),
    ],
)
def test_a_bad_url_is_refused_naming_it_and_where(url: str, why: str) -> None:
    with pytest.raises(NeuronTorchError) as refused:
        check_url(url, "--index neuron")
    message = str(refused.value)
    assert message.startswith("--index neuron: ") and repr(url) in message and why in message


def test_a_proxy_takes_http_schemes_only_and_says_so() -> None:
    assert check_url("http://proxy.example:3128", "[proxy] https", PROXY_SCHEMES) == "http://proxy.example:3128"
    with pytest.raises(NeuronTorchError, match=r"not a URL of http:, https: \(e\.g\. http://proxy\.example:3128\)"):
        check_url("file:///proxy", "[proxy] https", PROXY_SCHEMES)

"""The THREADLINE_KAFKA_* security settings become the same aiokafka arguments for every client."""

from __future__ import annotations

import ssl

import pytest

from threadline.config import Settings
from threadline.errors import ConfigurationError
from threadline.kafka.security import broker_security, client_kwargs


def test_plaintext_adds_nothing() -> None:
    assert client_kwargs(Settings()) == {}
    assert broker_security(Settings()) is None


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_ssl(mechanism: str) -> None:
    kw = client_kwargs(Settings(kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism=mechanism,
                                kafka_sasl_username="u", kafka_sasl_password="p"))
    assert kw["security_protocol"] == "SASL_SSL" and kw["sasl_mechanism"] == mechanism
    assert kw["sasl_plain_username"] == "u" and kw["sasl_plain_password"] == "p"
    assert isinstance(kw["ssl_context"], ssl.SSLContext) and kw["ssl_context"].check_hostname


def test_sasl_plaintext_and_tls_only() -> None:
    kw = client_kwargs(Settings(kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_username="u",
                                kafka_sasl_password="p"))
    assert kw["security_protocol"] == "SASL_PLAINTEXT" and kw["ssl_context"] is None
    tls = client_kwargs(Settings(kafka_security_protocol="SSL", kafka_ssl_check_hostname=False))
    assert tls["security_protocol"] == "SSL" and tls["ssl_context"].check_hostname is False


@pytest.mark.parametrize("settings", [
    {"kafka_security_protocol": "TLS"},
    {"kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": "GSSAPI", "kafka_sasl_username": "u",
     "kafka_sasl_password": "p"},
    {"kafka_security_protocol": "SASL_SSL", "kafka_sasl_username": "u"},
])
def test_bad_settings_are_a_clear_error(settings: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError, match="THREADLINE_KAFKA_"):
        client_kwargs(Settings(**settings))


def test_the_password_never_shows_in_the_settings_repr() -> None:
    assert "s3cret" not in repr(Settings(kafka_sasl_password="s3cret"))

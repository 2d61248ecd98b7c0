"""How every Kafka client of Threadline connects: plaintext, TLS, or SASL (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512) over plaintext or TLS, from the ``THREADLINE_KAFKA_*`` settings.

The settings become one FastStream security object (:func:`broker_security`), and FastStream's
own mapping turns it into the keyword arguments every aiokafka producer, consumer and admin
client takes (:func:`client_kwargs`), so the services, the client and the CLI connect the same
way.
"""

from __future__ import annotations

import ssl
from functools import lru_cache
from typing import TYPE_CHECKING

from threadline.config import Settings
from threadline.errors import ConfigurationError

if TYPE_CHECKING:
    from faststream.security import BaseSecurity

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@lru_cache(maxsize=8)  # one context per file set: every client of the process shares it
def _ssl_context(cafile: str | None, certfile: str | None, keyfile: str | None,
                 check_hostname: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=cafile)
    if certfile:
        context.load_cert_chain(certfile, keyfile)
    context.check_hostname = check_hostname
    return context


def broker_security(settings: Settings) -> BaseSecurity | None:
    """The FastStream security object of ``settings`` (``None`` for plaintext).

    Raises:
        ConfigurationError: an unknown protocol or mechanism, or SASL without a username and
            password.
    """
    protocol = settings.kafka_security_protocol.upper()
    if protocol not in PROTOCOLS:
        raise ConfigurationError(f"THREADLINE_KAFKA_SECURITY_PROTOCOL must be one of {', '.join(PROTOCOLS)}, "
                                 f"not {settings.kafka_security_protocol!r}")
    if protocol == "PLAINTEXT":
        return None
    # imported here: FastStream takes ~0.5 s to import, which every plaintext client and CLI
    # command would pay at start-up
    from faststream.security import BaseSecurity, SASLPlaintext, SASLScram256, SASLScram512

    tls = protocol.endswith("SSL")
    context = _ssl_context(settings.kafka_ssl_cafile, settings.kafka_ssl_certfile, settings.kafka_ssl_keyfile,
                              settings.kafka_ssl_check_hostname) if tls else None
    if protocol == "SSL":
        return BaseSecurity(ssl_context=context, use_ssl=True)
    mechanism = settings.kafka_sasl_mechanism.upper()
    kinds = {"PLAIN": SASLPlaintext, "SCRAM-SHA-256": SASLScram256, "SCRAM-SHA-512": SASLScram512}
    if mechanism not in kinds:
        raise ConfigurationError(f"THREADLINE_KAFKA_SASL_MECHANISM must be one of {', '.join(MECHANISMS)}, "
                                 f"not {settings.kafka_sasl_mechanism!r}")
    if not settings.kafka_sasl_username or settings.kafka_sasl_password is None:
        raise ConfigurationError("SASL needs THREADLINE_KAFKA_SASL_USERNAME and THREADLINE_KAFKA_SASL_PASSWORD")
    return kinds[mechanism](settings.kafka_sasl_username, settings.kafka_sasl_password.get_secret_value(),
                            ssl_context=context, use_ssl=tls)


def client_kwargs(settings: Settings) -> dict[str, object]:
    """Keyword arguments for ``AIOKafkaProducer`` / ``AIOKafkaConsumer`` / ``AIOKafkaAdminClient``
    (``{}`` for plaintext). Raises :class:`ConfigurationError` as :func:`broker_security`."""
    security = broker_security(settings)
    if security is None:
        return {}
    from faststream.kafka.security import parse_security  # see broker_security

    return parse_security(security)

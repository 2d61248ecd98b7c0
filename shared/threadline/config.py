"""Settings shared by every service, read once from the environment (prefix ``THREADLINE_``).

Every field has a default that matches the local cluster started by ``make up``; a deployment
overrides them with environment variables, e.g. ``THREADLINE_KAFKA_BOOTSTRAP=broker:9092``.
"""

from __future__ import annotations

import functools
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_TOOL_TIMEOUT_S = 300.0
"""``THREADLINE_TOOL_TIMEOUT_S`` when unset: a tool call's deadline (decision 218)."""
DEFAULT_SUB_AGENT_MAX_DEPTH = 5
"""``THREADLINE_SUB_AGENT_MAX_DEPTH`` when unset: how deep a sub-agent tree may grow (decision 219)."""


class Settings(BaseSettings):
    """Threadline configuration. Units are in the field names (``_s`` seconds, ``_ms`` ms)."""

    model_config = SettingsConfigDict(env_prefix="THREADLINE_", extra="ignore")

    kafka_bootstrap: str = "127.0.0.1:19092"
    """Kafka bootstrap servers, comma separated."""
    pg_dsn: str = "postgresql://threadline:threadline@127.0.0.1:15432/threadline"
    """PostgreSQL connection string (libpq URI)."""
    pg_statement_cache: bool = True
    """asyncpg's prepared-statement cache (named statements that live on one server connection)."""
    pg_transaction_pooling: bool = False
    """``pg_dsn`` points at a transaction-pooling PgBouncer (case C24): the statement cache is
    off whatever ``pg_statement_cache`` says (asyncpg then uses unnamed statements only), and
    LISTEN and migrations use ``pg_direct_dsn``."""
    pg_direct_dsn: str | None = None
    """A direct (session) connection to PostgreSQL for LISTEN and migrations, which a
    transaction pooler cannot carry; default: ``pg_dsn``."""
    pg_listen_health_s: float = 2.0
    """How often a LISTEN connection is checked; a lost one is reconnected, re-LISTENed and
    caught up by the next check at the latest (case C26)."""
    pg_pool_max: int = 10
    """Connections per service instance (the worker's: ``worker_pg_pool_max``)."""
    worker_pg_pool_max: int = Field(default=30, ge=4)
    """Connections of a processor-worker's pool; its step operations (claim, save) hold at most 3
    fewer at once and queue for them (docs/reliability.md, guarantee 7). 30 against 10 cut a
    500-run burst's claim wait p90 from 4.6-6.8 s to 0.9-2.4 s (docs/decisions.md, decision 92)."""
    pg_pool_timeout_s: float = 10.0
    """Longest wait for a pooled connection before the event is retried."""
    kafka_linger_ms: int = 0
    """How long (ms) the services' producer waits to fill a batch before sending (aiokafka
    ``linger_ms``). 0: each record leaves at once; records sent while a request is in flight are
    batched anyway, so a streaming step still sends batches (bench/results/HISTORY.md, "The step
    path": 0 against 2 ms gave time to first chunk p50 66.5 against 94.4 ms and the same chunk
    throughput)."""
    kafka_security_protocol: str = "PLAINTEXT"
    """How Kafka is reached: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL`` (every
    producer, consumer and admin client of the services, the client and the CLI)."""
    kafka_sasl_mechanism: str = "PLAIN"
    """``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512`` (``SASL_*`` protocols)."""
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    """Never logged (a secret)."""
    kafka_ssl_cafile: str | None = None
    """PEM file of the certificate authorities to trust (default: the system's)."""
    kafka_ssl_certfile: str | None = None
    """PEM client certificate, for brokers that require one (mutual TLS)."""
    kafka_ssl_keyfile: str | None = None
    """PEM key of ``kafka_ssl_certfile``."""
    kafka_ssl_check_hostname: bool = True
    """Check that the broker's certificate names the host connected to."""
    kafka_fetch_max_wait_ms: int = 50
    """How long (ms) the broker may hold a consumer's fetch when no record is there yet
    (aiokafka ``fetch_max_wait_ms``); a record that arrives ends the wait at once."""
    max_record_bytes: int = 512 * 1024
    """Largest JSON body put on a Kafka record; a larger payload (a big message, tool result or
    chunk) is stored in PostgreSQL (``payloads``) and the record carries a reference to it."""
    topic_prefix: str = "threadline"
    """Prefix of every topic and consumer group, so several clusters can share one broker."""
    partitions: int = 12
    """Partitions of the internal and ingress topics (created on first start). Also the most
    replicas of a service that get work: the KEDA ScaledObjects in deploy/k8s use it as
    ``maxReplicaCount`` (docs/operations.md)."""
    replication_factor: int = Field(default=1, ge=1)
    """Replication factor of every topic the services and the client create (the internal and
    ingress topics, the per-thread chunk topics); at most the number of brokers. 1 suits one
    local broker; a production cluster wants 3 (deploy/k8s/configmap.yaml). Topics that exist
    already keep theirs."""
    chunk_retention_ms: int = 7 * 24 * 3600 * 1000
    """Retention of the chunk topics (per-thread, or the shared one)."""
    chunk_layout: Literal["per-thread", "shared"] = "per-thread"
    """``THREADLINE_CHUNK_LAYOUT``: where a thread's chunks go. ``per-thread`` (the default): a
    topic of one partition per thread (``Topics.chunks``), made on first use. ``shared``: the
    partition of one shared topic (``<prefix>.chunks-shared``, made at start with
    ``chunk_partitions`` partitions) that Kafka's default partitioner picks for the thread key;
    readers keep only the thread's records (docs/decisions.md#shared-chunk-layout). Set it alike
    in every service, gateway and client of a cluster."""
    chunk_partitions: int = Field(default=16, ge=1)
    """``THREADLINE_CHUNK_PARTITIONS``: partitions of the shared chunk topic (``chunk_layout``
    ``shared``). A process refuses to start when the topic exists with another count: a thread's
    partition is a hash of its key modulo the count, so every writer and reader must agree."""
    chunk_topic_idle_s: float = 7 * 24 * 3600.0
    """``THREADLINE_CHUNK_TOPIC_IDLE_S``: the notification-scheduler deletes the chunk topic of a
    thread with no run and no producer for this long (default 7 days = the default chunk
    retention, so nothing still retained is lost; ``0`` keeps every topic and turns the registry
    off: set it alike in every service). Its history stays in
    PostgreSQL; the next run or subscriber creates the topic again (docs/decisions.md 40-42)."""
    chunk_topic_sweep_s: float = 60.0
    """How often the notification-scheduler looks for idle chunk topics."""
    chunk_topic_trust_s: float | None = None
    """Seconds a process trusts a chunk topic it took through the registry before taking its row
    again (default: a quarter of ``chunk_topic_idle_s``, at most 5 minutes). Every process must
    trust for less than the sweeping scheduler's idle time."""
    agents_module: str = "threadline.examples.support"
    """Python module that defines the agents (``Agent`` instances at module level or ``agents``)."""
    model: str = "openai/threadline-fake"
    """Default model (litellm ``provider/model`` string) for agents that name none."""
    model_api_base: str | None = "http://127.0.0.1:18080/v1"
    """Base URL of the local model server; used only for ``*/threadline-*`` model names."""
    model_timeout_s: float = 120.0
    """Per-read timeout of a model call."""
    tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    """How long one tool call (or one workflow step) may run before it ends as a
    ``ToolTimeoutError`` tool error, for a tool that sets no ``timeout_s`` of its own (decision 218)."""
    litellm_noop_callback: bool = False
    """Tests only: the processor-worker registers a no-op litellm callback, so every model stream
    is read through litellm's ``CustomStreamWrapper`` instead of directly (the parity of the two
    paths, docs/decisions.md §20). Never needed in a deployment."""
    model_max_retries: int = 2
    """Retries of one model on a transient error when neither the agent, the call nor the
    fallback entry sets ``max_retries`` (docs/models.md)."""
    model_retry_initial_s: float = 2.0
    """Backoff before the first model retry; doubles per retry, with jitter (x0.5–1.0)."""
    model_retry_max_wait_s: float = 60.0
    """Longest wait before a model retry, a provider's ``Retry-After`` included."""
    model_limits: dict[str, dict[str, float]] = {}
    """Cluster-wide provider limits per model string, as JSON:
    ``{"openai/gpt-5": {"rpm": 500, "tpm": 200000}}`` (docs/models.md)."""
    model_limit_burst_s: float = 1.0
    """A limit's bucket holds this many seconds of its rate (0: calls evenly spaced)."""
    ingress_topic: str | None = None
    """Test hook: an ingress instance consuming another topic (and its own group), to race two
    instances on one thread in spite of partition affinity (case C16)."""
    digest_window_s: float = 0.0
    """How long low and medium notifications wait to be batched into a digest."""
    scheduler_interval_s: float = 1.0
    """How often the notification-scheduler looks for due inbox records."""
    scorer_claim_s: float = 60.0
    """How long a notification-scheduler instance holds a scorer job it runs; a job whose claim
    expired unstored (the instance died) is run again by any instance (decision 71)."""
    scheduler_test_clock: bool = False
    """Tests only: the notification-scheduler's "now" gets the offset stored in the table
    ``inbox_test_clock`` (see ``threadline.store.clock``). Never set in a deployment."""
    instance_id: str = "local"
    """Name of this service instance (logs, lease holder names)."""
    lease_ttl_s: float = 30.0
    """Expiry of a thread lease that its run stops renewing."""
    max_in_flight: int = 2000
    """Records a consumer holds in flight before it pauses fetching."""
    commit_interval_s: float = 0.2
    """How often a consumer commits the offsets of finished records."""
    kafka_max_poll_interval_ms: int = 300000
    """The consumers' ``max_poll_interval_ms`` (the poll loop never waits on a handler, so a
    slow step does not count against it)."""
    worker_continues: bool = True
    """A processor-worker whose step ends with ``continue`` (tool results in, or a signal waiting)
    claims the run's next step itself, in the statement that stores the step, and runs it, when
    the orchestrator would schedule it anyway, and announces the stored step itself where the
    orchestrator would only announce it; the orchestrator stays the owner of recovery
    (docs/decisions.md, 31-33, 103, 106). Off: every step crosses the orchestrator (a switch to
    route every run's moves through the orchestrator, and the reference the tests compare a
    continued run against)."""
    ingress_starts: bool = True
    """Ingress, in the transaction that wakes a thread and creates its run, schedules the run's
    step 0 itself by the orchestrator's own rule (``on_start_run``) and publishes its step task
    straight to step-tasks; the orchestrator is told with a ``StartRun`` marked ``scheduled`` and
    only announces the start (it stays the owner of the run and its recovery; docs/decisions.md,
    34-36). Off: every run start crosses the orchestrator."""
    model_direct: bool = True
    """A model call litellm would send with the openai client (its ``openai`` provider, the
    arguments the project maps, no litellm callback) is built by litellm and sent by
    ``threadline.runtime.model.llm_direct`` over litellm's own HTTP client, without litellm's per-call
    set-up (docs/decisions.md, 87). Off: every call is ``litellm.acompletion``."""
    step_heartbeat_s: float = 2.0
    """How often a worker executing a step says it is alive; another worker takes the step over
    only after the heartbeat stood still for three intervals."""
    transient_retry_s: float = 600.0
    """How long a record whose handling meets a transient fault (Kafka or Postgres unreachable)
    is retried before it is dead-lettered; meanwhile its offset is not committed."""
    sweep_interval_s: float = 5.0
    """How often each run-orchestrator looks for stuck runs (``threadline.flows.sweeper``)."""
    stuck_after_s: float = 90.0
    """How long a run that holds its thread may show no progress (no heartbeat of its step, no
    change of its row, nothing of it in the outbox) before the sweeper drives it on."""
    sweep_max_recoveries: int = 3
    """Recoveries of one step of a run after which a run still stuck is failed instead."""
    sub_agent_max_depth: int = Field(default=DEFAULT_SUB_AGENT_MAX_DEPTH, ge=0)
    """How deep a tree of sub-agent runs may grow: a run this many levels below its root (0: the
    root itself) gets the tool error ``sub-agent depth limit <n> reached`` for a sub-agent call,
    and no child run is created (decision 219)."""
    sub_agent_timeout_s: float = 3600.0
    """How long a sub-agent call may wait for its child run: past it (checked at each sweep) the
    call ends as a ``ToolTimeoutError`` tool error, the child run is aborted and the parent goes
    on (decision 218)."""
    kafka_ack_timeout_s: float = 30.0
    """The longest a service waits for Kafka to take what it publishes from the outbox (topic
    metadata and acknowledgements), in seconds. What is not acknowledged by then stays in the
    outbox for the relay, so no Kafka stall can hold a step, a handler or a background pass."""
    reply_timeout_s: float = 30.0
    """How long the client waits for a reply from ingress."""
    metrics_port: int | None = None
    """Port of the service's ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz`` endpoints
    (``None``: not served; the Kubernetes manifests and compose set 9464; docs/operations.md)."""
    gateway_host: str = "0.0.0.0"
    gateway_port: int = 18000
    """Port of the HTTP gateway (``services/gateway``: the API, its SSE streams, ``/openapi.json``,
    ``/studio``, ``/healthz``, ``/readyz``; docs/gateway.md)."""
    gateway_cors_origins: list[str] = []
    """Origins whose browser pages may call the gateway (CORS), e.g. ``["https://app.example"]``
    (``["*"]``: any; empty: none but the gateway's own). JSON in the environment."""
    gateway_api_keys: SecretStr | None = None
    """JSON map API key → the resource ids it may act for (``["*"]``: every resource), e.g.
    ``{"k-1": ["user-1", "user-2"]}``. Never logged (a secret)."""
    gateway_jwt_secret: SecretStr | None = None
    """Key that verifies bearer JWTs (the HMAC secret, or a PEM public key for RS*/ES*); the
    token's ``gateway_jwt_resources_claim`` lists the resources it may act for. Never logged."""
    gateway_jwt_algorithms: list[str] = ["HS256"]
    gateway_chat_send_reasoning: bool = False
    """The AI SDK chat route (``/chat/{agent_id}``) streams reasoning parts, as ``chatRoute``'s
    ``sendReasoning`` does (off, as there: reasoning can hold what a page should not show)."""
    gateway_jwt_jwks_url: str | None = None
    """An OIDC issuer's JSON Web Key Set URL (e.g. ``https://issuer/.well-known/jwks.json``): a
    token's ``kid`` picks the key that verifies it; the set is cached (refetched after 300 s, or
    for an unknown ``kid`` at most every 30 s). Its keys verify the RS*/ES*/PS* algorithms of
    ``gateway_jwt_algorithms`` (``RS256``, ``ES256`` when it names none), never HS*."""
    gateway_jwt_audience: str | None = None
    """``aud`` a token must carry (not checked when unset)."""
    gateway_jwt_resources_claim: str = "resources"
    gateway_max_streams: int = Field(default=10_000, ge=1)
    """Streams one gateway serves at once (SSE streams, streaming and waiting ``generate``
    answers, Mastra's ``/api`` streams); one more is refused with 503 and ``Retry-After``."""
    fanout_consumers: int = Field(default=2, ge=1)
    """Kafka consumers of a process's fan-out reader (the gateway's; the client's with
    ``client_shared_reader``): its streams are spread over them, however many there are."""
    fanout_queue_records: int = Field(default=1000, ge=2)
    """Records a stream of the fan-out reader holds unread before it is detached (read again
    from its own position once its reader drained half of them; docs/capacity.md)."""
    client_shared_reader: bool = False
    """The Python client reads all its subscriptions through one fan-out reader (a constant
    number of Kafka consumers) instead of a consumer per subscription."""
    gateway_open: bool = False
    """Local development only: no credentials asked, every resource allowed (``make up`` sets it
    when no API key is configured); ignored when API keys or a JWT secret are set. Never in a
    deployment."""
    gc_young_threshold: int = Field(default=10_000, ge=0)
    """Container allocations between two collections of Python's young generation in a service
    process (``gc.set_threshold``'s first value; Python's own is 700); 0 keeps Python's. With 700
    a worker streaming 500 runs promoted so much short-lived data that full collections of
    ~300 ms each took 45 % of its CPU (docs/decisions.md, decision 91)."""
    log_level: str = Field(default="INFO")
    log_json: bool = False
    """Render logs as JSON lines (default: console key=value)."""

    @property
    def pg_session_dsn(self) -> str:
        """The DSN for session-level features (LISTEN, migrations)."""
        return self.pg_direct_dsn or self.pg_dsn

    @property
    def pg_use_statement_cache(self) -> bool:
        """Whether asyncpg may cache (name) prepared statements on this DSN."""
        return self.pg_statement_cache and not self.pg_transaction_pooling


@functools.cache
def get_settings() -> Settings:
    """Return the process-wide settings (read from the environment on first call)."""
    return Settings()

# One image for every Threadline service; compose.yaml and deploy/k8s pick the command.
#   docker build -t threadline:local .
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    UV_NO_CACHE=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_PROJECT_ENVIRONMENT=/app/.venv \
    LITELLM_LOCAL_MODEL_COST_MAP=True

RUN pip install --no-cache-dir uv==0.13.8 \
 && useradd --system --uid 10001 --home-dir /app --no-create-home threadline \
 && mkdir /app && chown threadline /app

# Everything below runs as an unprivileged user, who also owns the venv.
USER threadline
WORKDIR /app

# Dependencies first (cached while only the code changes), then the project itself.
COPY --chown=threadline pyproject.toml uv.lock README.md ./
RUN uv sync --frozen --no-dev --no-install-project
COPY --chown=threadline shared ./shared
COPY --chown=threadline services ./services
RUN uv sync --frozen --no-dev

ENV PATH=/app/.venv/bin:$PATH

# Default: the CLI's help; each service sets its own command (compose.yaml, deploy/k8s).
CMD ["python", "-m", "threadline.cli", "--help"]

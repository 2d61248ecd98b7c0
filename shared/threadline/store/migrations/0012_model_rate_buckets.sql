-- depends: 0011_step_functions
-- Cluster-wide provider limits (docs/models.md, "Cluster-wide limits"): one token bucket per
-- model and measure (requests or tokens per minute), shared by every processor-worker.
-- level = what the bucket held at `at`; a negative level is debt that later callers wait out.
CREATE TABLE model_rate_buckets (
    key     text PRIMARY KEY,
    level   double precision NOT NULL,
    at      timestamptz NOT NULL
);

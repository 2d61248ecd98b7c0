"""Agents whose retry budgets are under test: error processors asking for another model call,
output processors asking for another step, errors arriving inside a 200 stream."""

from __future__ import annotations

from threadline.runtime import Agent, Processor


class RetryEveryApiError(Processor):
    """Asks for a retry on every model error; records the retry counts and error kinds."""

    id = "ar"

    def process_api_error(self, *, error, retry_count, state, **_):
        state.setdefault("seen", []).append(retry_count)
        state.setdefault("kinds", []).append(error.kind)
        return {"retry": True}


class RetryEveryStep(Processor):
    """Asks for the step again, every time (with no cap set, that is a tripwire)."""

    id = "q"

    def process_output_step(self, *, abort, **_):
        abort("try again", retry=True)


class RetryRateLimitOnce(Processor):
    """Retries the first rate limit only; records every error it is shown."""

    id = "rl"

    def process_api_error(self, *, error, retry_count, state, **_):
        state.setdefault("errors", []).append({"kind": error.kind, "status": error.status_code,
                                               "retry_count": retry_count})
        return {"retry": error.kind == "rate_limit" and retry_count == 0}


class ObserveOutput(Processor):
    """Records the part types and the final finish reasons it is shown (never raw errors)."""

    id = "obs"

    async def process_output_stream(self, *, part, state, **_):
        state.setdefault("types", []).append(part.type)
        return part

    async def process_output_result(self, *, result, state, **_):
        state.setdefault("results", []).append(result.finishReason)


class RetryShortAnswers(Processor):
    """Asks for the step again while the answer is under 10 characters (the feedback reaches the model)."""

    id = "too-short"

    def process_output_step(self, *, text, retry_count, abort, state, **_):
        state.setdefault("retry_counts", []).append(retry_count)
        if len(text) < 10:
            abort("too short", retry=True)


class AlwaysRetryStep(Processor):
    """Asks for the step again every time, recording each retry count."""

    id = "always-retry"

    def process_output_step(self, *, retry_count, state, abort, **_):
        state.setdefault("seen", []).append(retry_count)
        abort("again", retry=True)


class RetryStreamOnBadWord(Processor):
    """Aborts the stream with ``retry`` on the first attempt that says BAD."""

    id = "stream-retry"

    async def process_output_stream(self, *, part, retry_count, abort, **_):
        if part.type == "text-delta" and "BAD" in part.payload.text and retry_count == 0:
            abort("no BAD words", retry=True)
        return part


# max_retries=0: these budgets count processor retries, one model call each (no model-level retries)
api_retry_forever = Agent(id="api-retry-forever", model="openai/threadline-api-retry-forever",
                          error_processors=[RetryEveryApiError()], max_retries=0)
step_retry_uncapped = Agent(id="step-retry-uncapped", model="openai/threadline-step-retry-uncapped",
                            output_processors=[RetryEveryStep()])
stream_errors = Agent(id="stream-errors", model="openai/threadline-stream-errors",
                      error_processors=[RetryRateLimitOnce()], output_processors=[ObserveOutput()])
stream_errors_unhandled = Agent(id="stream-errors-unhandled", model="openai/threadline-stream-errors-unhandled",
                                output_processors=[ObserveOutput()], max_retries=0)
retrying = Agent(id="retrying", model="openai/threadline-retrying", output_processors=[RetryShortAnswers()],
                 max_processor_retries=2)
retry_capped = Agent(id="retry-capped", model="openai/threadline-retry-capped", output_processors=[AlwaysRetryStep()],
                     max_processor_retries=1)
stream_retry = Agent(id="stream-retry", model="openai/threadline-sretry", output_processors=[RetryStreamOnBadWord()],
                     max_processor_retries=3)

agents = [api_retry_forever, step_retry_uncapped, stream_errors, stream_errors_unhandled, retrying, retry_capped,
          stream_retry]

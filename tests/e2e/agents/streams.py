"""Agents of the stream-normalisation cases (docs/cases.md, B07–B09): stalled and slow streams,
text mixed with tool calls and calls without arguments, usage in every shape."""

from __future__ import annotations

from pydantic import BaseModel

from threadline.runtime import Agent, Processor, create_tool


class RetryTimeout(Processor):
    """B07 (d): retries the first model timeout; records every error kind it is shown."""

    id = "rt"

    def process_api_error(self, *, error, retry_count, state, **_):
        state.setdefault("kinds", []).append(error.kind)
        return {"retry": error.kind == "timeout" and retry_count == 0}


class Quality(Processor):
    """B09: asks for the step again (once) when its text contains "DRAFT"."""

    id = "q"

    def process_output_step(self, *, text, retry_count, abort, **_):
        if "DRAFT" in (text or "") and retry_count == 0:
            abort("no drafts", retry=True)


class LookupInput(BaseModel):
    id: str


class NoInput(BaseModel):
    pass


class AddInput(BaseModel):
    a: int
    b: int


PINGS: list[object] = []
"""What ``ping`` was called with, in this process (its result is the call's number)."""


def ping(args: object) -> dict[str, int]:
    PINGS.append(args)
    return {"pong": len(PINGS)}


# B07: no model-level retries, so the error of a stalled call is what the run ends with
stalled = Agent(id="B07", model="openai/threadline-b07", max_retries=0)
stalled_retry = Agent(id="B07-rt", model="openai/threadline-b07-rt", error_processors=[RetryTimeout()],
                      max_retries=0, max_processor_retries=1)
mixed = Agent(id="B08", model="openai/threadline-b08", default_options={"max_steps": 3},
              tools=[create_tool(id="lookup", description="look a customer up", input_schema=LookupInput,
                                 execute=lambda i: {"id": i.id, "plan": "Pro"}),
                     create_tool(id="ping", description="ping (no parameters)", input_schema=NoInput, execute=ping)])
billed = Agent(id="B09", model="openai/threadline-b09", default_options={"max_steps": 3},
               output_processors=[Quality()], max_processor_retries=1,
               tools=[create_tool(id="add", description="add two numbers", input_schema=AddInput,
                                  execute=lambda i: i.a + i.b)])

agents = [stalled, stalled_retry, mixed, billed]

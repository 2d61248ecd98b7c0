"""The support agent of the demo, in the spirit of Mastra's documented examples: instructions, a customer
lookup tool, an input processor that blocks listed words, and an output processor that counts
the words of the answer and emits a ``data-word-count`` chunk.

This is the default agents module (``THREADLINE_AGENTS_MODULE=threadline.examples.support``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from threadline.events.chunk_types import ChunkKind
from threadline.events.messages import is_user_authored
from threadline.runtime import Agent, Processor, create_tool

CUSTOMERS = {
    "C-1001": {"id": "C-1001", "name": "Ada Lovelace", "plan": "pro", "open_tickets": 2},
    "C-1002": {"id": "C-1002", "name": "Alan Turing", "plan": "free", "open_tickets": 0},
}


class LookupInput(BaseModel):
    customer_id: str = Field(description="Customer id, e.g. C-1001")


async def lookup_customer(input: LookupInput, context: Any) -> dict[str, Any]:
    """Find a customer by id."""
    await context.writer.custom({"type": "data-lookup", "data": {"customer_id": input.customer_id},
                                 "transient": True})
    return CUSTOMERS.get(input.customer_id, {"error": f"no customer {input.customer_id}"})


lookup_customer_tool = create_tool(
    id="lookup_customer", description="Look up a customer's plan and open tickets by customer id.",
    input_schema=LookupInput, execute=lookup_customer)


class BlockedWords(Processor):
    """Input processor: aborts the run when the user's input contains a blocked word."""

    id = "blocked-words"

    def __init__(self, words: list[str]) -> None:
        self.words = [w.lower() for w in words]

    async def process_input(self, *, messages, abort, **_):
        for msg in messages:
            if not is_user_authored(msg):  # role user, or a sendMessage's role signal of type user
                continue
            text = " ".join(p.text for p in msg.content.parts or [] if p.type == "text").lower()
            hit = next((w for w in self.words if w in text), None)
            if hit:
                abort(f"Blocked word in input: {hit}", metadata={"word": hit})
        return messages


class WordCounter(Processor):
    """Output processor (Mastra's documented ``WordCounter``): counts words as they stream, emits the count."""

    id = "word-counter"

    async def process_output_stream(self, *, part, state, writer, **_):
        state.setdefault("words", 0)
        if part.type == ChunkKind.TEXT_DELTA:
            state["words"] += len(part.payload.text.split())
        if part.type == ChunkKind.FINISH:
            await writer.custom({"type": "data-word-count", "data": {"words": state["words"]}})
        return part


support_agent = Agent(
    id="support-agent",
    name="Support Agent",
    description="Answers customer-support questions, looking customers up by id.",
    instructions=[
        "You are a concise customer-support agent.",
        "When the user mentions a customer id (like C-1001), call lookup_customer before answering.",
    ],
    tools=[lookup_customer_tool],
    input_processors=[BlockedWords(["password", "ssn"])],
    output_processors=[WordCounter()],
    default_options={"maxSteps": 5},
)

agents = [support_agent]

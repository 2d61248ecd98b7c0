"""The model adapter: the call (through litellm or the direct HTTP path), its stream, retries
and fallbacks, providers and structured output."""

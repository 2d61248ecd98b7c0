"""Test and demo helpers: a scriptable fake of the OpenAI chat-completions API and its client.

* `threadline.testing.model_server`: the server (`python -m threadline.testing.model_server`).
* `threadline.testing.model_script`: the test-side client and script builders.
"""

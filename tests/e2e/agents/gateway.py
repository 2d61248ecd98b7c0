"""Agents driven over HTTP (issue 17): the gateway's tests and the Studio browser test."""

from __future__ import annotations

from threadline.runtime import Agent

gateway = Agent(id="gateway", model="openai/threadline-gateway")
studio = Agent(id="studio", model="openai/threadline-studio")

agents = [gateway, studio]

"""The agent runtime: agents, tools and hooks, processors, the message list, step execution."""

from threadline.runtime.agent import Agent
from threadline.runtime.memory import Memory
from threadline.runtime.messages import MessageList, make_message, text_of
from threadline.runtime.processor import Processor, ProcessorRunner, TripWire
from threadline.runtime.tools import Tool, ToolContext, ToolHooks, create_tool, tool

__all__ = ["Agent", "Memory", "MessageList", "Processor", "ProcessorRunner", "Tool", "ToolContext", "ToolHooks",
           "TripWire", "create_tool", "make_message", "text_of", "tool"]

"""The agent runtime: agents, tools and hooks, processors, the message list, step execution."""

from threadline.runtime.agent import Agent
from threadline.runtime.memory import Memory
from threadline.runtime.messages import MessageList, make_message, text_of
from threadline.runtime.processor import Processor, ProcessorRunner, TripWire
from threadline.runtime.tools import Tool, ToolContext, ToolHooks, create_tool, tool
from threadline.runtime.workflows import Step, StepContext, Workflow, create_step, create_workflow

__all__ = ["Agent", "Memory", "MessageList", "Processor", "ProcessorRunner", "Step", "StepContext", "Tool",
           "ToolContext", "ToolHooks", "TripWire", "Workflow", "create_step", "create_tool", "create_workflow",
           "make_message", "text_of", "tool"]

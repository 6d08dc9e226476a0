"""The transport-agnostic kernel: model, sessions, run loop, store, settings.

Imports only the standard library, anyio and msgspec. This package is the kernel's
whole public surface: a transport or plugin uses the names exported here and the
types in :mod:`kernel.model` (commands, events, replies, content parts, ``ErrorInfo``
with its stable codes), and nothing else — a test walks the source to keep it so
(docs/writing-a-transport.md, "The seam"). :mod:`kernel.testing` is public for tests.

Names are loaded on first use, so ``import kernel.model`` (what a pure codec needs)
loads msgspec and nothing more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports as lazy_exports

#: Exported name -> the private module that defines it.
_EXPORTS: dict[str, str] = {
    "Kernel": ".kernel",
    "ProviderFactory": ".kernel",
    "gateway_version": ".kernel",
    "lazy_exports": ".lazy",
    "beside": ".companions",
    "side_tasks": ".companions",
    "SideTasks": ".companions",
    "Follower": ".follow",
    "RunFollower": ".follow",
    "RunWatch": ".watch",
    "Subscription": ".hub",
    "SessionHost": ".host",
    "RunSession": ".host",
    "ToolScope": ".host",
    "ClusterHost": ".cluster",
    "CommandWithdrawn": ".cluster",
    "Command": ".model",
    "Event": ".model",
    "Reply": ".model",
    "KernelError": ".model",
    "ApprovalPolicy": ".model",
    "FileAccess": ".model",
    "CommandContext": ".commands",
    "SlashCommand": ".commands",
    "Chunk": ".provider",
    "FinishChunk": ".provider",
    "FinishReason": ".provider",
    "Provider": ".provider",
    "ProviderError": ".provider",
    "ProviderRequest": ".provider",
    "ReasoningChunk": ".provider",
    "ResponseStarted": ".provider",
    "TextChunk": ".provider",
    "ToolCallChunk": ".provider",
    "ToolSpec": ".provider",
    "UsageChunk": ".provider",
    "AgentSettings": ".settings",
    "ClusterSettings": ".settings",
    "McpServerSettings": ".settings",
    "A2AAgentSettings": ".settings",
    "Cluster": ".cluster",
    "OpenAISettings": ".settings",
    "SECRET_KEYS": ".settings",
    "Settings": ".settings",
    "load_settings": ".settings",
    "mask_secret": ".settings",
    "mask_secrets": ".settings",
    "SQLiteStore": ".store",
    "SessionRecord": ".store",
    "Store": ".store",
    "Tool": ".tools",
    "ToolContext": ".tools",
    "ToolFailure": ".tools",
    "WorkspaceFiles": ".files",
    "IMAGE_TYPES": ".attachments",
    "admit_part": ".attachments",
    "admit_parts": ".attachments",
    "file_text": ".attachments",
    "message_from_parts": ".attachments",
    "sniff_image": ".attachments",
    "ERROR_SPECS": ".errors",
    "ErrorSpec": ".errors",
    "error_spec": ".errors",
    "http_headers": ".errors",
    "http_status": ".errors",
    "retry_after_s": ".errors",
    "JsonDecoder": ".jsonwire",
    "TOO_DEEP": ".jsonwire",
    "decode_json": ".jsonwire",
    "MetricsExposition": ".observe",
    "ModelCall": ".observe",
    "Observer": ".observe",
    "ObserverFactory": ".observe",
    "Observers": ".observe",
    "RunFacts": ".observe",
    "RunObserver": ".observe",
    "RunOutcome": ".observe",
    "current_run": ".observe",
    "RecentRuns": ".observe",
    "RunRecord": ".observe",
    "LOG_RING": ".logs",
    "LogRing": ".logs",
    "log_fields": ".logs",
    "iso_ts": ".logs",
    "traceparent_trace_id": ".observe",
    "MAX_WIRE_INT": ".jsonwire",
    "parse_wire_int": ".jsonwire",
    # API keys and their storage (kernel/keys.py, docs/security.md).
    "KeyRecord": ".keys",
    "KeyView": ".keys",
    "Keyring": ".keys",
    "KEY_COLUMNS": ".store",
    "KEY_USAGE_SQL": ".store",
    "key_body": ".store",
    "key_of_row": ".store",
    # Fenced history writes (a store shared by instances; kernel/store.py).
    "check_fence": ".store",
    "RateWindows": ".access",
    "current_caller": ".access",
}

__getattr__, __all__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from .access import RateWindows as RateWindows
    from .access import current_caller as current_caller
    from .attachments import IMAGE_TYPES as IMAGE_TYPES
    from .attachments import admit_part as admit_part
    from .attachments import admit_parts as admit_parts
    from .attachments import file_text as file_text
    from .attachments import message_from_parts as message_from_parts
    from .attachments import sniff_image as sniff_image
    from .cluster import Cluster as Cluster
    from .cluster import ClusterHost as ClusterHost
    from .cluster import CommandWithdrawn as CommandWithdrawn
    from .commands import CommandContext as CommandContext
    from .commands import SlashCommand as SlashCommand
    from .companions import SideTasks as SideTasks
    from .companions import beside as beside
    from .companions import side_tasks as side_tasks
    from .errors import ERROR_SPECS as ERROR_SPECS
    from .errors import ErrorSpec as ErrorSpec
    from .errors import error_spec as error_spec
    from .errors import http_headers as http_headers
    from .errors import http_status as http_status
    from .errors import retry_after_s as retry_after_s
    from .files import WorkspaceFiles as WorkspaceFiles
    from .follow import Follower as Follower
    from .follow import RunFollower as RunFollower
    from .host import RunSession as RunSession
    from .host import SessionHost as SessionHost
    from .host import ToolScope as ToolScope
    from .hub import Subscription as Subscription
    from .jsonwire import MAX_WIRE_INT as MAX_WIRE_INT
    from .jsonwire import TOO_DEEP as TOO_DEEP
    from .jsonwire import JsonDecoder as JsonDecoder
    from .jsonwire import decode_json as decode_json
    from .jsonwire import parse_wire_int as parse_wire_int
    from .kernel import Kernel as Kernel
    from .kernel import ProviderFactory as ProviderFactory
    from .kernel import gateway_version as gateway_version
    from .keys import KeyRecord as KeyRecord
    from .keys import Keyring as Keyring
    from .keys import KeyView as KeyView
    from .logs import LOG_RING as LOG_RING
    from .logs import LogRing as LogRing
    from .logs import iso_ts as iso_ts
    from .logs import log_fields as log_fields
    from .model import ApprovalPolicy as ApprovalPolicy
    from .model import Command as Command
    from .model import Event as Event
    from .model import FileAccess as FileAccess
    from .model import KernelError as KernelError
    from .model import Reply as Reply
    from .observe import MetricsExposition as MetricsExposition
    from .observe import ModelCall as ModelCall
    from .observe import Observer as Observer
    from .observe import ObserverFactory as ObserverFactory
    from .observe import Observers as Observers
    from .observe import RecentRuns as RecentRuns
    from .observe import RunFacts as RunFacts
    from .observe import RunObserver as RunObserver
    from .observe import RunOutcome as RunOutcome
    from .observe import RunRecord as RunRecord
    from .observe import current_run as current_run
    from .observe import traceparent_trace_id as traceparent_trace_id
    from .provider import Chunk as Chunk
    from .provider import FinishChunk as FinishChunk
    from .provider import FinishReason as FinishReason
    from .provider import Provider as Provider
    from .provider import ProviderError as ProviderError
    from .provider import ProviderRequest as ProviderRequest
    from .provider import ReasoningChunk as ReasoningChunk
    from .provider import ResponseStarted as ResponseStarted
    from .provider import TextChunk as TextChunk
    from .provider import ToolCallChunk as ToolCallChunk
    from .provider import ToolSpec as ToolSpec
    from .provider import UsageChunk as UsageChunk
    from .settings import SECRET_KEYS as SECRET_KEYS
    from .settings import A2AAgentSettings as A2AAgentSettings
    from .settings import AgentSettings as AgentSettings
    from .settings import ClusterSettings as ClusterSettings
    from .settings import McpServerSettings as McpServerSettings
    from .settings import OpenAISettings as OpenAISettings
    from .settings import Settings as Settings
    from .settings import load_settings as load_settings
    from .settings import mask_secret as mask_secret
    from .settings import mask_secrets as mask_secrets
    from .store import KEY_COLUMNS as KEY_COLUMNS
    from .store import KEY_USAGE_SQL as KEY_USAGE_SQL
    from .store import SessionRecord as SessionRecord
    from .store import SQLiteStore as SQLiteStore
    from .store import Store as Store
    from .store import check_fence as check_fence
    from .store import key_body as key_body
    from .store import key_of_row as key_of_row
    from .tools import Tool as Tool
    from .tools import ToolContext as ToolContext
    from .tools import ToolFailure as ToolFailure
    from .watch import RunWatch as RunWatch

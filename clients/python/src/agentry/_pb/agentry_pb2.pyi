import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Source(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SOURCE_UNSPECIFIED: _ClassVar[Source]
    SOURCE_PROJECT: _ClassVar[Source]
    SOURCE_USER: _ClassVar[Source]
    SOURCE_PLUGIN: _ClassVar[Source]
    SOURCE_DIR: _ClassVar[Source]
    SOURCE_BUNDLED: _ClassVar[Source]

class FileFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_FORMAT_UNSPECIFIED: _ClassVar[FileFormat]
    FILE_FORMAT_MARKDOWN: _ClassVar[FileFormat]
    FILE_FORMAT_TOML: _ClassVar[FileFormat]

class AgentView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AGENT_VIEW_UNSPECIFIED: _ClassVar[AgentView]
    AGENT_VIEW_FULL: _ClassVar[AgentView]
    AGENT_VIEW_CATALOG: _ClassVar[AgentView]

class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODE_UNSPECIFIED: _ClassVar[Mode]
    MODE_DEFAULT: _ClassVar[Mode]
    MODE_PLAN: _ClassVar[Mode]

class ThinkingLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    THINKING_LEVEL_UNSPECIFIED: _ClassVar[ThinkingLevel]
    THINKING_LEVEL_OFF: _ClassVar[ThinkingLevel]
    THINKING_LEVEL_MINIMAL: _ClassVar[ThinkingLevel]
    THINKING_LEVEL_LOW: _ClassVar[ThinkingLevel]
    THINKING_LEVEL_MEDIUM: _ClassVar[ThinkingLevel]
    THINKING_LEVEL_HIGH: _ClassVar[ThinkingLevel]
    THINKING_LEVEL_XHIGH: _ClassVar[ThinkingLevel]

class Severity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEVERITY_UNSPECIFIED: _ClassVar[Severity]
    SEVERITY_WARNING: _ClassVar[Severity]
    SEVERITY_ERROR: _ClassVar[Severity]
    SEVERITY_INFO: _ClassVar[Severity]

class OutputSchemaSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTPUT_SCHEMA_SOURCE_UNSPECIFIED: _ClassVar[OutputSchemaSource]
    OUTPUT_SCHEMA_SOURCE_AGENT: _ClassVar[OutputSchemaSource]
    OUTPUT_SCHEMA_SOURCE_REQUEST: _ClassVar[OutputSchemaSource]
    OUTPUT_SCHEMA_SOURCE_PARENT: _ClassVar[OutputSchemaSource]

class WorkerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKER_STATE_UNSPECIFIED: _ClassVar[WorkerState]
    WORKER_STATE_PENDING: _ClassVar[WorkerState]
    WORKER_STATE_RUNNING: _ClassVar[WorkerState]
    WORKER_STATE_COMPLETED: _ClassVar[WorkerState]
    WORKER_STATE_FAILED: _ClassVar[WorkerState]
    WORKER_STATE_KILLED: _ClassVar[WorkerState]
    WORKER_STATE_INPUT_REQUIRED: _ClassVar[WorkerState]

class Isolation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ISOLATION_UNSPECIFIED: _ClassVar[Isolation]
    ISOLATION_NONE: _ClassVar[Isolation]
    ISOLATION_WORKTREE: _ClassVar[Isolation]

class Delivery(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELIVERY_UNSPECIFIED: _ClassVar[Delivery]
    DELIVERY_QUEUE: _ClassVar[Delivery]
    DELIVERY_INTERRUPT: _ClassVar[Delivery]

class ProgressKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROGRESS_KIND_UNSPECIFIED: _ClassVar[ProgressKind]
    PROGRESS_KIND_TEXT: _ClassVar[ProgressKind]
    PROGRESS_KIND_TOOL_CALL: _ClassVar[ProgressKind]
    PROGRESS_KIND_TOOL_RESULT: _ClassVar[ProgressKind]
    PROGRESS_KIND_STATUS: _ClassVar[ProgressKind]
    PROGRESS_KIND_MESSAGE: _ClassVar[ProgressKind]
    PROGRESS_KIND_ARTIFACT: _ClassVar[ProgressKind]

class ToolClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CLASS_UNSPECIFIED: _ClassVar[ToolClass]
    TOOL_CLASS_READ: _ClassVar[ToolClass]
    TOOL_CLASS_WRITE: _ClassVar[ToolClass]
    TOOL_CLASS_DESTRUCTIVE: _ClassVar[ToolClass]

class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_UNSPECIFIED: _ClassVar[Decision]
    DECISION_APPROVE: _ClassVar[Decision]
    DECISION_REJECT: _ClassVar[Decision]
SOURCE_UNSPECIFIED: Source
SOURCE_PROJECT: Source
SOURCE_USER: Source
SOURCE_PLUGIN: Source
SOURCE_DIR: Source
SOURCE_BUNDLED: Source
FILE_FORMAT_UNSPECIFIED: FileFormat
FILE_FORMAT_MARKDOWN: FileFormat
FILE_FORMAT_TOML: FileFormat
AGENT_VIEW_UNSPECIFIED: AgentView
AGENT_VIEW_FULL: AgentView
AGENT_VIEW_CATALOG: AgentView
MODE_UNSPECIFIED: Mode
MODE_DEFAULT: Mode
MODE_PLAN: Mode
THINKING_LEVEL_UNSPECIFIED: ThinkingLevel
THINKING_LEVEL_OFF: ThinkingLevel
THINKING_LEVEL_MINIMAL: ThinkingLevel
THINKING_LEVEL_LOW: ThinkingLevel
THINKING_LEVEL_MEDIUM: ThinkingLevel
THINKING_LEVEL_HIGH: ThinkingLevel
THINKING_LEVEL_XHIGH: ThinkingLevel
SEVERITY_UNSPECIFIED: Severity
SEVERITY_WARNING: Severity
SEVERITY_ERROR: Severity
SEVERITY_INFO: Severity
OUTPUT_SCHEMA_SOURCE_UNSPECIFIED: OutputSchemaSource
OUTPUT_SCHEMA_SOURCE_AGENT: OutputSchemaSource
OUTPUT_SCHEMA_SOURCE_REQUEST: OutputSchemaSource
OUTPUT_SCHEMA_SOURCE_PARENT: OutputSchemaSource
WORKER_STATE_UNSPECIFIED: WorkerState
WORKER_STATE_PENDING: WorkerState
WORKER_STATE_RUNNING: WorkerState
WORKER_STATE_COMPLETED: WorkerState
WORKER_STATE_FAILED: WorkerState
WORKER_STATE_KILLED: WorkerState
WORKER_STATE_INPUT_REQUIRED: WorkerState
ISOLATION_UNSPECIFIED: Isolation
ISOLATION_NONE: Isolation
ISOLATION_WORKTREE: Isolation
DELIVERY_UNSPECIFIED: Delivery
DELIVERY_QUEUE: Delivery
DELIVERY_INTERRUPT: Delivery
PROGRESS_KIND_UNSPECIFIED: ProgressKind
PROGRESS_KIND_TEXT: ProgressKind
PROGRESS_KIND_TOOL_CALL: ProgressKind
PROGRESS_KIND_TOOL_RESULT: ProgressKind
PROGRESS_KIND_STATUS: ProgressKind
PROGRESS_KIND_MESSAGE: ProgressKind
PROGRESS_KIND_ARTIFACT: ProgressKind
TOOL_CLASS_UNSPECIFIED: ToolClass
TOOL_CLASS_READ: ToolClass
TOOL_CLASS_WRITE: ToolClass
TOOL_CLASS_DESTRUCTIVE: ToolClass
DECISION_UNSPECIFIED: Decision
DECISION_APPROVE: Decision
DECISION_REJECT: Decision

class StringList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ...) -> None: ...

class Agent(_message.Message):
    __slots__ = ("name", "description", "system_prompt", "when_to_use", "tools", "disallowed_tools", "spawns", "model", "thinking_level", "output_schema", "permission_mode", "max_turns", "critical_reminder", "extra_json", "source", "family", "file_path", "shadowed_by", "content_sha256", "format", "temperature", "timeout_mins", "remote", "background", "isolation", "memory", "skills", "mcp_servers")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    WHEN_TO_USE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    DISALLOWED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    SPAWNS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    THINKING_LEVEL_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    CRITICAL_REMINDER_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    FILE_PATH_FIELD_NUMBER: _ClassVar[int]
    SHADOWED_BY_FIELD_NUMBER: _ClassVar[int]
    CONTENT_SHA256_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MINS_FIELD_NUMBER: _ClassVar[int]
    REMOTE_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    SKILLS_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    system_prompt: str
    when_to_use: str
    tools: StringList
    disallowed_tools: StringList
    spawns: str
    model: _containers.RepeatedScalarFieldContainer[str]
    thinking_level: ThinkingLevel
    output_schema: str
    permission_mode: str
    max_turns: int
    critical_reminder: str
    extra_json: str
    source: Source
    family: str
    file_path: str
    shadowed_by: str
    content_sha256: str
    format: FileFormat
    temperature: float
    timeout_mins: int
    remote: bool
    background: bool
    isolation: str
    memory: str
    skills: _containers.RepeatedScalarFieldContainer[str]
    mcp_servers: McpServerList
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., system_prompt: _Optional[str] = ..., when_to_use: _Optional[str] = ..., tools: _Optional[_Union[StringList, _Mapping]] = ..., disallowed_tools: _Optional[_Union[StringList, _Mapping]] = ..., spawns: _Optional[str] = ..., model: _Optional[_Iterable[str]] = ..., thinking_level: _Optional[_Union[ThinkingLevel, str]] = ..., output_schema: _Optional[str] = ..., permission_mode: _Optional[str] = ..., max_turns: _Optional[int] = ..., critical_reminder: _Optional[str] = ..., extra_json: _Optional[str] = ..., source: _Optional[_Union[Source, str]] = ..., family: _Optional[str] = ..., file_path: _Optional[str] = ..., shadowed_by: _Optional[str] = ..., content_sha256: _Optional[str] = ..., format: _Optional[_Union[FileFormat, str]] = ..., temperature: _Optional[float] = ..., timeout_mins: _Optional[int] = ..., remote: _Optional[bool] = ..., background: _Optional[bool] = ..., isolation: _Optional[str] = ..., memory: _Optional[str] = ..., skills: _Optional[_Iterable[str]] = ..., mcp_servers: _Optional[_Union[McpServerList, _Mapping]] = ...) -> None: ...

class EffectiveTools(_message.Message):
    __slots__ = ("only", "all_except")
    ONLY_FIELD_NUMBER: _ClassVar[int]
    ALL_EXCEPT_FIELD_NUMBER: _ClassVar[int]
    only: StringList
    all_except: StringList
    def __init__(self, only: _Optional[_Union[StringList, _Mapping]] = ..., all_except: _Optional[_Union[StringList, _Mapping]] = ...) -> None: ...

class EffectiveAgent(_message.Message):
    __slots__ = ("name", "system_prompt", "tools", "spawns", "model", "thinking_level", "max_turns", "permission_mode", "output_schema", "output_schema_source", "mode", "depth", "at_max_depth", "mcp_servers", "tool_rules")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    SPAWNS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    THINKING_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_SOURCE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    AT_MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    TOOL_RULES_FIELD_NUMBER: _ClassVar[int]
    name: str
    system_prompt: str
    tools: EffectiveTools
    spawns: str
    model: _containers.RepeatedScalarFieldContainer[str]
    thinking_level: ThinkingLevel
    max_turns: int
    permission_mode: str
    output_schema: str
    output_schema_source: OutputSchemaSource
    mode: Mode
    depth: int
    at_max_depth: bool
    mcp_servers: McpServerList
    tool_rules: _containers.RepeatedCompositeFieldContainer[ToolRule]
    def __init__(self, name: _Optional[str] = ..., system_prompt: _Optional[str] = ..., tools: _Optional[_Union[EffectiveTools, _Mapping]] = ..., spawns: _Optional[str] = ..., model: _Optional[_Iterable[str]] = ..., thinking_level: _Optional[_Union[ThinkingLevel, str]] = ..., max_turns: _Optional[int] = ..., permission_mode: _Optional[str] = ..., output_schema: _Optional[str] = ..., output_schema_source: _Optional[_Union[OutputSchemaSource, str]] = ..., mode: _Optional[_Union[Mode, str]] = ..., depth: _Optional[int] = ..., at_max_depth: _Optional[bool] = ..., mcp_servers: _Optional[_Union[McpServerList, _Mapping]] = ..., tool_rules: _Optional[_Iterable[_Union[ToolRule, _Mapping]]] = ...) -> None: ...

class ToolRule(_message.Message):
    __slots__ = ("entry", "name", "pattern", "deny")
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    entry: str
    name: str
    pattern: str
    deny: bool
    def __init__(self, entry: _Optional[str] = ..., name: _Optional[str] = ..., pattern: _Optional[str] = ..., deny: _Optional[bool] = ...) -> None: ...

class Diagnostic(_message.Message):
    __slots__ = ("path", "line", "severity", "code", "message")
    PATH_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    path: str
    line: int
    severity: Severity
    code: str
    message: str
    def __init__(self, path: _Optional[str] = ..., line: _Optional[int] = ..., severity: _Optional[_Union[Severity, str]] = ..., code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ("workspace", "view", "include_shadowed", "page_size", "page_token")
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SHADOWED_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workspace: str
    view: AgentView
    include_shadowed: bool
    page_size: int
    page_token: str
    def __init__(self, workspace: _Optional[str] = ..., view: _Optional[_Union[AgentView, str]] = ..., include_shadowed: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents", "shadowed", "diagnostics", "registry_version", "catalog_markdown", "next_page_token", "total_size")
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    SHADOWED_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSTICS_FIELD_NUMBER: _ClassVar[int]
    REGISTRY_VERSION_FIELD_NUMBER: _ClassVar[int]
    CATALOG_MARKDOWN_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[Agent]
    shadowed: _containers.RepeatedCompositeFieldContainer[Agent]
    diagnostics: _containers.RepeatedCompositeFieldContainer[Diagnostic]
    registry_version: str
    catalog_markdown: str
    next_page_token: str
    total_size: int
    def __init__(self, agents: _Optional[_Iterable[_Union[Agent, _Mapping]]] = ..., shadowed: _Optional[_Iterable[_Union[Agent, _Mapping]]] = ..., diagnostics: _Optional[_Iterable[_Union[Diagnostic, _Mapping]]] = ..., registry_version: _Optional[str] = ..., catalog_markdown: _Optional[str] = ..., next_page_token: _Optional[str] = ..., total_size: _Optional[int] = ...) -> None: ...

class ResolveAgentRequest(_message.Message):
    __slots__ = ("name", "workspace", "mode", "output_schema")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    name: str
    workspace: str
    mode: Mode
    output_schema: str
    def __init__(self, name: _Optional[str] = ..., workspace: _Optional[str] = ..., mode: _Optional[_Union[Mode, str]] = ..., output_schema: _Optional[str] = ...) -> None: ...

class ResolveAgentResponse(_message.Message):
    __slots__ = ("agent", "effective", "registry_version")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    REGISTRY_VERSION_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    effective: EffectiveAgent
    registry_version: str
    def __init__(self, agent: _Optional[_Union[Agent, _Mapping]] = ..., effective: _Optional[_Union[EffectiveAgent, _Mapping]] = ..., registry_version: _Optional[str] = ...) -> None: ...

class ReloadAgentsRequest(_message.Message):
    __slots__ = ("workspace",)
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    workspace: str
    def __init__(self, workspace: _Optional[str] = ...) -> None: ...

class ReloadAgentsResponse(_message.Message):
    __slots__ = ("registry_version", "diagnostics")
    REGISTRY_VERSION_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSTICS_FIELD_NUMBER: _ClassVar[int]
    registry_version: str
    diagnostics: _containers.RepeatedCompositeFieldContainer[Diagnostic]
    def __init__(self, registry_version: _Optional[str] = ..., diagnostics: _Optional[_Iterable[_Union[Diagnostic, _Mapping]]] = ...) -> None: ...

class PruneWorktreesRequest(_message.Message):
    __slots__ = ("older_than",)
    OLDER_THAN_FIELD_NUMBER: _ClassVar[int]
    older_than: _duration_pb2.Duration
    def __init__(self, older_than: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class PruneWorktreesResponse(_message.Message):
    __slots__ = ("removed", "kept_live", "failed")
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    KEPT_LIVE_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    removed: _containers.RepeatedScalarFieldContainer[str]
    kept_live: _containers.RepeatedScalarFieldContainer[str]
    failed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, removed: _Optional[_Iterable[str]] = ..., kept_live: _Optional[_Iterable[str]] = ..., failed: _Optional[_Iterable[str]] = ...) -> None: ...

class Worker(_message.Message):
    __slots__ = ("id", "agent", "description", "parent_id", "depth", "state", "create_time", "start_time", "close_time", "result", "structured_result", "error", "exit_code", "tools", "spawns", "model", "caller", "workspace", "mode", "sequence", "last_activity_time", "usage", "tree_usage", "worktree", "continues", "continued_by", "question", "interactive", "undelivered_messages", "artifacts", "rejected")
    ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    CLOSE_TIME_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    SPAWNS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTIVITY_TIME_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TREE_USAGE_FIELD_NUMBER: _ClassVar[int]
    WORKTREE_FIELD_NUMBER: _ClassVar[int]
    CONTINUES_FIELD_NUMBER: _ClassVar[int]
    CONTINUED_BY_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    INTERACTIVE_FIELD_NUMBER: _ClassVar[int]
    UNDELIVERED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    id: str
    agent: str
    description: str
    parent_id: str
    depth: int
    state: WorkerState
    create_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    close_time: _timestamp_pb2.Timestamp
    result: str
    structured_result: str
    error: str
    exit_code: int
    tools: EffectiveTools
    spawns: str
    model: _containers.RepeatedScalarFieldContainer[str]
    caller: str
    workspace: str
    mode: Mode
    sequence: int
    last_activity_time: _timestamp_pb2.Timestamp
    usage: TokenUsage
    tree_usage: TokenUsage
    worktree: Worktree
    continues: str
    continued_by: str
    question: str
    interactive: bool
    undelivered_messages: int
    artifacts: _containers.RepeatedCompositeFieldContainer[Artifact]
    rejected: bool
    def __init__(self, id: _Optional[str] = ..., agent: _Optional[str] = ..., description: _Optional[str] = ..., parent_id: _Optional[str] = ..., depth: _Optional[int] = ..., state: _Optional[_Union[WorkerState, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., close_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., result: _Optional[str] = ..., structured_result: _Optional[str] = ..., error: _Optional[str] = ..., exit_code: _Optional[int] = ..., tools: _Optional[_Union[EffectiveTools, _Mapping]] = ..., spawns: _Optional[str] = ..., model: _Optional[_Iterable[str]] = ..., caller: _Optional[str] = ..., workspace: _Optional[str] = ..., mode: _Optional[_Union[Mode, str]] = ..., sequence: _Optional[int] = ..., last_activity_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., usage: _Optional[_Union[TokenUsage, _Mapping]] = ..., tree_usage: _Optional[_Union[TokenUsage, _Mapping]] = ..., worktree: _Optional[_Union[Worktree, _Mapping]] = ..., continues: _Optional[str] = ..., continued_by: _Optional[str] = ..., question: _Optional[str] = ..., interactive: _Optional[bool] = ..., undelivered_messages: _Optional[int] = ..., artifacts: _Optional[_Iterable[_Union[Artifact, _Mapping]]] = ..., rejected: _Optional[bool] = ...) -> None: ...

class Artifact(_message.Message):
    __slots__ = ("artifact_id", "name", "description", "parts")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    name: str
    description: str
    parts: _containers.RepeatedCompositeFieldContainer[ArtifactPart]
    def __init__(self, artifact_id: _Optional[str] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., parts: _Optional[_Iterable[_Union[ArtifactPart, _Mapping]]] = ...) -> None: ...

class ArtifactPart(_message.Message):
    __slots__ = ("text", "data_json", "file")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    text: str
    data_json: str
    file: ArtifactFile
    def __init__(self, text: _Optional[str] = ..., data_json: _Optional[str] = ..., file: _Optional[_Union[ArtifactFile, _Mapping]] = ...) -> None: ...

class ArtifactFile(_message.Message):
    __slots__ = ("name", "media_type", "bytes", "uri")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    name: str
    media_type: str
    bytes: bytes
    uri: str
    def __init__(self, name: _Optional[str] = ..., media_type: _Optional[str] = ..., bytes: _Optional[bytes] = ..., uri: _Optional[str] = ...) -> None: ...

class TokenUsage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "total_tokens", "by_model")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BY_MODEL_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    by_model: _containers.RepeatedCompositeFieldContainer[ModelUsage]
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ..., by_model: _Optional[_Iterable[_Union[ModelUsage, _Mapping]]] = ...) -> None: ...

class ModelUsage(_message.Message):
    __slots__ = ("model", "prompt_tokens", "completion_tokens", "total_tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    def __init__(self, model: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ...) -> None: ...

class SpawnWorkerRequest(_message.Message):
    __slots__ = ("agent", "description", "prompt", "workspace", "mode", "output_schema", "wait", "request_id", "timeout", "isolation", "interactive")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    INTERACTIVE_FIELD_NUMBER: _ClassVar[int]
    agent: str
    description: str
    prompt: str
    workspace: str
    mode: Mode
    output_schema: str
    wait: bool
    request_id: str
    timeout: _duration_pb2.Duration
    isolation: Isolation
    interactive: bool
    def __init__(self, agent: _Optional[str] = ..., description: _Optional[str] = ..., prompt: _Optional[str] = ..., workspace: _Optional[str] = ..., mode: _Optional[_Union[Mode, str]] = ..., output_schema: _Optional[str] = ..., wait: _Optional[bool] = ..., request_id: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., isolation: _Optional[_Union[Isolation, str]] = ..., interactive: _Optional[bool] = ...) -> None: ...

class Worktree(_message.Message):
    __slots__ = ("path", "branch", "base_commit", "changed")
    PATH_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    BASE_COMMIT_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    path: str
    branch: str
    base_commit: str
    changed: bool
    def __init__(self, path: _Optional[str] = ..., branch: _Optional[str] = ..., base_commit: _Optional[str] = ..., changed: _Optional[bool] = ...) -> None: ...

class SpawnWorkerResponse(_message.Message):
    __slots__ = ("worker", "deduplicated", "hint")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    worker: Worker
    deduplicated: bool
    hint: str
    def __init__(self, worker: _Optional[_Union[Worker, _Mapping]] = ..., deduplicated: _Optional[bool] = ..., hint: _Optional[str] = ...) -> None: ...

class StopWorkerRequest(_message.Message):
    __slots__ = ("worker_id", "reason")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    reason: str
    def __init__(self, worker_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class StopWorkerResponse(_message.Message):
    __slots__ = ("worker",)
    WORKER_FIELD_NUMBER: _ClassVar[int]
    worker: Worker
    def __init__(self, worker: _Optional[_Union[Worker, _Mapping]] = ...) -> None: ...

class SendWorkerMessageRequest(_message.Message):
    __slots__ = ("worker_id", "text", "delivery", "wait", "request_id")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    text: str
    delivery: Delivery
    wait: bool
    request_id: str
    def __init__(self, worker_id: _Optional[str] = ..., text: _Optional[str] = ..., delivery: _Optional[_Union[Delivery, str]] = ..., wait: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class SendWorkerMessageResponse(_message.Message):
    __slots__ = ("worker", "message_id", "continued")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CONTINUED_FIELD_NUMBER: _ClassVar[int]
    worker: Worker
    message_id: str
    continued: bool
    def __init__(self, worker: _Optional[_Union[Worker, _Mapping]] = ..., message_id: _Optional[str] = ..., continued: _Optional[bool] = ...) -> None: ...

class GetWorkerRequest(_message.Message):
    __slots__ = ("worker_id",)
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    def __init__(self, worker_id: _Optional[str] = ...) -> None: ...

class GetWorkerResponse(_message.Message):
    __slots__ = ("worker",)
    WORKER_FIELD_NUMBER: _ClassVar[int]
    worker: Worker
    def __init__(self, worker: _Optional[_Union[Worker, _Mapping]] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ("parent_id", "states", "page_size", "page_token")
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    parent_id: str
    states: _containers.RepeatedScalarFieldContainer[WorkerState]
    page_size: int
    page_token: str
    def __init__(self, parent_id: _Optional[str] = ..., states: _Optional[_Iterable[_Union[WorkerState, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ("workers", "next_page_token")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[Worker]
    next_page_token: str
    def __init__(self, workers: _Optional[_Iterable[_Union[Worker, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchWorkerRequest(_message.Message):
    __slots__ = ("worker_id", "after_sequence")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    after_sequence: int
    def __init__(self, worker_id: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class WatchWorkerResponse(_message.Message):
    __slots__ = ("sequence", "state", "worker", "time", "progress")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    state: WorkerState
    worker: Worker
    time: _timestamp_pb2.Timestamp
    progress: Progress
    def __init__(self, sequence: _Optional[int] = ..., state: _Optional[_Union[WorkerState, str]] = ..., worker: _Optional[_Union[Worker, _Mapping]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("kind", "text", "data_json")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    kind: ProgressKind
    text: str
    data_json: str
    def __init__(self, kind: _Optional[_Union[ProgressKind, str]] = ..., text: _Optional[str] = ..., data_json: _Optional[str] = ...) -> None: ...

class ReportProgressRequest(_message.Message):
    __slots__ = ("kind", "text", "data_json")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    kind: ProgressKind
    text: str
    data_json: str
    def __init__(self, kind: _Optional[_Union[ProgressKind, str]] = ..., text: _Optional[str] = ..., data_json: _Optional[str] = ...) -> None: ...

class ReportProgressResponse(_message.Message):
    __slots__ = ("sequence",)
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    def __init__(self, sequence: _Optional[int] = ...) -> None: ...

class Command(_message.Message):
    __slots__ = ("name", "aliases", "description", "template", "argument_hint", "model", "allowed_tools", "extra_json", "source", "family", "file_path", "shadowed_by", "content_sha256", "format")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    ARGUMENT_HINT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    FILE_PATH_FIELD_NUMBER: _ClassVar[int]
    SHADOWED_BY_FIELD_NUMBER: _ClassVar[int]
    CONTENT_SHA256_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    name: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    description: str
    template: str
    argument_hint: str
    model: str
    allowed_tools: StringList
    extra_json: str
    source: Source
    family: str
    file_path: str
    shadowed_by: str
    content_sha256: str
    format: FileFormat
    def __init__(self, name: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ..., description: _Optional[str] = ..., template: _Optional[str] = ..., argument_hint: _Optional[str] = ..., model: _Optional[str] = ..., allowed_tools: _Optional[_Union[StringList, _Mapping]] = ..., extra_json: _Optional[str] = ..., source: _Optional[_Union[Source, str]] = ..., family: _Optional[str] = ..., file_path: _Optional[str] = ..., shadowed_by: _Optional[str] = ..., content_sha256: _Optional[str] = ..., format: _Optional[_Union[FileFormat, str]] = ...) -> None: ...

class ListCommandsRequest(_message.Message):
    __slots__ = ("workspace", "include_shadowed", "page_size", "page_token")
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SHADOWED_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workspace: str
    include_shadowed: bool
    page_size: int
    page_token: str
    def __init__(self, workspace: _Optional[str] = ..., include_shadowed: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListCommandsResponse(_message.Message):
    __slots__ = ("commands", "shadowed", "diagnostics", "registry_version", "next_page_token", "total_size")
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    SHADOWED_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSTICS_FIELD_NUMBER: _ClassVar[int]
    REGISTRY_VERSION_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    commands: _containers.RepeatedCompositeFieldContainer[Command]
    shadowed: _containers.RepeatedCompositeFieldContainer[Command]
    diagnostics: _containers.RepeatedCompositeFieldContainer[Diagnostic]
    registry_version: str
    next_page_token: str
    total_size: int
    def __init__(self, commands: _Optional[_Iterable[_Union[Command, _Mapping]]] = ..., shadowed: _Optional[_Iterable[_Union[Command, _Mapping]]] = ..., diagnostics: _Optional[_Iterable[_Union[Diagnostic, _Mapping]]] = ..., registry_version: _Optional[str] = ..., next_page_token: _Optional[str] = ..., total_size: _Optional[int] = ...) -> None: ...

class ResolveCommandRequest(_message.Message):
    __slots__ = ("name", "workspace", "arguments")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    workspace: str
    arguments: str
    def __init__(self, name: _Optional[str] = ..., workspace: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ResolveCommandResponse(_message.Message):
    __slots__ = ("command", "expanded", "registry_version")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EXPANDED_FIELD_NUMBER: _ClassVar[int]
    REGISTRY_VERSION_FIELD_NUMBER: _ClassVar[int]
    command: Command
    expanded: str
    registry_version: str
    def __init__(self, command: _Optional[_Union[Command, _Mapping]] = ..., expanded: _Optional[str] = ..., registry_version: _Optional[str] = ...) -> None: ...

class ReviewRequest(_message.Message):
    __slots__ = ("tool", "tool_class", "action", "target", "reason", "blast_radius", "operator", "arguments_json", "workspace")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    TOOL_CLASS_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    BLAST_RADIUS_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    tool: str
    tool_class: ToolClass
    action: str
    target: str
    reason: str
    blast_radius: str
    operator: str
    arguments_json: str
    workspace: str
    def __init__(self, tool: _Optional[str] = ..., tool_class: _Optional[_Union[ToolClass, str]] = ..., action: _Optional[str] = ..., target: _Optional[str] = ..., reason: _Optional[str] = ..., blast_radius: _Optional[str] = ..., operator: _Optional[str] = ..., arguments_json: _Optional[str] = ..., workspace: _Optional[str] = ...) -> None: ...

class ReviewResponse(_message.Message):
    __slots__ = ("decision", "reason", "reviewed", "reviewer_worker_id")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REVIEWED_FIELD_NUMBER: _ClassVar[int]
    REVIEWER_WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    decision: Decision
    reason: str
    reviewed: bool
    reviewer_worker_id: str
    def __init__(self, decision: _Optional[_Union[Decision, str]] = ..., reason: _Optional[str] = ..., reviewed: _Optional[bool] = ..., reviewer_worker_id: _Optional[str] = ...) -> None: ...

class WorkerSpec(_message.Message):
    __slots__ = ("worker_id", "depth", "prompt", "description", "workspace", "agent", "memory_dir", "a2a")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_DIR_FIELD_NUMBER: _ClassVar[int]
    A2A_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    depth: int
    prompt: str
    description: str
    workspace: str
    agent: AgentSpec
    memory_dir: str
    a2a: A2aMessage
    def __init__(self, worker_id: _Optional[str] = ..., depth: _Optional[int] = ..., prompt: _Optional[str] = ..., description: _Optional[str] = ..., workspace: _Optional[str] = ..., agent: _Optional[_Union[AgentSpec, _Mapping]] = ..., memory_dir: _Optional[str] = ..., a2a: _Optional[_Union[A2aMessage, _Mapping]] = ...) -> None: ...

class A2aMessage(_message.Message):
    __slots__ = ("message_id", "context_id", "parts", "metadata_json")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    context_id: str
    parts: _containers.RepeatedCompositeFieldContainer[ArtifactPart]
    metadata_json: str
    def __init__(self, message_id: _Optional[str] = ..., context_id: _Optional[str] = ..., parts: _Optional[_Iterable[_Union[ArtifactPart, _Mapping]]] = ..., metadata_json: _Optional[str] = ...) -> None: ...

class AgentSpec(_message.Message):
    __slots__ = ("name", "system_prompt", "tools", "spawns", "model", "thinking_level", "max_turns", "permission_mode", "output_schema", "mcp_servers", "tool_rules")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    SPAWNS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    THINKING_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    TOOL_RULES_FIELD_NUMBER: _ClassVar[int]
    name: str
    system_prompt: str
    tools: ToolSpec
    spawns: str
    model: _containers.RepeatedScalarFieldContainer[str]
    thinking_level: str
    max_turns: int
    permission_mode: str
    output_schema: _struct_pb2.Value
    mcp_servers: McpServerList
    tool_rules: _containers.RepeatedCompositeFieldContainer[ToolRule]
    def __init__(self, name: _Optional[str] = ..., system_prompt: _Optional[str] = ..., tools: _Optional[_Union[ToolSpec, _Mapping]] = ..., spawns: _Optional[str] = ..., model: _Optional[_Iterable[str]] = ..., thinking_level: _Optional[str] = ..., max_turns: _Optional[int] = ..., permission_mode: _Optional[str] = ..., output_schema: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., mcp_servers: _Optional[_Union[McpServerList, _Mapping]] = ..., tool_rules: _Optional[_Iterable[_Union[ToolRule, _Mapping]]] = ...) -> None: ...

class McpServerList(_message.Message):
    __slots__ = ("servers",)
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    servers: _containers.RepeatedCompositeFieldContainer[McpServerSpec]
    def __init__(self, servers: _Optional[_Iterable[_Union[McpServerSpec, _Mapping]]] = ...) -> None: ...

class McpServerSpec(_message.Message):
    __slots__ = ("name", "inline", "command", "env", "cwd", "url", "headers")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    INLINE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    inline: bool
    command: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    cwd: str
    url: str
    headers: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., inline: _Optional[bool] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., cwd: _Optional[str] = ..., url: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ToolSpec(_message.Message):
    __slots__ = ("only", "all_except")
    ONLY_FIELD_NUMBER: _ClassVar[int]
    ALL_EXCEPT_FIELD_NUMBER: _ClassVar[int]
    only: _struct_pb2.ListValue
    all_except: _struct_pb2.ListValue
    def __init__(self, only: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ..., all_except: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ...) -> None: ...

class ConnectRequest(_message.Message):
    __slots__ = ("hello", "accepted", "progress", "finished", "heartbeat", "message_delivered", "input_required")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_DELIVERED_FIELD_NUMBER: _ClassVar[int]
    INPUT_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    hello: RunnerHello
    accepted: RunnerAccepted
    progress: RunnerProgress
    finished: RunnerFinished
    heartbeat: RunnerHeartbeat
    message_delivered: RunnerMessageDelivered
    input_required: RunnerInputRequired
    def __init__(self, hello: _Optional[_Union[RunnerHello, _Mapping]] = ..., accepted: _Optional[_Union[RunnerAccepted, _Mapping]] = ..., progress: _Optional[_Union[RunnerProgress, _Mapping]] = ..., finished: _Optional[_Union[RunnerFinished, _Mapping]] = ..., heartbeat: _Optional[_Union[RunnerHeartbeat, _Mapping]] = ..., message_delivered: _Optional[_Union[RunnerMessageDelivered, _Mapping]] = ..., input_required: _Optional[_Union[RunnerInputRequired, _Mapping]] = ...) -> None: ...

class ConnectResponse(_message.Message):
    __slots__ = ("welcome", "assignment", "cancel", "rejected", "message")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    welcome: RunnerWelcome
    assignment: RunnerAssignment
    cancel: RunnerCancel
    rejected: RunnerRejected
    message: RunnerMessage
    def __init__(self, welcome: _Optional[_Union[RunnerWelcome, _Mapping]] = ..., assignment: _Optional[_Union[RunnerAssignment, _Mapping]] = ..., cancel: _Optional[_Union[RunnerCancel, _Mapping]] = ..., rejected: _Optional[_Union[RunnerRejected, _Mapping]] = ..., message: _Optional[_Union[RunnerMessage, _Mapping]] = ...) -> None: ...

class RunnerHello(_message.Message):
    __slots__ = ("name", "agents", "slots", "labels", "resume", "capabilities")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    agents: _containers.RepeatedScalarFieldContainer[str]
    slots: int
    labels: _containers.ScalarMap[str, str]
    resume: _containers.RepeatedScalarFieldContainer[str]
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., agents: _Optional[_Iterable[str]] = ..., slots: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., resume: _Optional[_Iterable[str]] = ..., capabilities: _Optional[_Iterable[str]] = ...) -> None: ...

class RunnerMessage(_message.Message):
    __slots__ = ("worker_id", "lease_token", "message_id", "text", "interrupt")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    lease_token: str
    message_id: str
    text: str
    interrupt: bool
    def __init__(self, worker_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., message_id: _Optional[str] = ..., text: _Optional[str] = ..., interrupt: _Optional[bool] = ...) -> None: ...

class RunnerMessageDelivered(_message.Message):
    __slots__ = ("worker_id", "lease_token", "message_id")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    lease_token: str
    message_id: str
    def __init__(self, worker_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class RunnerInputRequired(_message.Message):
    __slots__ = ("worker_id", "lease_token", "question")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    lease_token: str
    question: str
    def __init__(self, worker_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., question: _Optional[str] = ...) -> None: ...

class RunnerWelcome(_message.Message):
    __slots__ = ("runner_id", "heartbeat_interval", "lease")
    RUNNER_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    runner_id: str
    heartbeat_interval: _duration_pb2.Duration
    lease: _duration_pb2.Duration
    def __init__(self, runner_id: _Optional[str] = ..., heartbeat_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RunnerAssignment(_message.Message):
    __slots__ = ("worker_id", "lease_token", "spec", "worker_token", "deadline", "resume")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    WORKER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    lease_token: str
    spec: WorkerSpec
    worker_token: str
    deadline: _timestamp_pb2.Timestamp
    resume: RunnerResume
    def __init__(self, worker_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., spec: _Optional[_Union[WorkerSpec, _Mapping]] = ..., worker_token: _Optional[str] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resume: _Optional[_Union[RunnerResume, _Mapping]] = ...) -> None: ...

class RunnerResume(_message.Message):
    __slots__ = ("previous_worker_id", "session_ref")
    PREVIOUS_WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_REF_FIELD_NUMBER: _ClassVar[int]
    previous_worker_id: str
    session_ref: str
    def __init__(self, previous_worker_id: _Optional[str] = ..., session_ref: _Optional[str] = ...) -> None: ...

class RunnerAccepted(_message.Message):
    __slots__ = ("worker_id", "lease_token")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    lease_token: str
    def __init__(self, worker_id: _Optional[str] = ..., lease_token: _Optional[str] = ...) -> None: ...

class RunnerProgress(_message.Message):
    __slots__ = ("worker_id", "lease_token", "kind", "text", "data_json")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    lease_token: str
    kind: ProgressKind
    text: str
    data_json: str
    def __init__(self, worker_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., kind: _Optional[_Union[ProgressKind, str]] = ..., text: _Optional[str] = ..., data_json: _Optional[str] = ...) -> None: ...

class RunnerFinished(_message.Message):
    __slots__ = ("worker_id", "lease_token", "session_ref", "completed", "failed", "canceled", "rejected")
    class Completed(_message.Message):
        __slots__ = ("result",)
        RESULT_FIELD_NUMBER: _ClassVar[int]
        result: str
        def __init__(self, result: _Optional[str] = ...) -> None: ...
    class Failed(_message.Message):
        __slots__ = ("error", "exit_code")
        ERROR_FIELD_NUMBER: _ClassVar[int]
        EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
        error: str
        exit_code: int
        def __init__(self, error: _Optional[str] = ..., exit_code: _Optional[int] = ...) -> None: ...
    class Canceled(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class Rejected(_message.Message):
        __slots__ = ("reason",)
        REASON_FIELD_NUMBER: _ClassVar[int]
        reason: str
        def __init__(self, reason: _Optional[str] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_REF_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    CANCELED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    lease_token: str
    session_ref: str
    completed: RunnerFinished.Completed
    failed: RunnerFinished.Failed
    canceled: RunnerFinished.Canceled
    rejected: RunnerFinished.Rejected
    def __init__(self, worker_id: _Optional[str] = ..., lease_token: _Optional[str] = ..., session_ref: _Optional[str] = ..., completed: _Optional[_Union[RunnerFinished.Completed, _Mapping]] = ..., failed: _Optional[_Union[RunnerFinished.Failed, _Mapping]] = ..., canceled: _Optional[_Union[RunnerFinished.Canceled, _Mapping]] = ..., rejected: _Optional[_Union[RunnerFinished.Rejected, _Mapping]] = ...) -> None: ...

class RunnerHeartbeat(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RunnerCancel(_message.Message):
    __slots__ = ("worker_id", "reason")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    reason: str
    def __init__(self, worker_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RunnerRejected(_message.Message):
    __slots__ = ("worker_id", "reason", "code")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    reason: str
    code: str
    def __init__(self, worker_id: _Optional[str] = ..., reason: _Optional[str] = ..., code: _Optional[str] = ...) -> None: ...

"""A connector server written with a third-party SDK (PyPI `mcp` 2.x), for the
tests: it declares a scheduled prompt through `_meta`, to show the marker is
read from any SDK, not only rmcp. (`MCPServer`'s decorators cannot set a
prompt's `_meta`, so this uses the low-level `Server`.)

Serves MCP over streamable HTTP at http://127.0.0.1:<port>/mcp.

Usage:
    python server.py [PORT] [--stateless] [--json-response]
    PORT may also come from env MCP_PORT (argv wins); 0 (default) = pick a free port.

Readiness: once the listener is bound *and* the ASGI lifespan (session manager)
is running, one line is printed to stdout and flushed:
    READY http://127.0.0.1:<port>/mcp
SIGTERM/SIGINT shut it down gracefully.

Prompts:
    daily_digest  (arg `topic`, required)  _meta["ai.nimblebrain/scheduled-prompts"] = {...}
    plain         (no args, no _meta)
Tools:
    search(query: str, required), fetch(url: str, required)
Errors: unknown prompt / missing required prompt arg / unknown tool ->
    JSON-RPC error -32602 (INVALID_PARAMS).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import anyio
import uvicorn
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

HOST = "127.0.0.1"
PATH = "/mcp"
MARKER_KEY = "ai.nimblebrain/scheduled-prompts"
MARKER_VALUE: dict[str, Any] = {
    "version": 1,
    "schedule": {"cron": "0 8 * * *", "timezone": "Europe/Berlin"},
    "tools": ["search"],
    "limits": {"max_turns": 4},
    "budget": {"max_usd_per_run": 0.1, "max_usd_per_month": 2.0},
}

PROMPTS: list[types.Prompt] = [
    types.Prompt(
        name="daily_digest",
        title="Daily digest",
        description="Summarise today's news about a topic.",
        arguments=[
            types.PromptArgument(name="topic", description="Topic to digest", required=True),
        ],
        # field is `meta`, serialised as `_meta` (alias); populate_by_name=True so either works
        _meta={MARKER_KEY: MARKER_VALUE},
    ),
    types.Prompt(
        name="plain",
        description="A plain prompt without scheduling metadata.",
        arguments=[],
    ),
]

TOOLS: list[types.Tool] = [
    types.Tool(
        name="search",
        description="Search for documents matching a query (canned results).",
        input_schema={
            "type": "object",
            "properties": {"query": {"type": "string", "description": "Search query"}},
            "required": ["query"],
        },
    ),
    types.Tool(
        name="fetch",
        description="Fetch a document by URL (canned content, no network).",
        input_schema={
            "type": "object",
            "properties": {"url": {"type": "string", "description": "URL to fetch"}},
            "required": ["url"],
        },
    ),
]


def _text(s: str) -> types.TextContent:
    return types.TextContent(type="text", text=s)


async def list_prompts(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=PROMPTS)


async def get_prompt(ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams) -> types.GetPromptResult:
    args = params.arguments or {}
    if params.name == "daily_digest":
        topic = args.get("topic")
        if not topic:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message="Missing required argument: topic",
                data={"prompt": "daily_digest", "missing": ["topic"]},
            )
        return types.GetPromptResult(
            description="Daily digest",
            messages=[
                types.PromptMessage(
                    role="user",
                    content=_text(f"Search for today's news about {topic} and write a short digest."),
                )
            ],
        )
    if params.name == "plain":
        return types.GetPromptResult(
            description="Plain prompt",
            messages=[types.PromptMessage(role="user", content=_text("Say hello."))],
        )
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    if params.name == "search":
        query = args.get("query")
        if not isinstance(query, str):
            return types.CallToolResult(content=[_text("search: `query` (string) is required")], is_error=True)
        return types.CallToolResult(
            content=[_text(f"results for {query!r}: [1] https://example.invalid/a [2] https://example.invalid/b")],
            structured_content={"query": query, "results": ["https://example.invalid/a", "https://example.invalid/b"]},
        )
    if params.name == "fetch":
        url = args.get("url")
        if not isinstance(url, str):
            return types.CallToolResult(content=[_text("fetch: `url` (string) is required")], is_error=True)
        return types.CallToolResult(content=[_text(f"content of {url}: lorem ipsum")])
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")


server: Server[Any] = Server(
    "python-digest",
    version="0.1.0",
    on_list_prompts=list_prompts,
    on_get_prompt=get_prompt,
    on_list_tools=list_tools,
    on_call_tool=call_tool,
)


class _ReadyServer(uvicorn.Server):
    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and self.servers:
            port = self.servers[0].sockets[0].getsockname()[1]
            print(f"READY http://{HOST}:{port}{PATH}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", nargs="?", type=int, default=int(os.environ.get("MCP_PORT", "0")))
    ap.add_argument("--stateless", action="store_true", help="stateless streamable HTTP (no Mcp-Session-Id)")
    ap.add_argument("--json-response", action="store_true", help="answer POSTs with application/json, not SSE")
    ns = ap.parse_args()

    app = server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=ns.stateless,
        json_response=ns.json_response,
        host=HOST,  # enables DNS-rebinding protection allowing Host 127.0.0.1:* / localhost:*
    )
    config = uvicorn.Config(app, host=HOST, port=ns.port, log_level="warning", lifespan="on")
    anyio.run(_ReadyServer(config).serve)


if __name__ == "__main__":
    main()
    sys.exit(0)

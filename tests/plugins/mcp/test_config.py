"""``[[tools.mcp]]`` settings, the names tools get, and MCP results as the model reads them."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import types

from kernel import KernelError, McpServerSettings, ToolFailure
from kernel.settings import drop_masked_secrets, load_settings, mask_secrets, to_data, validate
from plugins.mcp.config import MAX_TOOL_NAME, describe, namespace, needs_approval, offered, prefixes, tool_name
from plugins.mcp.results import result_text

from .mcp_server import PIXEL

MODEL_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def test_the_table_loads_from_toml_and_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    path.write_text(
        '[[tools.mcp]]\nname = "files"\ncommand = "npx"\nargs = ["-y", "server"]\nenv = { TOKEN = "t-1234567890" }\n'
        'approved_tools = ["read"]\n\n[[tools.mcp]]\nname = "docs"\nurl = "https://docs.example/mcp"\n'
        'headers = { Authorization = "Bearer abcdefghijkl" }\nrequire_approval = false\ntools = ["search"]\n'
    )
    files, docs = load_settings(path, env={}).tools.mcp
    assert (files.command, files.args, files.env, files.require_approval) == ("npx", ["-y", "server"], {"TOKEN": "t-1234567890"}, True)
    assert (docs.url, docs.headers, docs.require_approval, docs.tools) == ("https://docs.example/mcp", {"Authorization": "Bearer abcdefghijkl"}, False, ["search"])
    with pytest.raises(KernelError) as bad:
        validate({"tools": {"mcp": [{"name": "a__b", "command": "x"}, {"name": "c", "url": "ftp://h"}, {"name": "c"}, {"name": "d", "command": "x", "url": "http://h"}]}})
    message = bad.value.message
    assert "'a__b': a name is 1-32 letters" in message and "the name 'c' is used twice" in message
    assert "'c': url must start with http:// or https://" in message
    assert "'c': give either command" in message and "'d': give either command" in message
    with pytest.raises(KernelError, match="unknown field"):
        validate({"tools": {"mcp": [{"name": "x", "command": "y", "comand": "typo"}]}})


def test_headers_and_env_are_masked_and_a_masked_one_sent_back_keeps_its_value() -> None:
    settings = validate({"tools": {"mcp": [{"name": "docs", "url": "http://h/mcp", "headers": {"Authorization": "Bearer abcdefghijkl"}},
                                           {"name": "fs", "command": "x", "env": {"GITHUB_TOKEN": "ghp_0123456789"}}]}})
    view = mask_secrets(to_data(settings))
    docs, fs = view["tools"]["mcp"]
    assert docs["headers"] == {"Authorization": "…ijkl"} and fs["env"] == {"GITHUB_TOKEN": "…6789"}
    docs["headers"]["X-Extra"] = "new"
    patch = drop_masked_secrets({"tools": {"mcp": view["tools"]["mcp"]}}, to_data(settings))
    kept = validate(patch).tools.mcp
    assert kept[0].headers == {"Authorization": "Bearer abcdefghijkl", "X-Extra": "new"} and kept[1].env == {"GITHUB_TOKEN": "ghp_0123456789"}
    # Outside a list a mask is still dropped (tables merge: the stored value stays), never copied.
    assert drop_masked_secrets({"provider": {"openai": {"api_key": "sk-…abcd"}}}, to_data(settings)) == {"provider": {"openai": {}}}


def test_names_offered_to_the_model() -> None:
    assert namespace("files") == "files" and namespace("My files (work)") == "My_files_work" and namespace("__") == "mcp"
    assert prefixes(["docs", "docs", "a b", "a_b"]) == ["docs", "docs_2", "a_b", "a_b_2"]
    assert tool_name("docs", "search") == "docs__search" and tool_name("docs", "files/read.v2") == "docs__files_read_v2"
    long_one = tool_name("docs", "x" * 100)
    assert len(long_one) == MAX_TOOL_NAME and long_one != tool_name("docs", "x" * 101)
    assert tool_name("docs", "a.b", taken=["docs__a_b"]) != "docs__a_b"


@given(st.text(max_size=60), st.text(max_size=200))
def test_every_name_is_one_the_model_apis_take(server: str, tool: str) -> None:
    assert MODEL_TOOL_NAME.match(tool_name(namespace(server), tool))


def test_what_a_server_s_settings_decide() -> None:
    server = McpServerSettings(name="fs", command="npx", args=["-y", "srv"], env={"KEY": "secret"}, approved_tools=["read"], tools=["read", "write"])
    assert offered(server, "read") and offered(server, "write") and not offered(server, "delete")
    assert not needs_approval(server, "read") and needs_approval(server, "write")
    assert not needs_approval(msgspec.structs.replace(server, require_approval=False), "write")
    assert describe(server) == "npx -y srv"
    assert describe(McpServerSettings(name="d", url="https://user:pw@h.example:8443/mcp?key=k")) == "https://h.example:8443/mcp"


def result(*content: types.ContentBlock, structured: object = None, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=list(content), structured_content=structured, is_error=error)


def test_results_as_the_model_reads_them() -> None:
    text = types.TextContent(type="text", text="a red pixel")
    image = types.ImageContent(type="image", data=PIXEL, mime_type="image/png")
    assert result_text(result(text, image)) == "a red pixel\n[image image/png, 68 bytes, not shown to the model]"
    assert result_text(result(structured={"city": "Oslo", "celsius": 21})) == '{"city":"Oslo","celsius":21}'
    assert result_text(result(types.TextContent(type="text", text="21"), structured={"result": 21})) == "21"
    embedded = types.EmbeddedResource(type="resource", resource=types.TextResourceContents(uri="file:///a.txt", text="hello"))
    blob = types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(uri="file:///b.bin", blob="AAEC", mime_type="application/x"))
    link = types.ResourceLink(type="resource_link", uri="file:///c.txt", name="c.txt")
    assert result_text(result(embedded, blob, link)) == (
        "[resource file:///a.txt]\nhello\n[resource file:///b.bin application/x, 3 bytes, not shown to the model]\n[resource link c.txt: file:///c.txt]"
    )
    assert result_text(result()) == "(no output)"
    with pytest.raises(ToolFailure, match=r"^no such city$"):
        result_text(result(types.TextContent(type="text", text="no such city"), error=True))
    with pytest.raises(ToolFailure, match="without saying why"):
        result_text(result(error=True))

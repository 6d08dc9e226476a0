"""The document's examples run unchanged apart from the import line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from anyio.from_thread import start_blocking_portal

from tests.fakes.openai_server import Reply, ToolCallScript, fake_openai_server

from . import example_core
from ._support import run_program

# 1. PROCESS_MESSAGE (followed by the EXECUTE_TOOL snippet, which uses its client).
PROCESS_MESSAGE = '''
from core import BackendServer, BackendClient

server = BackendServer(db_path="graph_memory.db", use_embedded_db=True)
server.start(api_key="your-api-key")

client = BackendClient(server)
result = client.process_message("你好，请记住我的名字是小明")

if result.get("success"):
    # 响应数据在 data 字段中
    print(result["data"]["content"])
    # 工具调用: result["data"]["tool_calls"]
    # 被拒绝的工具: result["data"]["rejected_tools"]

result = client.execute_tool("memory_recall", {"query_intent": "用户信息"})
'''

# 2. 基础使用
BASIC = '''
from core import BackendServer, BackendClient

# 1. 创建并启动后端
# config_file 默认: ~/.trulymem/config.json
server = BackendServer(
    db_path="graph_memory.db",
    use_embedded_db=True,
    config_file=None  # 可选，自定义配置路径
)
server.start(
    api_key="your-api-key",
    base_url="https://api.deepseek.com",
    model="deepseek-chat"  # 可选，模型名称
)

# 2. 创建客户端
client = BackendClient(server)

# 3. 发送消息
result = client.process_message("你好")
if result.get("success"):
    print(result["content"])

# 4. 关闭
client.shutdown()
'''

# 3. 使用 Packet 协议
PACKETS = '''
import queue
from core import BackendServer, Packet, PacketType

server = BackendServer(config_file=None)
server.start(api_key="your-key", model="deepseek-chat")

# 创建请求包
response_queue = queue.Queue()
packet = Packet(
    id="req-001",
    type=PacketType.PROCESS_MESSAGE,
    body={"user_input": "你好"},
    response_queue=response_queue
)

# 发送请求
result = server.send(packet)
print(result.body)

# 关闭
server.shutdown()
'''


def test_examples_against_the_echo_model(program_loop: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ns = run_program(PROCESS_MESSAGE)
    assert ns["result"]["success"] is True  # memory_recall ran (nothing remembered by an echo)
    run_program(BASIC)
    run_program(PACKETS)
    assert capsys.readouterr().out.splitlines() == [
        "echo: 你好，请记住我的名字是小明",
        "echo: 你好",
        "{'success': True, 'data': {'success': True, 'content': 'echo: 你好', 'tool_calls': [], 'rejected_tools': []}}",
    ]
    assert (tmp_path / "graph_memory.db").exists()


def test_examples_against_an_openai_compatible_server(program_loop: str, capsys: pytest.CaptureFixture[str]) -> None:
    remember = json.dumps({"subject": "用户", "relation": "名字是", "object": "小明"}, ensure_ascii=False)
    script = [Reply(text="", tool_calls=[ToolCallScript(name="memory_commit", arguments=remember)]), Reply(text="好的，小明，我记住了。")]
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(fake_openai_server(script)) as fake:
        example_core.UPSTREAM = fake.base_url
        try:
            ns = run_program(PROCESS_MESSAGE)
            answer = ns["server"].process_message("again")  # the fake's last reply repeats
            run_program(BASIC)
            run_program(PACKETS)
        finally:
            example_core.UPSTREAM = None
        assert json.loads(ns["result"]["data"]["result"])["facts"][0]["object"] == "小明"
        assert answer["data"]["content"] == "好的，小明，我记住了。"
        first = fake.requests[0]
        assert first["model"] == "deepseek-chat"
        assert "memory_commit" in {t["function"]["name"] for t in first["tools"]}
        assert fake.headers[0]["authorization"] == "Bearer your-api-key"
        assert fake.requests[1]["messages"][-1]["role"] == "tool"
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["好的，小明，我记住了。", "好的，小明，我记住了。"]
    assert out[2].startswith("{'success': True, 'data': {'success': True, 'content': '好的，小明，我记住了。'")

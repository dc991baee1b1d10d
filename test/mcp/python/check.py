"""MCP Inspector-style check of Cubby's MCP tools with the official Python
`mcp` package: over stdio (`cubby mcp`) and over streamable HTTP (/mcp) it
lists the tools with their schemas, runs `x = 1` then `x + 1` in the session's
sandbox, gets a chart as PNG image content, writes and reads a file and runs a
command. Run by test/mcp/python_test.go; exits non-zero on the first failure.

Environment: CUBBY_URL (http://host:port of cubby serve), CUBBY_API_KEY,
CUBBY_BIN (the cubby binary, for stdio).
"""

import asyncio
import base64
import os
import sys

import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

TOOLS = {
    "run_code", "run_command", "command_output", "command_kill", "file_read", "file_write", "file_list",
    "sandbox_create", "sandbox_list", "sandbox_info", "sandbox_kill", "sandbox_set_timeout",
    "sandbox_pause", "sandbox_resume", "get_url", "template_list",
}


def check(cond, what):
    if not cond:
        raise AssertionError(what)


async def call(session, name, args):
    res = await session.call_tool(name, args)
    texts = "".join(c.text for c in res.content if c.type == "text")
    check(not res.is_error, f"{name}({args}) failed: {texts}")
    return res, texts


async def scenario(session, transport):
    init = await session.initialize()
    check(init.server_info.name == "cubby", f"server info {init.server_info}")
    tools = (await session.list_tools()).tools
    names = {t.name for t in tools}
    check(TOOLS <= names, f"missing tools: {TOOLS - names}")
    for t in tools:
        check(t.description and t.input_schema.get("type") == "object", f"tool {t.name} lacks a description or schema")

    res, _ = await call(session, "run_code", {"code": "x = 1"})
    sandbox = res.structured_content["sandbox"]
    res, texts = await call(session, "run_code", {"code": "x + 1"})
    results = res.structured_content["results"]
    check(results and results[0]["text"] == "2", f"x + 1 gave {results}")
    check(res.structured_content["sandbox"] == sandbox, "the cells ran in different sandboxes")

    res, _ = await call(session, "run_code", {"code": "import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])\nplt.show()"})
    images = [c for c in res.content if c.type == "image"]
    check(images and images[0].mime_type == "image/png", f"no PNG image in {[c.type for c in res.content]}")
    check(base64.b64decode(images[0].data).startswith(b"\x89PNG"), "image data is not a PNG")

    await call(session, "file_write", {"path": "py.txt", "content": f"from python over {transport}"})
    res, texts = await call(session, "file_read", {"path": "py.txt"})
    check(texts == f"from python over {transport}", f"file_read gave {texts!r}")

    res, _ = await call(session, "run_command", {"command": "echo $((6*7))"})
    check(res.structured_content["stdout"] == "42\n" and res.structured_content["exit_code"] == 0,
          f"run_command gave {res.structured_content}")

    res = await session.call_tool("run_code", {"code": "1", "no_such_argument": 1})
    check(res.is_error and "no_such_argument" in res.content[0].text, "an unknown argument was not named")
    print(f"python mcp client over {transport}: ok (sandbox {sandbox}, {len(tools)} tools)")


async def over_stdio():
    env = {"E2B_API_URL": os.environ["CUBBY_URL"], "E2B_SANDBOX_URL": os.environ["CUBBY_URL"],
           "E2B_API_KEY": os.environ["CUBBY_API_KEY"]}
    params = StdioServerParameters(command=os.environ["CUBBY_BIN"], args=["mcp"], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await scenario(session, "stdio")


async def over_http():
    headers = {"Authorization": "Bearer " + os.environ["CUBBY_API_KEY"]}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120.0)) as http:
        async with streamable_http_client(os.environ["CUBBY_URL"] + "/mcp", http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await scenario(session, "streamable HTTP")


async def main():
    await over_stdio()
    await over_http()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except AssertionError as e:
        print("FAIL:", e, file=sys.stderr)
        sys.exit(1)

"""Talks to a server's /mcp endpoint with the official MCP Python client
(PyPI's `mcp`), and asks the same questions of its REST routes.

Reads a JSON job on stdin:
  {"base": "http://127.0.0.1:PORT", "token": "..." or null,
   "calls": [{"tool": "get_job", "args": {"job_id": "X"},
              "rest": {"method": "GET", "path": "/api/job/X", "body": null}}]}
Writes one JSON object: the tools the server lists (name, description,
input schema) and, per call, the tool's answer (its text blocks and
whether it is an error) beside the REST route's status and body.
"""

import asyncio
import json
import sys
import urllib.error
import urllib.request

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def rest(base, token, call):
    spec = call["rest"]
    body = spec.get("body")
    request = urllib.request.Request(
        base + spec["path"],
        data=body.encode() if body is not None else None,
        method=spec["method"],
    )
    if body is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def main():
    job = json.load(sys.stdin)
    base, token = job["base"], job.get("token")
    headers = {"Authorization": "Bearer " + token} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=120)
    out = {"tools": [], "calls": []}
    async with http, Client(streamable_http_client(base + "/mcp", http_client=http)) as client:
        listed = await client.list_tools()
        for tool in listed.tools:
            out["tools"].append(
                {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.input_schema,
                }
            )
        for call in job["calls"]:
            result = await client.call_tool(call["tool"], call["args"])
            texts = [block.text for block in result.content if block.type == "text"]
            status, body = rest(base, token, call)
            out["calls"].append(
                {
                    "tool": call["tool"],
                    "texts": texts,
                    "is_error": bool(result.is_error),
                    "rest_status": status,
                    "rest_body": body,
                }
            )
    json.dump(out, sys.stdout)


asyncio.run(main())

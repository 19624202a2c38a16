"""Calls a server's routes and validates each request and answer against
the server's own OpenAPI description (GET /api/openapi.json) with
openapi-core, an OpenAPI validator independent of the server's code.

Reads a JSON job on stdin:
  {"base": "http://127.0.0.1:PORT",
   "calls": [{"method": "GET", "path": "/api/job/X", "pattern": "/api/job/{job_id}",
              "view_args": {"job_id": "X"}, "query": {}, "body": null,
              "content_type": null, "accept": null, "replace_body": null}]}
`replace_body`, when set, is validated in place of the real answer (a
control: a wrong body must fail). Writes a JSON list, one result per call:
  {"method", "pattern", "status", "content_type", "errors": [...]}.
"""

import json
import sys
import urllib.error
import urllib.parse
import urllib.request

from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse


def fetch(base, call):
    query = call.get("query") or {}
    url = base + call["path"]
    if query:
        url += "?" + urllib.parse.urlencode(query)
    body = call.get("body")
    data = body.encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=call["method"])
    if call.get("content_type"):
        request.add_header("Content-Type", call["content_type"])
    if call.get("accept"):
        request.add_header("Accept", call["accept"])
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.headers, answer.read(), data
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read(), data


def describe(error):
    parts = [f"{type(error).__name__}: {error}"]
    for inner in getattr(error, "schema_errors", None) or []:
        parts.append(str(inner.message))
    cause = error.__cause__
    while cause is not None:
        parts.append(f"{type(cause).__name__}: {cause}")
        for inner in getattr(cause, "schema_errors", None) or []:
            parts.append(str(inner.message))
        cause = cause.__cause__
    return " | ".join(parts)[:2000]


def main():
    job = json.load(sys.stdin)
    base = job["base"]
    with urllib.request.urlopen(base + "/api/openapi.json", timeout=60) as answer:
        spec = json.load(answer)
    api = OpenAPI.from_dict(spec)
    results = []
    for call in job["calls"]:
        status, headers, body, data = fetch(base, call)
        # As sent, parameters included (a description may name them).
        content_type = (headers.get("Content-Type") if headers else None) or "application/octet-stream"
        if call.get("replace_body") is not None:
            body = call["replace_body"].encode()
        request = MockRequest(
            base,
            call["method"].lower(),
            call["path"],
            path_pattern=call["pattern"],
            args=call.get("query") or {},
            view_args=call.get("view_args") or {},
            data=data,
            content_type=call.get("content_type") or "application/json",
        )
        response = MockResponse(
            body,
            status_code=status,
            headers={k.lower(): v for k, v in headers.items()},
            content_type=content_type,
        )
        errors = []
        try:
            api.validate_request(request)
        except Exception as error:  # every kind of failure is reported
            errors.append("request: " + describe(error))
        try:
            api.validate_response(request, response)
        except Exception as error:
            errors.append("answer: " + describe(error))
        results.append(
            {
                "method": call["method"],
                "pattern": call["pattern"],
                "status": status,
                "content_type": content_type,
                "errors": errors,
            }
        )
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()

"""A stand-in for the Hugging Face Hub's HTTP API on 127.0.0.1, for tests (no network here).

It answers the calls huggingface_hub's ``HfApi`` makes to publish a dataset in one commit —
``whoami-v2``, repo info, ``repos/create``, ``preupload`` (every file ``regular``: its bytes
travel inside the commit) and ``commit`` (NDJSON: a header line, then one line per file,
base64) — and keeps what a repo would show: the commits, each with its summary, description
and files. A commit is recorded only once its whole NDJSON body was received and parsed, as
the Hub makes a commit all or nothing.

``on_preupload`` (called with the paths announced) lets a test change the world between the
two calls, e.g. remove a file the client is about to send.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class StandInHubState:
    """What the stand-in Hub holds and saw."""

    token: str
    repos: set[str] = field(default_factory=set)
    commits: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    on_preupload: Callable[[list[str]], None] | None = None


def _handler(state: StandInHubState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _reply(self, code: int, body: dict[str, Any], error: str | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if error:
                self.send_header("X-Error-Code", error)
                self.send_header("X-Error-Message", body.get("error", error))
            self.end_headers()
            self.wfile.write(data)

        def _authorised(self) -> bool:
            if self.headers.get("Authorization") == f"Bearer {state.token}":
                return True
            self._reply(401, {"error": "Invalid credentials in Authorization header"})
            return False

        def _repo(self) -> str:  # /api/datasets/<owner>/<name>[/...]
            parts = self.path.split("?")[0].split("/")
            return f"{parts[3]}/{parts[4]}"

        def do_GET(self) -> None:
            state.requests.append(("GET", self.path))
            if not self._authorised():
                return
            if self.path.startswith("/api/whoami-v2"):
                return self._reply(200, {"name": "hed-lab", "type": "user"})
            if self.path.startswith("/api/datasets/"):
                repo = self._repo()
                if repo not in state.repos:
                    return self._reply(404, {"error": "Repository not found"}, "RepoNotFound")
                return self._reply(200, {"id": repo, "sha": "0" * 40, "private": True})
            self._reply(404, {"error": "not found"})

        def do_POST(self) -> None:
            state.requests.append(("POST", self.path))
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                data = gzip.decompress(data)
            if not self._authorised():
                return
            if self.path.startswith("/api/repos/create"):
                body = json.loads(data)
                repo = f"{body.get('organization') or 'hed-lab'}/{body['name']}"
                state.repos.add(repo)
                return self._reply(200, {"url": f"{self._base()}/datasets/{repo}"})
            if "/preupload/" in self.path:
                paths = [f["path"] for f in json.loads(data)["files"]]
                if state.on_preupload:
                    state.on_preupload(paths)
                files = [{"path": p, "uploadMode": "regular", "shouldIgnore": False} for p in paths]
                return self._reply(200, {"files": files})
            if "/commit/" in self.path:
                return self._commit(data)
            self._reply(404, {"error": "not found"})

        def _base(self) -> str:
            return f"http://127.0.0.1:{self.server.server_address[1]}"

        def _commit(self, data: bytes) -> None:
            lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
            header = next(line["value"] for line in lines if line["key"] == "header")
            files = {
                line["value"]["path"]: base64.b64decode(line["value"]["content"])
                for line in lines
                if line["key"] == "file"
            }
            repo = self._repo()
            revision = self.path.split("/commit/")[1].split("?")[0]
            oid = f"{len(state.commits) + 1:040x}"
            state.commits.append({"repo": repo, "revision": revision, **header, "files": files})
            url = f"{self._base()}/datasets/{repo}/commit/{oid}"
            self._reply(200, {"commitUrl": url, "commitOid": oid})

    return Handler


@contextmanager
def stand_in_hub(token: str = "hf_stand_in_token") -> Iterator[tuple[str, StandInHubState]]:
    """Run the stand-in Hub on a free port of 127.0.0.1; yield ``(endpoint URL, state)``."""
    state = StandInHubState(token=token)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()

"""docs/protocol.schema.json against the server: a session that calls
every method and hears every notification, each message checked against
the schema; the schema names exactly the methods the server has, and both
refuse a parameter neither knows."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import subprocess
import threading
import queue
from typing import Any, Dict, Iterator, List

import pytest

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is installed by scripts/test")

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "protocol.schema.json").read_text())
DSH = os.environ.get("DSH_BIN", str(ROOT / "target" / "debug" / "dsh"))


def validator(pointer: str) -> Any:
    """A validator for the schema part at `pointer`, its $refs resolved
    against the whole document."""
    return jsonschema.Draft202012Validator({**SCHEMA, "$ref": pointer})


class Server:
    """`dsh serve --stdio`, with every message it sends checked."""

    def __init__(self) -> None:
        if not os.path.exists(DSH):
            pytest.skip(f"no {DSH}: scripts/test builds it (cargo build -p dsh-cli --bin dsh)")
        self.proc = subprocess.Popen([DSH, "serve", "--stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.lines: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        self.notes: List[Dict[str, Any]] = []
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def send(self, message: Dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def answer(self, id: int) -> Dict[str, Any]:
        while True:
            m = self.lines.get(timeout=60)
            if "method" in m:
                validator(f"#/notifications/{m['method']}/params").validate(m["params"])
                self.notes.append(m)
            elif m.get("id") == id:
                return m

    def call(self, method: str, **params: Any) -> Dict[str, Any]:
        """Checks the params against the schema, sends them, checks the
        answer (a result against the method's, an error against $defs)."""
        validator(f"#/methods/{method}/params").validate(params)
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        answer = self.answer(self.next_id)
        if "error" in answer:
            validator("#/$defs/error").validate(answer["error"])
        else:
            validator(f"#/methods/{method}/result").validate(answer["result"])
        return answer

    def ok(self, method: str, **params: Any) -> Any:
        answer = self.call(method, **params)
        assert "result" in answer, f"{method}: {answer}"
        return answer["result"]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=60)


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


def test_the_schema_is_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_every_method_and_notification_matches_the_schema(server: Server) -> None:
    init = server.ok(
        "initialize",
        protocol_version=1,
        config={"grace_ms": 500, "limits": {"open_files": 4096}},
        client={"name": "schema-test", "version": "1"},
        output_notifications=True,
    )
    assert set(init["methods"]) == set(SCHEMA["methods"]), "the schema and the server name different methods"
    assert set(init["notifications"]) == set(SCHEMA["notifications"])

    spec = server.ok("resolve", request={
        "command": "echo out; echo err >&2; exit 3", "workdir": "/", "timeout_ms": 20000,
        "stdout_max_bytes": 1000, "env": {"A": "b"}, "dsh_env": {"DSH_X": "y"}, "owner": "me",
        "sandbox_policy": {"mode": "danger-full-access", "network": "allow"}, "on_expiry": "kill",
    })["spec"]
    result = server.ok("run", spec=spec, run_id="r1")["result"]
    assert (result["exit_code"], result["stdout"]["text"]) == (3, "out\n")
    assert server.ok("cancel", run_id="r1") == {"cancelled": False}
    streamed = server.ok("run", spec=spec, run_id="r2", stream=True)
    assert streamed["stream_ends"] == {"stdout": 4, "stderr": 4}

    with_stdin = server.ok("resolve", request={"command": "cat", "stdin_base64": base64.b64encode(b"\x00\xff").decode()})["spec"]
    assert with_stdin["stdin_base64"] == "AP8="
    piped = server.ok("resolve", request={"command": "cat; echo end", "stdin_pipe": True})["spec"]
    p = server.ok("start", spec=piped, id="schema-1")["process"]
    server.ok("write_stdin", id=p["id"], data="text ")
    server.ok("write_stdin", id=p["id"], data_base64=base64.b64encode(b"bytes\n").decode())
    assert server.ok("close_stdin", id=p["id"]) == {"closed": True}
    assert server.ok("wait", id=p["id"], timeout_ms=30000)["settled"] is True
    assert server.ok("read_from", id=p["id"], stream="stdout", **{"from": 0})["text"] == "text bytes\nend\n"
    assert server.ok("read_output", id=p["id"])["delta"] == "text bytes\nend\n"
    assert server.ok("owner_of", id=p["id"]) == {"owner": None}
    assert server.ok("get", id=p["id"])["process"]["status"] == "completed"

    sleeper = server.ok("resolve", request={"command": "sleep 300"})["spec"]
    s = server.ok("start", spec=sleeper)["process"]
    assert server.ok("kill", id=s["id"]) == {"began": True}
    server.ok("wait", id=s["id"])
    assert len(server.ok("list")["processes"]) == 2
    server.ok("forget", id=s["id"])
    server.ok("reconfigure", config={"grace_ms": 700})
    # A run handed over at its timeout, under the client's id.
    spec = server.ok("resolve", request={"command": "sleep 300", "timeout_ms": 200, "on_expiry": "background"})["spec"]
    handed = server.ok("run", spec=spec, background_id="schema-2")["result"]
    assert handed["background_id"] == "schema-2"
    server.ok("kill", id="schema-2")
    server.ok("wait", id="schema-2")

    # A terminal session, every call.
    t = server.ok("terminal_spawn", request={"argv": ["bash", "--norc", "--noprofile", "-i"], "rows": 24, "cols": 80},
                  id="t1")["terminal"]
    assert server.ok("terminal_wait_input_waiting", id=t["id"], timeout_ms=20000)["waiting"] is True
    server.ok("terminal_write", id=t["id"], data="echo hi\n")
    server.ok("terminal_resize", id=t["id"], rows=30, cols=90)
    server.ok("terminal_inspect_foreground", id=t["id"])
    server.ok("terminal_signal_foreground", id=t["id"], signal="SIGINT")
    server.ok("terminal_write", id=t["id"], data_base64=base64.b64encode(b"exit 3\n").decode())
    assert server.ok("terminal_wait", id=t["id"], timeout_ms=30000)["exited"] is True
    server.ok("terminal_read", id=t["id"], wait_ms=100)
    server.ok("terminal_get", id=t["id"])
    server.ok("terminal_terminate", id=t["id"])

    # Errors of several kinds, each an error object of the schema's.
    for method, params in [
        ("resolve", {"request": {"command": "x", "timeout_ms": -1}}),
        ("read_output", {"id": "nope"}),
        ("write_stdin", {"id": p["id"], "data": "late"}),
        ("forget", {"id": "nope"}),
    ]:
        assert "error" in server.call(method, **params)
    server.ok("dispose")
    kinds = {n["method"] for n in server.notes}
    assert kinds == set(SCHEMA["notifications"]), f"heard {kinds}"


def test_a_parameter_neither_knows_is_refused_by_both(server: Server) -> None:
    server.ok("initialize", protocol_version=1)
    for method, schema in SCHEMA["methods"].items():
        params = {"zz_unknown": 1}
        assert not validator(f"#/methods/{method}/params").is_valid(params), f"the schema takes {method} {params}"
        server.next_id += 1
        server.send({"jsonrpc": "2.0", "id": server.next_id, "method": method, "params": params})
        answer = server.answer(server.next_id)
        assert answer.get("error", {}).get("code") in (-32602,), f"{method}: {answer}"

"""A fault-injecting HTTP proxy on 127.0.0.1 in front of moto_server.

Clients (the AWS adapter, the operator as a subprocess through ``AWS_ENDPOINT_URL``) talk to
:attr:`FaultProxy.endpoint_url`; the proxy forwards to moto and, on request:

- fails chosen API actions a number of times (``fail``): AWS's own throttling answer
  (:data:`THROTTLE`: EC2 503 RequestLimitExceeded, Auto Scaling 400 Throttling), HTTP 429
  (:data:`TOO_MANY`), a bare 503 (:data:`UNAVAILABLE`), a connection closed before the call
  reached moto (:data:`DROP_BEFORE`) or after moto acted (:data:`DROP_AFTER`), or a response
  held back after moto acted until the client's read timeout has long passed
  (:data:`DELAY_AFTER`): the call happened, the caller cannot know;
- is eventually consistent like a real cloud (``lag_seconds``): an instance is missing from
  every list (DescribeInstances, DescribeAutoScalingGroups, DescribeAutoScalingInstances)
  until ``lag_seconds`` after the proxy first saw it in moto, so a launch shows up late;
- keeps terminated instances listed like a real cloud (``terminated_listed_seconds``): an
  instance that leaves an Auto Scaling group stays in DescribeAutoScalingGroups and
  DescribeAutoScalingInstances, in lifecycle state ``Terminating``, for that long after the
  proxy first saw it gone (moto drops it at once; AWS walks it through Terminating,
  Terminating:Wait and Terminated first). EC2's DescribeInstances needs no help: moto lists
  terminated instances, as EC2 does for about an hour;
- answers a CreateFleet ClientToken it has seen with the first response and launches
  nothing, as EC2 does for at least 24 hours (moto does not).

It counts the requests that reached moto (:attr:`FaultProxy.reached_moto`), the faults it
injected (:attr:`FaultProxy.injected`) and when each request came (:attr:`FaultProxy.calls`).
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import json
import socket
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

THROTTLE = "throttle"
"""HTTP 400 Throttling (Auto Scaling, SQS) / 503 RequestLimitExceeded (EC2), as AWS sends them."""
TOO_MANY = "too_many"
"""HTTP 429 with a TooManyRequestsException body."""
UNAVAILABLE = "unavailable"
"""HTTP 503 with no body."""
DROP_BEFORE = "drop_before"
"""Close the connection without forwarding: the call did not happen."""
DROP_AFTER = "drop_after"
"""Forward to moto, then close the connection: the call happened, the client cannot know."""
DELAY_AFTER = "delay_after"
"""Forward to moto, then hold the response for ``delay_seconds`` (past the client's read
timeout) before closing: the call happened and the client timed out."""

ANY_ACTION = "*"
LISTING_ACTIONS = frozenset(
    {"DescribeInstances", "DescribeAutoScalingGroups", "DescribeAutoScalingInstances"}
)
"""Reads whose instance lists lag behind (``lag_seconds``)."""
_INSTANCE_LISTS = frozenset({"instancesSet", "Instances", "AutoScalingInstances"})
_INSTANCE_ID = frozenset({"instanceId", "InstanceId"})

_EC2_API_VERSION = "2016-11-15"
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"}


@dataclass
class Fault:
    action: str
    mode: str
    times: int


@dataclass
class _Member:
    element: ET.Element
    gone_since: float | None = None


@dataclass(frozen=True)
class Call:
    """One request the proxy received."""

    action: str
    at: float
    """time.monotonic() when it arrived."""
    fault: str | None


@dataclass
class FaultProxy:
    """HTTP proxy on 127.0.0.1 in front of moto that fails chosen actions a number of times."""

    upstream: str
    lag_seconds: float = 0.0
    terminated_listed_seconds: float = 0.0
    """How long an instance gone from its Auto Scaling group is still listed as Terminating."""
    delay_seconds: float = 30.0
    """How long DELAY_AFTER holds a response (longer than the client's read timeout)."""
    faults: list[Fault] = field(default_factory=list)
    reached_moto: Counter[str] = field(default_factory=Counter)
    """Requests forwarded to moto, by API action."""
    injected: Counter[str] = field(default_factory=Counter)
    """Faults injected, by API action."""
    calls: list[Call] = field(default_factory=list)
    fleet_tokens: dict[str, tuple[int, list[tuple[str, str]], bytes]] = field(default_factory=dict)
    """CreateFleet responses by ClientToken: EC2 answers a token it saw (for at least 24 h,
    even after the instances ended) with the first response and launches nothing; moto
    does not, so the proxy does."""
    first_seen: dict[str, float] = field(default_factory=dict)
    """Instance ID -> time.monotonic() when the proxy first saw it in moto."""
    group_members: dict[str, dict[str, _Member]] = field(default_factory=dict)
    """Auto Scaling group -> instance ID -> the member as last listed, and since when it is
    gone from moto's answer (None while listed)."""
    endpoint_url: str = ""
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)

    def fail(self, action: str, mode: str, times: int = 1) -> None:
        """Fail the next ``times`` requests of ``action`` (``"*"``: any action) with ``mode``."""
        with self._lock:
            self.faults.append(Fault(action, mode, times))

    def burst(self, actions: Iterable[str], modes: Iterable[str], times: int) -> None:
        """A throttling burst: each action fails ``times`` times, cycling through ``modes``."""
        cycle = list(modes)
        for action in actions:
            for index in range(times):
                self.fail(action, cycle[index % len(cycle)])

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def pending_faults(self, action: str) -> int:
        with self._lock:
            return sum(f.times for f in self.faults if f.action in (action, ANY_ACTION))

    def calls_of(self, action: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.action == action]

    def _take_fault(self, action: str) -> str | None:
        with self._lock:
            for fault in self.faults:
                if fault.action in (action, ANY_ACTION) and fault.times > 0:
                    fault.times -= 1
                    self.injected[action] += 1
                    return fault.mode
        return None

    def _record(self, action: str, fault: str | None) -> None:
        with self._lock:
            self.calls.append(Call(action, time.monotonic(), fault))

    def hide_young_instances(self, action: str, payload: bytes) -> bytes:
        """The response without instances younger than ``lag_seconds`` (first seen by us)."""
        if action not in LISTING_ACTIONS or not payload:
            return payload
        try:
            root = ET.fromstring(payload)
        except ET.ParseError:
            return payload
        now = time.monotonic()
        hidden = False
        for parent in root.iter():
            if _local(parent.tag) not in _INSTANCE_LISTS:
                continue
            for item in list(parent):
                instance_id = next(
                    (c.text for c in item if _local(c.tag) in _INSTANCE_ID and c.text), None
                )
                if instance_id is None:
                    continue
                with self._lock:
                    born = self.first_seen.setdefault(instance_id, now)
                if now - born < self.lag_seconds:
                    parent.remove(item)
                    hidden = True
        if not hidden:
            return payload
        _drop_empty_reservations(root)
        namespace = root.tag[1:].split("}", 1)[0] if root.tag.startswith("{") else ""
        if namespace:
            ET.register_namespace("", namespace)
        return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True))

    def keep_terminated_listed(self, action: str, request: bytes, payload: bytes) -> bytes:
        """The response with instances that left their Auto Scaling group less than
        ``terminated_listed_seconds`` ago put back, in lifecycle state Terminating."""
        if (
            action not in ("DescribeAutoScalingGroups", "DescribeAutoScalingInstances")
            or not payload
        ):
            return payload
        try:
            root = ET.fromstring(payload)
        except ET.ParseError:
            return payload
        now = time.monotonic()
        added = False
        if action == "DescribeAutoScalingGroups":
            for group in _members_of(root, "AutoScalingGroups"):
                name = _text(group, "AutoScalingGroupName")
                instances = _child(group, "Instances")
                if name is None or instances is None:
                    continue
                added |= self._linger(name, instances, now)
        else:
            asked = {
                v[0]
                for k, v in urllib.parse.parse_qs(request.decode("utf-8", "replace")).items()
                if k.startswith("InstanceIds.member.")
            }
            listing = next(
                (e for e in root.iter() if _local(e.tag) == "AutoScalingInstances"), None
            )
            if listing is not None:
                shown = {_text(m, "InstanceId") for m in listing}
                with self._lock:
                    for group_name, members in self.group_members.items():
                        for instance_id, member in members.items():
                            if (
                                instance_id in asked
                                and instance_id not in shown
                                and self._lingering(member, now)
                            ):
                                listing.append(_as_instance(member.element, group_name))
                                added = True
        if not added:
            return payload
        namespace = root.tag[1:].split("}", 1)[0] if root.tag.startswith("{") else ""
        if namespace:
            ET.register_namespace("", namespace)
        return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True))

    def _lingering(self, member: _Member, now: float) -> bool:
        return member.gone_since is not None and (
            now - member.gone_since < self.terminated_listed_seconds
        )

    def _linger(self, group: str, instances: ET.Element, now: float) -> bool:
        added = False
        with self._lock:
            members = self.group_members.setdefault(group, {})
            shown = set()
            for item in instances:
                instance_id = _text(item, "InstanceId")
                if instance_id is not None:
                    shown.add(instance_id)
                    members[instance_id] = _Member(copy.deepcopy(item))
            for instance_id, member in list(members.items()):
                if instance_id in shown:
                    continue
                if member.gone_since is None:
                    member.gone_since = now
                if self._lingering(member, now):
                    instances.append(_terminating(member.element))
                    added = True
                else:
                    del members[instance_id]
        return added

    def start(self) -> None:
        proxy = self
        upstream = urllib.parse.urlsplit(self.upstream)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def do_GET(self) -> None:
                self._handle()

            def do_POST(self) -> None:
                self._handle()

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                action, version = _action_of(self.headers.get("X-Amz-Target"), body, self.path)
                mode = proxy._take_fault(action)
                proxy._record(action, mode)
                token = ""
                if action == "CreateFleet":
                    fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
                    token = fields.get("ClientToken", [""])[0]
                    with proxy._lock:
                        remembered = proxy.fleet_tokens.get(token) if token else None
                    if remembered is not None and mode is None:
                        self._reply(*remembered)
                        return
                if mode == DROP_BEFORE:
                    self._drop()
                    return
                if mode in (THROTTLE, TOO_MANY, UNAVAILABLE):
                    self._fail(mode, version, bool(self.headers.get("X-Amz-Target")))
                    return
                status, headers, payload = self._forward(body)
                with proxy._lock:
                    proxy.reached_moto[action] += 1
                    if token and status == 200:
                        proxy.fleet_tokens[token] = (status, headers, payload)
                if mode == DROP_AFTER:
                    self._drop()
                    return
                if mode == DELAY_AFTER:
                    proxy._stopping.wait(proxy.delay_seconds)
                    self._drop()
                    return
                if status == 200:
                    payload = proxy.hide_young_instances(action, payload)
                    if proxy.terminated_listed_seconds > 0:
                        payload = proxy.keep_terminated_listed(action, body, payload)
                self._reply(status, headers, payload)

            def _reply(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in _HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
                conn = http.client.HTTPConnection(
                    upstream.hostname or "127.0.0.1", upstream.port, timeout=30
                )
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    return response.status, response.getheaders(), response.read()
                finally:
                    conn.close()

            def _fail(self, mode: str, version: str, json_protocol: bool) -> None:
                status, content_type, payload = _error_response(mode, version, json_protocol)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _drop(self) -> None:
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._stopping.set()  # held responses end now
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _error_response(mode: str, version: str, json_protocol: bool) -> tuple[int, str, bytes]:
    """Status, content type and body of an injected error, in the protocol of the call."""
    if mode == UNAVAILABLE:
        return 503, "text/plain", b""
    status = 429 if mode == TOO_MANY else 400
    code = "TooManyRequestsException" if mode == TOO_MANY else "Throttling"
    if json_protocol:  # SQS speaks AWS JSON 1.0
        code = "TooManyRequestsException" if mode == TOO_MANY else "ThrottlingException"
        body = json.dumps({"__type": code, "message": "Rate exceeded"})
        return status, "application/x-amz-json-1.0", body.encode()
    if version == _EC2_API_VERSION:
        if mode == THROTTLE:
            status, code = 503, "RequestLimitExceeded"
        body = (
            f"<Response><Errors><Error><Code>{code}</Code><Message>Request limit exceeded."
            "</Message></Error></Errors><RequestID>fault</RequestID></Response>"
        )
        return status, "text/xml", body.encode()
    body = (
        f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code>"
        "<Message>Rate exceeded</Message></Error><RequestId>fault</RequestId></ErrorResponse>"
    )
    return status, "text/xml", body.encode()


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child(element: ET.Element, name: str) -> ET.Element | None:
    return next((c for c in element if _local(c.tag) == name), None)


def _text(element: ET.Element, name: str) -> str | None:
    found = _child(element, name)
    return None if found is None else found.text


def _members_of(root: ET.Element, listing: str) -> list[ET.Element]:
    return [m for e in root.iter() if _local(e.tag) == listing for m in e]


def _terminating(member: ET.Element) -> ET.Element:
    """A copy of a group's instance member in lifecycle state Terminating."""
    item = copy.deepcopy(member)
    state = _child(item, "LifecycleState")
    if state is not None:
        state.text = "Terminating"
    return item


def _as_instance(member: ET.Element, group: str) -> ET.Element:
    """A DescribeAutoScalingInstances member (it names its group) from a group's member."""
    item = _terminating(member)
    namespace = item.tag[: item.tag.index("}") + 1] if item.tag.startswith("{") else ""
    name = ET.SubElement(item, f"{namespace}AutoScalingGroupName")
    name.text = group
    return item


def _drop_empty_reservations(root: ET.Element) -> None:
    """EC2 lists instances per reservation: a reservation left with none goes too."""
    for parent in root.iter():
        if _local(parent.tag) != "reservationSet":
            continue
        for reservation in list(parent):
            instances = next((c for c in reservation if _local(c.tag) == "instancesSet"), None)
            if instances is not None and len(instances) == 0:
                parent.remove(reservation)


def _action_of(target: str | None, body: bytes, path: str) -> tuple[str, str]:
    """API action and version of a request (query protocol form body or JSON X-Amz-Target)."""
    if target:
        return target.rsplit(".", 1)[-1], ""
    fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
    if not fields:
        fields = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
    return fields.get("Action", [""])[0], fields.get("Version", [""])[0]

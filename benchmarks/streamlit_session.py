"""One dashboard session over Streamlit's own websocket protocol, as the browser speaks it, without a browser.

The browser opens ``/_stcore/stream`` (subprotocol ``streamlit``), sends a ``BackMsg`` with ``rerun_script`` (the
query string and every widget value it holds), and receives ``ForwardMsg``s: ``new_session``, one ``delta`` per
element as the script draws it, ``script_finished``. This client does the same with Streamlit's own protobuf
classes, so a load test costs the server exactly what real users cost it, and the client almost nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.asyncio.client import ClientConnection, connect


class SessionError(RuntimeError):
    """The server closed the session, drew an exception, or did not finish a run in time."""


@dataclass
class Run:
    """What one rerun drew, and when (seconds after the BackMsg was sent)."""

    first_metric_s: float | None = None  # when the first st.metric arrived: the KPIs the user is waiting for
    finished_s: float | None = None  # script_finished
    metrics: dict[str, str] = field(default_factory=dict)  # label -> body, as drawn
    widget_ids: dict[str, str] = field(default_factory=dict)  # user key -> full widget id
    exceptions: list[str] = field(default_factory=list)  # st.exception / uncaught errors drawn on the page
    errors: list[str] = field(default_factory=list)  # st.error boxes
    widget_states: dict[str, WidgetState] = field(default_factory=dict)  # widget id -> default or script's value
    server_set: set[str] = field(default_factory=set)  # widget ids whose value the script set (set_value)


class StreamlitSession:
    """``async with StreamlitSession(url) as session: run = await session.rerun({"plan_util": [0.8]})``.

    ``source_address`` binds the client socket (``127.0.1.1``, ``127.0.2.1`` ...): behind nginx's ``ip_hash``,
    which hashes the first three octets of an IPv4 client, each such address is a different "user".
    """

    def __init__(self, base_url: str, *, query_string: str = "", source_address: str | None = None,
                 run_timeout_s: float = 120.0, page: str = "") -> None:
        self._url = base_url.replace("http://", "ws://").rstrip("/") + "/_stcore/stream"
        self._query_string = query_string
        self._page = page  # the page's URL path ("learn"); "" is the default page
        self._source_address = source_address
        self._timeout_s = run_timeout_s
        self._socket: ClientConnection | None = None
        self._widget_ids: dict[str, str] = {}
        # NOTE: the browser sends the value of every widget on the page with each rerun (a keyed widget left out
        # is dropped from st.session_state). It takes a widget's value when the widget first appears (its default,
        # or the value the script set) or when the script sets it again; otherwise it keeps what it holds.
        self._held: dict[str, WidgetState] = {}  # widget id -> value
        self.session_id: str | None = None

    async def __aenter__(self) -> StreamlitSession:
        extra: dict[str, Any] = {}
        if self._source_address:
            extra["local_addr"] = (self._source_address, 0)
        self._socket = await connect(self._url, subprotocols=["streamlit"], max_size=None, open_timeout=30,
                                     **extra)  # type: ignore[list-item]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._socket is not None:
            await self._socket.close()

    async def rerun(self, changes: dict[str, Any] | None = None) -> Run:
        """Set widgets by their user key (a bool, or a list of floats for a slider) and run the page once."""
        for key, value in (changes or {}).items():
            widget_id = self._widget_id(key)
            self._held[widget_id] = _widget_state(widget_id, value)
        message = BackMsg()
        message.rerun_script.query_string = self._query_string
        message.rerun_script.page_script_hash = ""
        message.rerun_script.page_name = self._page
        message.rerun_script.widget_states.widgets.extend(self._held.values())
        assert self._socket is not None, "use `async with StreamlitSession(...)`"
        started = time.perf_counter()
        await self._socket.send(message.SerializeToString())
        run = Run()
        deadline = started + self._timeout_s
        while run.finished_s is None:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise SessionError(f"no script_finished within {self._timeout_s:.0f} s")
            try:
                data = await _receive(self._socket, remaining)
            except Exception as exc:  # closed connection, timeout: the user would see a dead page
                raise SessionError(f"{type(exc).__name__}: {exc}") from exc
            self._absorb(data, run, time.perf_counter() - started)
        self._widget_ids.update(run.widget_ids)
        self._held = {widget_id: state if widget_id in run.server_set or widget_id not in self._held
                      else self._held[widget_id] for widget_id, state in run.widget_states.items()}
        return run

    def _widget_id(self, key: str) -> str:
        if key not in self._widget_ids:
            raise SessionError(f"the page has drawn no widget with key {key!r} (known: {sorted(self._widget_ids)})")
        return self._widget_ids[key]

    def _absorb(self, data: bytes | str, run: Run, elapsed_s: float) -> None:
        message = ForwardMsg()
        message.ParseFromString(data if isinstance(data, bytes) else data.encode())
        kind = message.WhichOneof("type")
        if kind == "new_session":
            self.session_id = message.new_session.initialize.session_id or self.session_id
        elif kind == "script_finished":
            run.finished_s = elapsed_s
        elif kind == "delta" and message.delta.WhichOneof("type") == "new_element":
            element = message.delta.new_element
            element_kind = element.WhichOneof("type")
            body = getattr(element, element_kind)
            if element_kind == "metric":
                run.metrics[body.label] = body.body
                if run.first_metric_s is None:
                    run.first_metric_s = elapsed_s
            elif element_kind == "exception":
                run.exceptions.append(f"{body.type}: {body.message}")
            elif element_kind == "alert" and body.format == body.ERROR:
                run.errors.append(body.body)
            widget_id = getattr(body, "id", "")
            if isinstance(widget_id, str) and widget_id.startswith("$$ID-") and widget_id.count("-") >= 2:
                run.widget_ids[widget_id.split("-", 2)[2]] = widget_id
                state = _drawn_state(element_kind, body)
                if state is not None:
                    run.widget_states[widget_id] = state
                if getattr(body, "set_value", False):
                    run.server_set.add(widget_id)


async def _receive(socket: ClientConnection, timeout_s: float) -> bytes | str:
    import asyncio

    return await asyncio.wait_for(socket.recv(), timeout=timeout_s)


def _widget_state(widget_id: str, value: Any) -> WidgetState:
    state = WidgetState(id=widget_id)
    if isinstance(value, bool):
        state.bool_value = value
    elif isinstance(value, list | tuple):
        state.double_array_value.data.extend(float(v) for v in value)
    elif isinstance(value, int):
        state.int_value = value
    elif isinstance(value, float):
        state.double_value = value
    else:
        state.string_value = str(value)
    return state


def _drawn_state(kind: str, body: Any) -> WidgetState | None:
    """The value a browser holds for a widget just drawn: the script's (set_value) or the widget's default.

    An empty widget (a number input or selectbox showing no value) is sent as its id alone, as the browser does:
    the script then reads None, and the key stays in st.session_state.
    """
    state = WidgetState(id=body.id)
    if kind == "checkbox":
        state.bool_value = body.value if body.set_value else body.default
    elif kind == "slider" and body.options:  # a select_slider: the browser sends its options' labels
        state.string_array_value.data.extend(body.options[int(i)] for i in (body.value if body.set_value
                                                                            else body.default))
    elif kind == "slider":
        state.double_array_value.data.extend(body.value if body.set_value else body.default)
    elif kind in ("number_input", "text_area", "text_input"):
        source = "value" if body.set_value else "default"
        if body.HasField(source):
            setattr(state, "double_value" if kind == "number_input" else "string_value", getattr(body, source))
    elif kind in ("selectbox", "radio"):
        if body.set_value and body.HasField("raw_value"):
            state.string_value = body.raw_value
        elif not body.set_value and body.HasField("default") and 0 <= body.default < len(body.options):
            state.string_value = body.options[body.default]
    elif kind == "button_group":
        chosen = list(body.raw_values) if body.set_value else [body.options[i].content for i in body.default]
        state.string_array_value.data.extend(chosen)
    elif kind == "multiselect":
        chosen = list(body.raw_values) if body.set_value else [body.options[i] for i in body.default]
        state.string_array_value.data.extend(chosen)
    else:
        return None  # buttons, downloads, charts: no value until clicked
    return state

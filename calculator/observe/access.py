"""What a dashboard lets its visitors reach: which servers (deployment mode + allow-list) and which local folders.

Pure: addresses are parsed here, once, into typed values, and every decision takes an already resolved IP
address, so the HTTP edge (``bounded_http``) can check the address it is about to connect to — never a name that
might resolve differently a moment later (DNS rebinding).

Three modes:
- ``open``: any server except the always-blocked ranges (the library and CLI default: the person running it
  chooses the address).
- ``local``: this machine's servers (loopback) plus the allow-list (``make dashboard``).
- ``closed``: only what ``VLLM_PLANNER_ALLOWED_HOSTS`` names (the container image and any shared deployment).
Cloud metadata services and link-local addresses are refused in every mode, whatever a rule says.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..errors import CalculatorError

ALLOWED_HOSTS_ENV = "VLLM_PLANNER_ALLOWED_HOSTS"
DEPLOYMENT_ENV = "VLLM_PLANNER_DEPLOYMENT"  # "local" or "shared"
MODELS_DIR_ENV = "VLLM_PLANNER_MODELS_DIR"

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Mode = Literal["open", "local", "closed"]

# NOTE: never a vLLM server. 169.254.169.254 is the AWS/GCP/Azure/Oracle metadata service (and all of
# 169.254.0.0/16 is link-local), fd00:ec2::254 AWS's IPv6 one, 100.100.100.200 Alibaba's, 168.63.129.16 Azure's
# WireServer; fe80::/10 is IPv6 link-local.
ALWAYS_BLOCKED: tuple[IpNetwork, ...] = tuple(ipaddress.ip_network(n) for n in (
    "169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32", "168.63.129.16/32"))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215: a network's own NAT64 prefix
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # RFC 2765 (SIIT): ::ffff:0:a.b.c.d
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*$")
_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}$")
_FORBIDDEN_CHARACTERS = re.compile(r"[\x00-\x20\x7f\\<>\"`{}|^]")


class AccessError(CalculatorError):
    """An address or a rule that cannot be used; the message says why."""


class BadAddress(AccessError):
    pass


class HostNotAllowed(AccessError):
    pass


class LocalPathRefused(AccessError):
    pass


class ServerAddress(BaseModel):
    """A parsed server base address: ``http://host:port/prefix``; ``host`` is canonical (an IP's usual form)."""

    model_config = ConfigDict(frozen=True)
    scheme: Literal["http", "https"]
    host: str
    port: int
    explicit_port: bool
    path: str = ""

    @property
    def ip(self) -> IpAddress | None:
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}{f':{self.port}' if self.explicit_port else ''}{self.path}"


def parse_server_address(text: str, example: str = "http://localhost:8000") -> ServerAddress:
    """``localhost:8000`` -> ``http://localhost:8000``; a clear ``BadAddress`` for everything else."""
    raw = text.strip()
    if not raw:
        raise BadAddress(f"give the server's address, e.g. {example}")
    if bad := _FORBIDDEN_CHARACTERS.search(raw):
        raise BadAddress(f"the address has a character that cannot be in a server address ({bad.group()!r}); "
                         f"expected e.g. {example}")
    if "://" not in raw:
        raw = f"http://{raw}"
    scheme, _, rest = raw.partition("://")
    if scheme.lower() not in ("http", "https"):
        raise BadAddress(f"not an http(s) server address: {text.strip()!r} (expected e.g. {example})")
    if "?" in rest or "#" in rest:
        raise BadAddress("give the server's base address without ?query or #fragment")
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        raise BadAddress("put the API key or password in its own field, not in the address")
    host, port = _split_host_port(authority, example)
    default_port = 443 if scheme.lower() == "https" else 80
    return ServerAddress(scheme=scheme.lower(), host=host, port=port or default_port, explicit_port=port is not None,
                         path=(slash + path).rstrip("/"))


def _split_host_port(authority: str, example: str) -> tuple[str, int | None]:
    if authority.startswith("["):
        inside, closing, after = authority[1:].partition("]")
        if not closing:
            raise BadAddress(f"an IPv6 address needs its closing ']' (e.g. http://[::1]:8000): {authority!r}")
        if after and not after.startswith(":"):
            raise BadAddress(f"unexpected text after ']' in {authority!r}; expected e.g. http://[::1]:8000")
        try:
            address = ipaddress.IPv6Address(inside)
        except ValueError as exc:
            hint = " (write an IPv4 address without brackets)" if _is_ipv4(inside) else ""
            raise BadAddress(f"[{inside}] is not an IPv6 address{hint}") from exc
        return str(address), _port(after[1:], authority) if after else None
    if authority.count(":") > 1:
        raise BadAddress(f"{authority!r} has more than one ':' — one host and one port, e.g. {example} "
                         "(an IPv6 address goes in brackets: http://[::1]:8000)")
    name, colon, port_text = authority.partition(":")
    return _canonical_host(name, example), _port(port_text, authority) if colon else None


def _port(text: str, authority: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise BadAddress(f"the port in {authority!r} must be a number from 1 to 65535, not {text!r}")
    port = int(text)
    if not 1 <= port <= 65535:
        raise BadAddress(f"port {port} is out of range (1-65535)")
    return port


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def _canonical_host(name: str, example: str) -> str:
    host = name.lower().rstrip(".")
    if not host:
        raise BadAddress(f"the address has no host name; expected e.g. {example}")
    if _NUMERIC_HOST.match(host):
        # NOTE: 2852039166, 0xa9fea9fe, 0251.0376.0251.0376 and 169.254.43518 are all 169.254.169.254 to the
        # C resolver: name the address they really are, so every check and message sees it.
        try:
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError as exc:
            raise BadAddress(f"{name!r} is not a valid IPv4 address") from exc
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError as exc:
        raise BadAddress(f"{name!r} is not a valid host name") from exc
    if not _HOST_NAME.match(ascii_host) or len(ascii_host) > 253:
        raise BadAddress(f"{name!r} is not a valid host name")
    return ascii_host


def embedded_ipv4(address: IpAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4, Teredo, IPv4-compatible, SIIT), else None.

    For refusing only: a connection to most of these forms goes to a gateway or relay, not to that IPv4 host."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64 or address in _NAT64_LOCAL or address in _IPV4_TRANSLATED or (
            address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def always_blocked(address: IpAddress) -> bool:
    """Cloud metadata or link-local, directly or inside an IPv6 address."""
    candidates = [address, *filter(None, [embedded_ipv4(address)])]
    return any(a.version == n.version and a in n for a in candidates for n in ALWAYS_BLOCKED)


def routed_as(address: IpAddress) -> IpAddress:
    """The address a connection really reaches: an IPv4-mapped one (``::ffff:10.0.0.5``) is its IPv4 address.

    NOTE: only the mapped form. The kernel sends 6to4 (2002:a00:5::1), Teredo, NAT64 and IPv4-compatible
    (::a00:5) addresses to a relay, a gateway or nowhere — never to 10.0.0.5 — so an allow-list rule for
    10.0.0.0/8 (or loopback) must not admit them."""
    return address.ipv4_mapped or address if isinstance(address, ipaddress.IPv6Address) else address


def is_this_machine(address: IpAddress) -> bool:
    """Loopback (127.0.0.0/8, ::1) or the unspecified address, which Linux connects to this machine."""
    return routed_as(address).is_loopback or routed_as(address).is_unspecified


class HostRule(BaseModel):
    """One allow-list entry: a host name or an address range, on any port or one port."""

    model_config = ConfigDict(frozen=True)
    text: str
    name: str | None = None
    network: str | None = None  # CIDR text (an ip_network is not a pydantic type)
    port: int | None = None

    def matches(self, host: str, port: int, address: IpAddress | None) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.name is not None:
            return self.name == host
        if address is None or self.network is None:
            return False
        network, routed = ipaddress.ip_network(self.network), routed_as(address)
        return routed.version == network.version and routed in network


def parse_rule(text: str) -> HostRule:
    """``vllm.internal``, ``vllm.internal:8000``, ``10.0.0.5``, ``10.0.0.0/8``, ``[fd00::1]:8000``, ``::1``."""
    rule = text.strip()
    if "/" in rule:
        try:
            network = ipaddress.ip_network(rule, strict=False)
        except ValueError as exc:
            raise AccessError(f"{rule!r} is not a CIDR range (e.g. 10.20.0.0/16)") from exc
        return HostRule(text=rule, network=str(network))
    if rule.count(":") > 1 and not rule.startswith("["):
        try:
            return HostRule(text=rule, network=str(ipaddress.ip_network(rule)))
        except ValueError as exc:
            raise AccessError(f"{rule!r} is not a host, host:port or CIDR range") from exc
    try:
        host, port = _split_host_port(rule, "vllm.internal:8000")
    except BadAddress as exc:
        raise AccessError(f"{rule!r}: {exc}") from exc
    try:
        return HostRule(text=rule, network=str(ipaddress.ip_network(host)), port=port)
    except ValueError:
        return HostRule(text=rule, name=host, port=port)


class AccessPolicy(BaseModel):
    """Which servers a dashboard may contact and which local folders it may read; built once at start."""

    model_config = ConfigDict(frozen=True)
    mode: Mode = "open"
    rules: tuple[HostRule, ...] = ()
    problems: tuple[str, ...] = ()  # rules and settings that were ignored, reported once at start
    models_dir: str | None = None  # closed mode: the only place local model folders may come from

    def permits(self, host: str, port: int, address: IpAddress) -> bool:
        """Whether a connection to ``address`` (resolved from ``host``) on ``port`` is allowed."""
        if always_blocked(address):
            return False
        if self.mode == "open" or any(rule.matches(host, port, address) for rule in self.rules):
            return True
        return self.mode == "local" and is_this_machine(address)

    def check(self, server: ServerAddress) -> None:
        """What can be decided before any DNS look-up: IP literals fully, names when no rule could match."""
        address = server.ip
        if address is not None:
            if not self.permits(server.host, server.port, address):
                raise self.refusal(server.host, server.port, [address])
            return
        if self.mode == "closed" and not any(rule.network is not None or rule.name == server.host
                                             for rule in self.rules):
            raise self.refusal(server.host, server.port, [])

    def refusal(self, host: str, port: int, addresses: list[IpAddress]) -> HostNotAllowed:
        if any(always_blocked(a) for a in addresses):
            return HostNotAllowed(f"{host} is a cloud metadata or link-local address: never a vLLM server, so this "
                                  "dashboard never contacts it")
        return HostNotAllowed(f"{host}:{port} is not among the servers this dashboard may contact "
                              f"({self.describe()}). {how_to_allow(host, port)}")

    def describe(self) -> str:
        """One line for the page: what this deployment may reach."""
        named = ", ".join(rule.text for rule in self.rules)
        if self.mode == "open":
            return "open: any server except cloud metadata and link-local addresses"
        if self.mode == "local":
            return f"local: servers on this machine{f' and {named}' if named else ''}"
        if named:
            return f"closed: only {named} ({ALLOWED_HOSTS_ENV})"
        return f"closed: no server is allowed until the operator names them in {ALLOWED_HOSTS_ENV}"

    def local_folder(self, text: str) -> Path | None:
        """The local model folder ``text`` names, when this deployment reads local folders; None when ``text``
        is not a local path (a Hub id). Raises ``LocalPathRefused`` — one message for every refusal, so the
        answer never tells what exists on the host."""
        value = text.strip()
        try:
            if self.mode != "closed":
                path = Path(value).expanduser()
                return path if path.exists() else None
            if self.models_dir is not None and not value.startswith("~"):
                root = Path(self.models_dir).resolve()
                candidate = (root / value).resolve()  # an absolute value replaces root; resolve() follows symlinks
                if candidate.is_relative_to(root) and candidate != root and (candidate / "config.json").is_file():
                    return candidate
        # NOTE: a name too long for the file system (OSError), a loop of links or an unknown ~user (RuntimeError),
        # a NUL byte (ValueError): not a folder this page can read. Their own messages name the models folder.
        except (OSError, RuntimeError, ValueError):
            if not _looks_like_a_path(value):
                return None  # not a usable path: a Hub id, perhaps
            raise LocalPathRefused(self.local_refusal() if self.mode == "closed" else
                                   "this is not a model folder this dashboard can read (the name is too long, "
                                   "loops, or holds a character no path has); give a folder, a Hugging Face model "
                                   "id, or upload config.json") from None
        if _looks_like_a_path(value):
            raise LocalPathRefused(self.local_refusal())
        return None

    def local_refusal(self) -> str:
        if self.models_dir is not None:
            return ("this shared dashboard reads local model folders only by their name inside its models folder "
                    f"({MODELS_DIR_ENV}); give such a name, a Hugging Face model id, or upload config.json")
        return ("local model folders are off in this shared dashboard; give a Hugging Face model id or upload "
                "config.json")


def how_to_allow(host: str = "HOST", port: int | str = "PORT") -> str:
    """The two ways to let a dashboard reach a server, with the exact lines to use."""
    host = f"[{host}]" if ":" in host else host
    return (f"For servers on this machine, start the dashboard with `make dashboard` or "
            f"`{DEPLOYMENT_ENV}=local streamlit run app.py`; for this one in a shared deployment, add "
            f"`{ALLOWED_HOSTS_ENV}={host}:{port}` to its environment.")


def _looks_like_a_path(value: str) -> bool:
    return value.startswith(("/", "~", ".")) or value.count("/") > 1 or any(c in value for c in "\\:\x00")


def policy_from_environment(environ: Mapping[str, str] | None = None, *, dashboard: bool = False) -> AccessPolicy:
    """The policy the environment sets. Unset deployment: a dashboard is closed (shared is the safe guess), the
    library is open unless an allow-list is given."""
    env = os.environ if environ is None else environ
    rules, problems = [], []
    for text in env.get(ALLOWED_HOSTS_ENV, "").split(","):
        if not text.strip():
            continue
        try:
            rule = parse_rule(text)
        except AccessError as exc:
            problems.append(f"{ALLOWED_HOSTS_ENV}: {exc}; this rule is ignored")
            continue
        if rule.network and all(always_blocked(a) for a in _network_ends(rule.network)):
            problems.append(f"{ALLOWED_HOSTS_ENV}: {rule.text} is a cloud metadata or link-local range, which is "
                            "never contacted; this rule is ignored")
            continue
        rules.append(rule)
    deployment = env.get(DEPLOYMENT_ENV, "").strip().lower()
    if deployment not in ("", "local", "shared"):
        problems.append(f"{DEPLOYMENT_ENV}={deployment!r} is neither 'local' nor 'shared'; treated as 'shared'")
        deployment = "shared"
    mode: Mode
    if deployment == "local":
        mode = "local"
    elif deployment == "shared" or dashboard or rules:
        mode = "closed"
    else:
        mode = "open"
    models_dir = env.get(MODELS_DIR_ENV, "").strip() or None
    if models_dir is not None and not Path(models_dir).is_dir():
        problems.append(f"{MODELS_DIR_ENV}={models_dir!r} is not a folder; local model folders are off")
        models_dir = None
    return AccessPolicy(mode=mode, rules=tuple(rules), problems=tuple(problems), models_dir=models_dir)


def _network_ends(cidr: str) -> tuple[IpAddress, IpAddress]:
    network = ipaddress.ip_network(cidr)
    return network.network_address, network.broadcast_address

"""Which servers and folders a dashboard may reach (issue 10 items 12-14): malformed addresses are one clear line,
a bad allow-list rule is reported once, metadata and link-local addresses are never contacted in any mode or
encoding, a shared deployment starts closed, and local model folders answer every refusal with one message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.http_server import answer

from calculator.observe.access import (
    AccessError,
    BadAddress,
    HostNotAllowed,
    LocalPathRefused,
    parse_server_address,
    policy_from_environment,
)
from calculator.observe.live_client import LiveClient

OPEN = policy_from_environment({})
LOCAL = policy_from_environment({"VLLM_PLANNER_DEPLOYMENT": "local"})
CLOSED_WIDE = policy_from_environment({"VLLM_PLANNER_ALLOWED_HOSTS": "0.0.0.0/0,::/0"})

# 169.254.169.254 as the C resolver and the URL parsers of the world spell it, and its IPv6 carriers
METADATA_FORMS = (
    "http://169.254.169.254", "http://169.254.169.254:80/latest", "http://2852039166", "http://0xa9fea9fe",
    "http://0251.0376.0251.0376", "http://169.254.43518", "http://0xa9.0xfe.0xa9.0xfe", "http://169.254.169.254.",
    "HTTP://169.254.169.254", "169.254.169.254:8000", "http://[::ffff:169.254.169.254]", "http://[::ffff:a9fe:a9fe]",
    "http://[64:ff9b::a9fe:a9fe]", "http://[2002:a9fe:a9fe::1]", "http://[::169.254.169.254]",
    "http://[fd00:ec2::254]", "http://[fe80::1]", "http://169.254.0.1", "http://100.100.100.200",
    "http://168.63.129.16", "https://169.254.169.254:443",
    "http://[64:ff9b:1::a9fe:a9fe]", "http://[::ffff:0:a9fe:a9fe]",  # issue 28: RFC 8215 NAT64, RFC 2765 SIIT
)


@pytest.mark.parametrize("url", METADATA_FORMS)
@pytest.mark.parametrize("policy", [OPEN, LOCAL, CLOSED_WIDE], ids=["open", "local", "closed-allowing-all"])
def test_metadata_and_link_local_are_refused_in_every_mode_and_encoding(url, policy):
    with pytest.raises(HostNotAllowed, match="cloud metadata or link-local"):
        LiveClient(url, policy=policy)


@pytest.mark.parametrize(("url", "says"), [
    ("http://127.0.0.1:18600\\x:1", "character that cannot be in a server address ('\\\\')"),
    ("http://[127.0.0.1]:18600", "[127.0.0.1] is not an IPv6 address (write an IPv4 address without brackets)"),
    ("http://127.0.0.1:+18600", "the port in '127.0.0.1:+18600' must be a number from 1 to 65535, not '+18600'"),
    ("http://127.0.0.1:18600:8000", "has more than one ':'"),
    ("http://127.0.0.1:0", "port 0 is out of range"),
    ("http://127.0.0.1:99999", "port 99999 is out of range"),
    ("http://[::1", "closing ']'"),
    ("http://:8000", "has no host name"),
    ("http://exa mple.com", "character that cannot be in a server address (' ')"),
    ("http://-bad-.com", "is not a valid host name"),
    ("http://256.1.1.1", "is not a valid IPv4 address"),
    ("", "give the server's address"),
])
@pytest.mark.parametrize("rules", ["", "127.0.0.1,vllm.internal:8000"], ids=["no allow-list", "allow-list"])
def test_malformed_addresses_are_one_clear_line(url, says, rules):
    policy = policy_from_environment({"VLLM_PLANNER_ALLOWED_HOSTS": rules})
    with pytest.raises(BadAddress) as caught:
        LiveClient(url, policy=policy)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_addresses_are_canonical():
    assert parse_server_address("LOCALHOST:8000/").url == "http://localhost:8000"
    assert parse_server_address("https://[::1]/vllm/").url == "https://[::1]/vllm"
    assert parse_server_address("2130706433:8000").url == "http://127.0.0.1:8000"  # 127.0.0.1 as one number
    assert parse_server_address("vllm.internal").port == 80


def test_a_bad_rule_is_reported_once_and_the_others_still_work(serve):
    server = serve({"/health": answer(200, b"")})
    policy = policy_from_environment({"VLLM_PLANNER_ALLOWED_HOSTS": "not-a-cidr/99, 127.0.0.1 ,169.254.0.0/16"})
    assert policy.problems == (
        "VLLM_PLANNER_ALLOWED_HOSTS: 'not-a-cidr/99' is not a CIDR range (e.g. 10.20.0.0/16); this rule is ignored",
        "VLLM_PLANNER_ALLOWED_HOSTS: 169.254.0.0/16 is a cloud metadata or link-local range, which is never "
        "contacted; this rule is ignored")
    for _ in range(3):  # every request works; nothing raises ValueError
        with LiveClient(server.url, policy=policy) as client:
            assert client.healthy() is True


@pytest.mark.parametrize(("environ", "mode"), [
    ({}, "closed"), ({"VLLM_PLANNER_ALLOWED_HOSTS": ""}, "closed"), ({"VLLM_PLANNER_ALLOWED_HOSTS": " , ,"}, "closed"),
    ({"VLLM_PLANNER_DEPLOYMENT": "shared"}, "closed"), ({"VLLM_PLANNER_DEPLOYMENT": "local"}, "local"),
    ({"VLLM_PLANNER_DEPLOYMENT": "public"}, "closed"),
])
def test_a_dashboard_starts_closed_unless_it_is_local(environ, mode):
    policy = policy_from_environment(environ, dashboard=True)
    assert policy.mode == mode
    if mode == "closed" and not policy.rules:
        assert policy.describe() == ("closed: no server is allowed until the operator names them in "
                                     "VLLM_PLANNER_ALLOWED_HOSTS")


def test_closed_refuses_before_connecting_and_allows_what_is_named(serve):
    server = serve({"/health": answer(200, b"")})
    port = server.url.rsplit(":", 1)[1]
    closed = policy_from_environment({"VLLM_PLANNER_DEPLOYMENT": "shared"})
    for url in (server.url, f"http://localhost:{port}", "http://10.0.0.5:8000", "http://vllm.internal:8000"):
        with pytest.raises(HostNotAllowed, match="is not among the servers this dashboard may contact"):
            LiveClient(url, policy=closed)
    assert server.seen == []  # nothing was contacted, so no open port was revealed
    for rules in ("127.0.0.1", f"127.0.0.1:{port}", "127.0.0.0/8", "localhost"):
        named = policy_from_environment({"VLLM_PLANNER_DEPLOYMENT": "shared", "VLLM_PLANNER_ALLOWED_HOSTS": rules})
        host = "localhost" if rules == "localhost" else "127.0.0.1"
        with LiveClient(f"http://{host}:{port}", policy=named) as client:
            assert client.healthy() is True
    wrong_port = policy_from_environment({"VLLM_PLANNER_ALLOWED_HOSTS": "127.0.0.1:1"})
    with pytest.raises(HostNotAllowed):
        LiveClient(server.url, policy=wrong_port)


def test_a_name_is_checked_on_the_address_it_resolves_to_at_connect_time(serve):
    """A range rule cannot be passed by a name: `localhost` resolves to 127.0.0.1, outside 10.0.0.0/8."""
    server = serve({"/health": answer(200, b"")})
    port = server.url.rsplit(":", 1)[1]
    policy = policy_from_environment({"VLLM_PLANNER_ALLOWED_HOSTS": "10.0.0.0/8"})
    with LiveClient(f"http://localhost:{port}", policy=policy) as client, pytest.raises(HostNotAllowed):
        client.read()
    assert server.seen == []


# 10.0.0.5 carried by IPv6 forms the kernel routes to a relay, a gateway or nowhere: never to 10.0.0.5
TUNNELLED_10_0_0_5 = ("2002:a00:5::1", "2001:0:4136:e378:8000:63bf:f5ff:fffa", "::a00:5", "64:ff9b::a00:5",
                      "64:ff9b:1::a00:5", "::ffff:0:a00:5")


@pytest.mark.parametrize("address", TUNNELLED_10_0_0_5)
def test_an_ipv4_range_rule_admits_the_mapped_form_only(address):
    """Issue 28: a rule for 10.0.0.0/8 admitted 6to4, Teredo and IPv4-compatible forms of 10.0.0.5."""
    policy = policy_from_environment({"VLLM_PLANNER_ALLOWED_HOSTS": "10.0.0.0/8"})
    LiveClient("http://10.0.0.5:8000", policy=policy).close()
    LiveClient("http://[::ffff:10.0.0.5]:8000", policy=policy).close()  # the kernel connects this to 10.0.0.5
    with pytest.raises(HostNotAllowed, match="is not among the servers this dashboard may contact"):
        LiveClient(f"http://[{address}]:8000", policy=policy)


@pytest.mark.parametrize("address", ["2002:7f00:1::1", "::7f00:1", "64:ff9b::7f00:1"])
def test_local_mode_takes_no_tunnelled_form_of_loopback_for_this_machine(address):
    with pytest.raises(HostNotAllowed, match=r"\(local: servers on this machine\)"):
        LiveClient(f"http://[{address}]:8000", policy=LOCAL)


def test_local_allows_this_machine_only(serve):
    server = serve({"/health": answer(200, b"")})
    with LiveClient(server.url, policy=LOCAL) as client:
        assert client.healthy() is True
    for url in ("http://10.1.2.3:8000", "http://192.168.0.10:8000", "http://8.8.8.8"):
        with pytest.raises(HostNotAllowed, match=r"\(local: servers on this machine\)"):
            LiveClient(url, policy=LOCAL)


@pytest.mark.parametrize("text", ["/etc/passwd", "/etc", "/does/not/exist", "~/.ssh", "../../etc", "./x",
                                  "a/b/c", "C:\\Windows", "models/../../etc/passwd"])
def test_a_shared_deployment_refuses_local_paths_with_one_message(text, tmp_path):
    closed = policy_from_environment({}, dashboard=True)
    with pytest.raises(LocalPathRefused) as caught:
        closed.local_folder(text)
    assert str(caught.value) == ("local model folders are off in this shared dashboard; give a Hugging Face model "
                                 "id or upload config.json")
    assert closed.local_folder("meta-llama/Llama-3.1-8B") is None  # a Hub id: no file is looked at


def test_a_models_folder_is_the_only_place_local_configs_come_from(tmp_path):
    models = tmp_path / "models"
    (models / "tiny").mkdir(parents=True)
    (models / "tiny" / "config.json").write_text("{}")
    (models / "escape").symlink_to("/etc")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "config.json").write_text("{}")
    policy = policy_from_environment({"VLLM_PLANNER_MODELS_DIR": str(models)}, dashboard=True)
    assert policy.local_folder("tiny") == (models / "tiny").resolve()
    assert policy.local_folder(str(models / "tiny")) == (models / "tiny").resolve()
    refusals = set()
    assert policy.local_folder("escape") is None  # a link out of the folder is not read: the name goes to the Hub
    for text in ("/etc", str(models / "escape"), "../outside", str(tmp_path / "outside"), "tiny/../../outside", "~/x", "/nope"):
        with pytest.raises(LocalPathRefused) as caught:
            policy.local_folder(text)
        refusals.add(str(caught.value))
    assert len(refusals) == 1 and "VLLM_PLANNER_MODELS_DIR" in refusals.pop()


def test_a_local_dashboard_reads_any_folder():
    assert LOCAL.local_folder("/etc") is not None and LOCAL.local_folder("/does/not/exist") is None


def test_access_errors_are_calculator_errors():
    from calculator import CalculatorError
    assert issubclass(AccessError, CalculatorError) and os.sep == "/"


def test_the_container_starts_closed_and_make_dashboard_is_local_to_this_machine():
    root = Path(__file__).resolve().parents[1]
    dockerfile = (root / "Dockerfile").read_text()
    assert "ENV VLLM_PLANNER_DEPLOYMENT=shared" in dockerfile
    recipe = (root / "Makefile").read_text().split("\ndashboard:")[1].split("\n\n")[0]
    assert "VLLM_PLANNER_DEPLOYMENT=local" in recipe and "--server.address localhost" in recipe
    image_policy = policy_from_environment({"VLLM_PLANNER_DEPLOYMENT": "shared"}, dashboard=True)
    assert image_policy.mode == "closed" and not image_policy.rules


@pytest.mark.parametrize("name", ["/" + "a" * 5000, "~no-such-user-here/model", "./x\x00y", "a/" * 3000,
                                  "/models/" + "b" * 300 + "/x"])
@pytest.mark.parametrize("mode", ["open", "local", "closed"])
def test_a_folder_name_the_file_system_refuses_is_one_sentence_without_the_models_folder(name, mode, tmp_path):
    """Issue 28: names raising OSError (too long), RuntimeError (unknown ~user) or ValueError (NUL) escaped, and
    their messages named the models folder."""
    environ = {"open": {}, "local": {"VLLM_PLANNER_DEPLOYMENT": "local"},
               "closed": {"VLLM_PLANNER_DEPLOYMENT": "shared", "VLLM_PLANNER_MODELS_DIR": str(tmp_path)}}[mode]
    policy = policy_from_environment(environ)
    try:
        assert policy.local_folder(name) is None
    except LocalPathRefused as exc:
        assert str(tmp_path) not in str(exc) and "\n" not in str(exc)
        assert str(exc).startswith("this shared dashboard reads local model folders only by their name" if mode ==
                                   "closed" else "this is not a model folder this dashboard can read")


def test_a_loop_of_links_in_the_models_folder_is_not_followed_and_not_named(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    policy = policy_from_environment({"VLLM_PLANNER_DEPLOYMENT": "shared", "VLLM_PLANNER_MODELS_DIR": str(tmp_path)})
    assert policy.local_folder("loop") is None
    with pytest.raises(LocalPathRefused) as caught:
        policy.local_folder("loop/a/b")
    assert str(tmp_path) not in str(caught.value)

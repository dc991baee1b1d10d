"""Egress control through the official SDK, unchanged: network allow_out and
deny_out by domain, wildcard and CIDR, rules injecting a secret with
Secret.fill, and update_network cutting a live connection.

The hosts are the test internet test/compat/run.sh starts (CUBBY_TEST_INTERNET:
a JSON file with its names, addresses and CA); nothing leaves the machine.
"""

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from e2b import ALL_TRAFFIC, Secret
from e2b.sandbox.commands.command_handle import CommandExitException

from helpers import uniq, wait_for

CA_PATH = "/tmp/test-internet-ca.pem"
SCANNER = (Path(__file__).resolve().parents[2] / "scan.py").read_text()


@pytest.fixture(scope="module")
def internet():
    path = os.environ.get("CUBBY_TEST_INTERNET")
    if not path:
        pytest.fail("CUBBY_TEST_INTERNET is not set: run through test/compat/run.sh (it starts the test internet)", pytrace=False)
    info = json.loads(Path(path).read_text())
    info["ca"] = Path(info["caFile"]).read_text()
    return info


@pytest.fixture
def with_network(sandbox_factory, internet):
    """Returns ``make(network) -> Sandbox`` with the test CA file inside."""

    def make(network):
        sbx = sandbox_factory(network=network)
        sbx.files.write(CA_PATH, internet["ca"])
        return sbx

    return make


def curl(sbx, args, system=False):
    """Runs curl as root in sbx; returns (exit code, HTTP status, body). TLS is
    verified against the test CA, or with system against the sandbox's own
    trust store (where the egress CA is, for hosts with rules)."""
    ca = "" if system else f"--cacert {CA_PATH}"
    cmd = f"curl -sS -m 10 {ca} -w '\\n%{{http_code}}' {args}"
    try:
        r = sbx.commands.run(cmd, user="root")
    except CommandExitException as e:
        r = e
    body, _, status = r.stdout.rpartition("\n")
    return r.exit_code, status, body


def server(body):
    try:
        return json.loads(body).get("server", "")
    except ValueError:
        return ""


def test_allow_out_by_domain(with_network, internet):
    sbx = with_network({"allow_out": ["allowed.test"], "deny_out": [ALL_TRAFFIC]})
    code, status, body = curl(sbx, "https://allowed.test/")
    assert status == "200", body
    assert server(body) == internet["names"]["allowed.test"]
    denied = internet["names"]["denied.test"]
    for args in ("https://denied.test/", f"--resolve denied.test:443:{denied} https://denied.test/", f"http://{denied}/"):
        code, status, body = curl(sbx, args)
        assert server(body) == "" and status != "200", f"{args} got through: {body}"
    info = sbx.get_info()
    assert info.network["allow_out"] == ["allowed.test"]


def test_wildcard_rule(with_network, internet):
    sbx = with_network({"allow_out": ["*.wild.test"], "deny_out": lambda ctx: [ctx.all_traffic]})
    for host in ("a.wild.test", "x.y.wild.test"):
        assert curl(sbx, f"http://{host}/")[1] == "200", host
    apex = curl(sbx, f"--resolve wild.test:80:{internet['names']['*.wild.test']} http://wild.test/")
    assert apex[1] != "200", "the apex of a wildcard got through"


def test_deny_out_cidr(with_network, internet):
    denied, allowed = internet["names"]["denied.test"], internet["names"]["allowed.test"]
    sbx = with_network({"deny_out": [f"{denied}/32"]})
    assert server(curl(sbx, f"http://{denied}/")[2]) == ""
    assert curl(sbx, f"http://{allowed}/")[1] == "200"


def test_secret_header_never_in_sandbox(with_network):
    name, value = uniq("key"), f"sk-{uniq('v')}-{uniq('w')}"
    Secret.create(name, value)
    try:
        sbx = with_network({
            "allow_out": ["echo.test"], "deny_out": [ALL_TRAFFIC],
            "rules": {"echo.test": [{"transform": {"headers": {"Authorization": f"Bearer {Secret.fill(name)}"}}}]},
        })
        code, status, body = curl(sbx, "https://echo.test/", system=True)
        assert status == "200", body
        want = hashlib.sha256(f"Bearer {value}".encode()).hexdigest()
        assert json.loads(body)["digests"]["Authorization"] == want, "the host did not get the secret"
        assert value not in body, "the echoed secret reached the sandbox"
        sbx.files.write("/tmp/scan.py", SCANNER)
        half = len(value) // 2
        scan = sbx.commands.run(f"python3 /tmp/scan.py '{value[:half]}' '{value[half:]}'", user="root")
        assert scan.stdout.startswith("clean"), f"the secret is in the sandbox: {scan.stdout}"
    finally:
        Secret.destroy(name)


def test_update_network_cuts_live_connection(with_network):
    sbx = with_network({"allow_out": ["allowed.test"], "deny_out": [ALL_TRAFFIC]})
    sbx.commands.run(f"curl -sN --cacert {CA_PATH} 'https://allowed.test/stream?n=900&ms=100' > /tmp/stream.out 2>&1",
                     background=True, user="root")

    def lines():
        return int(sbx.commands.run("cat /tmp/stream.out 2>/dev/null | wc -l").stdout.strip() or 0)

    wait_for("the stream to start", lambda: lines() >= 5)
    sbx.update_network({"allow_out": ["other.test"], "deny_out": [ALL_TRAFFIC]})
    time.sleep(1.5)
    cut = lines()
    time.sleep(1.5)
    assert lines() == cut, "the stream kept flowing after update_network"
    assert curl(sbx, "https://allowed.test/")[1] != "200"
    assert curl(sbx, "https://other.test/")[1] == "200"
    assert sbx.get_info().network["allow_out"] == ["other.test"]

"""Template SDK compatibility: the official e2b ``Template`` class (sync and
async), unchanged, builds templates on Cubby and ``Sandbox.create`` runs them.

Needs the registries test/compat/run.sh starts (see
internal/testenv/testregistry/cmd/testregistry): ``CUBBY_TEST_AUTH_IMAGE``, a minimal
Debian image behind ``CUBBY_TEST_REGISTRY_USER``/``_PASSWORD`` without sudo
or the user "user".
"""

import os
import secrets
from pathlib import Path

import pytest
from e2b import AsyncSandbox, AsyncTemplate, BuildException, Sandbox, Template, wait_for_url
from e2b.api.client.api.templates import delete_templates_template_id, get_v2_templates
from e2b.api.client_sync import get_api_client
from e2b.connection_config import ConnectionConfig

SUFFIX = secrets.token_hex(3)


def delete_template(template_id: str) -> int:
    client = get_api_client(ConnectionConfig())
    return delete_templates_template_id.sync_detailed(template_id=template_id, client=client).status_code


def listed_names() -> list:
    client = get_api_client(ConnectionConfig())
    return [n for t in get_v2_templates.sync(client=client) for n in t.names]


@pytest.fixture
def context_dir(tmp_path: Path) -> Path:
    (tmp_path / "site" / "css").mkdir(parents=True)
    (tmp_path / "site" / "index.html").write_text("<h1>hello from python</h1>\n")
    (tmp_path / "site" / "css" / "app.css").write_text("h1 {}\n")
    (tmp_path / "requirements.txt").write_text("six==1.16.0\n")
    return tmp_path


@pytest.mark.timeout(900)
def test_image_with_credentials_and_steps(context_dir: Path):
    name = f"compat-py-image-{SUFFIX}"
    logs = []
    template = (
        Template(file_context_path=str(context_dir))
        .from_image(
            os.environ["CUBBY_TEST_AUTH_IMAGE"],
            username=os.environ["CUBBY_TEST_REGISTRY_USER"],
            password=os.environ["CUBBY_TEST_REGISTRY_PASSWORD"],
        )
        # Steps are cached by all before them: a step of this run's own keeps
        # another SDK set's run of this suite (same server) from caching these.
        .set_envs({"COMPAT_RUN": SUFFIX})
        .apt_install(["python3", "python3-pip", "curl"])
        .copy("site", "/srv/site")
        .copy("requirements.txt", "/srv/")
        .run_cmd("pip install --break-system-packages -r /srv/requirements.txt", user="root")
        .set_envs({"SITE_NAME": "pysite"})
        .set_workdir("/srv/site")
        .set_start_cmd("python3 -m http.server 8080", wait_for_url("http://localhost:8080/index.html"))
    )
    info = Template.build(template, f"{name}:v1", on_build_logs=logs.append)
    assert info.name == f"{name}:v1"
    assert any("Setting up python3" in entry.message for entry in logs)
    assert Template.exists(name)
    assert name in listed_names()

    sbx = Sandbox.create(f"{name}:v1")
    try:
        assert sbx.commands.run("whoami; pwd; echo $SITE_NAME").stdout == "user\n/srv/site\npysite\n"
        assert sbx.commands.run("python3 -c 'import six; print(six.__version__)'").stdout == "1.16.0\n"
        assert sbx.commands.run("cat /srv/site/css/app.css /srv/requirements.txt").stdout == "h1 {}\nsix==1.16.0\n"
        assert "hello from python" in sbx.commands.run("curl -s localhost:8080/").stdout
    finally:
        sbx.kill()

    assert [t.tag for t in Template.get_tags(name)] == ["v1"]
    Template.assign_tags(f"{name}:v1", ["stable"])
    assert sorted(t.tag for t in Template.get_tags(name)) == ["stable", "v1"]
    Template.remove_tags(name, ["stable"])
    assert delete_template(name) == 204
    assert not Template.exists(name)


@pytest.mark.timeout(600)
async def test_async_template_from_base_with_user_and_cache():
    name = f"compat-py-async-{SUFFIX}"

    def build_of(last: str):
        return (
            AsyncTemplate()
            .from_template("base")
            .set_envs({"COMPAT_RUN": SUFFIX})  # not cached from another SDK set's run
            .set_user("root")
            .run_cmd("mkdir -p /opt/tool && echo 1 > /opt/tool/version")
            .set_user("user")
            .run_cmd(f"echo {last} > /home/user/last")
        )

    await AsyncTemplate.build(build_of("first"), name)
    logs = []
    await AsyncTemplate.build(build_of("second"), name, on_build_logs=logs.append)
    assert sum(1 for e in logs if e.message.startswith("CACHED RUN")) == 1, [e.message for e in logs]
    sbx = await AsyncSandbox.create(name)
    try:
        out = await sbx.commands.run("cat /opt/tool/version /home/user/last; stat -c %U /opt/tool; whoami")
        assert out.stdout == "1\nsecond\nroot\nuser\n"
    finally:
        await sbx.kill()
    assert await AsyncTemplate.exists(name)
    assert delete_template(name) == 204


@pytest.mark.timeout(300)
def test_failing_step_raises_build_exception():
    name = f"compat-py-fail-{SUFFIX}"
    with pytest.raises(BuildException, match="exited with code 4"):
        Template.build(Template().from_template("base").run_cmd("echo nope; exit 4"), name)
    assert not Template.exists(name)
    assert Template.exists("base")

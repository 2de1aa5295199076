"""sm120patch where fleets and images use it: the Dockerfile (built for real with podman),
its entrypoint, the Ansible playbook for every way of naming the package, and a git checkout
laid out like sglang's repository."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from packaging.version import Version

import sm120patch
from sm120patch.patcher.commands.demo import fetch, fetch_wheel
from sm120patch.sglang.flashinfer import FIRST_SM12X
from sm120patch.sglang.releases import pin_for
from tests.fleet import podman as containers
from tests.fleet.dockerignore import context_files
from tests.fleet.simple_index import simple_index
from tests.support.realtrees import copy_release, serving_env

REPO = Path(__file__).resolve().parent.parent
DOCKER = REPO / "examples" / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
PLAYBOOK = Path("examples") / "ansible" / "playbook.yml"
BIN = Path(sys.executable).parent  # where this environment's sm120patch command lives
BUILD_COMMAND = "docker build -f examples/docker/Dockerfile -t sglang-sm120 ."  # as documented, from the root


# --- the Dockerfile ------------------------------------------------------------------------


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction: comments dropped, continuations joined."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in dockerfile.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, rest = pending.strip().partition(" ")
        found.append((keyword.upper(), " ".join(rest.split())))
        pending = ""
    assert not pending, "a continuation runs off the end of the file"
    return found


def default_tag() -> str:
    (tag,) = [args.partition("=")[2] for k, args in instructions(DOCKERFILE) if k == "ARG" and "SGLANG_TAG=" in args]
    return tag


def test_the_documented_build_command_is_the_one_the_dockerfile_and_the_docs_give() -> None:
    assert BUILD_COMMAND in DOCKERFILE.read_text()
    for page in ("README.md", "docs/containers.md"):
        text = (REPO / page).read_text()
        assert BUILD_COMMAND in text, page
        assert not re.search(r"pip install (--no-cache-dir )?sm120patch\b", text), page  # not on the index
    section = CONTAINERS_IMAGE.search((REPO / "docs" / "containers.md").read_text())
    assert section and BUILD_COMMAND in section.group(0)
    assert "docker exec <ctr> sm120patch verify " in section.group(0)


CONTAINERS_IMAGE = re.compile(r"^## An image: `examples/docker/Dockerfile`$.*?(?=^## )", re.M | re.S)


def test_the_default_tag_is_a_release_whose_flashinfer_has_the_sm12x_kernel() -> None:
    """apply --strict at build time fails on an older one: the default must build."""
    steps = instructions(DOCKERFILE)
    (base,) = [args for k, args in steps if k == "FROM"]
    assert base == "lmsysorg/sglang:${SGLANG_TAG}"
    release = re.fullmatch(r"v(\d+\.\d+\.\d+(?:\.post\d+)?)-cu\d+", default_tag())
    assert release, default_tag()
    pinned = pin_for(release.group(1))
    assert pinned and Version(pinned) >= FIRST_SM12X
    runs = " && ".join(args for k, args in steps if k == "RUN")
    assert "sm120patch apply --strict" in runs
    assert [json.loads(args) for k, args in steps if k == "ENTRYPOINT"] == [["/usr/local/bin/sm120patch-entrypoint"]]


def test_in_the_image_sm120patch_is_on_path_and_looks_at_the_image_python() -> None:
    """`docker exec <ctr> sm120patch verify` as a user types it: the tool's venv is not the
    image's Python, so the image names the serving interpreter (the build's apply uses it too)."""
    steps = instructions(DOCKERFILE)
    (serving,) = [args.partition("=")[2] for k, args in steps if k == "ARG" and args.startswith("SERVING_PYTHON=")]
    assert serving == "/usr/bin/python3"  # the official image's, and the stand-in's
    assert ("ENV", "SM120PATCH_PYTHON=${SERVING_PYTHON}") in steps
    runs = " && ".join(args for k, args in steps if k == "RUN")
    assert "ln -s /opt/sm120patch/bin/sm120patch /usr/local/bin/sm120patch" in runs
    assert re.search(r"(^|&& )sm120patch apply --strict$", runs)  # from PATH, on SM120PATCH_PYTHON


@pytest.mark.slow  # builds the wheel (or the context) in full
def test_the_build_context_holds_the_project_and_nothing_local(tmp_path: Path) -> None:
    """What .dockerignore leaves of the repository root builds sm120patch's wheel, offline."""
    files = context_files(REPO, REPO / ".dockerignore")
    for needed in ("pyproject.toml", "README.md", "LICENSE", "sm120patch/__init__.py", "examples/docker/entrypoint.sh"):
        assert needed in files
    local = [f for f in files if re.search(r"(^|/)(\.git|build|\.whl|\.fi_aot|__pycache__|[^/]+\.egg-info)/|\.whl$", f)]
    assert local == []
    assert sum((REPO / f).stat().st_size for f in files) < 20 * 2**20
    context = tmp_path / "context"
    for rel in files:
        (context / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, context / rel)
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index", "--no-build-isolation"]
    built = subprocess.run(
        [*command, "--wheel-dir", str(tmp_path / "out"), str(context)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "out").glob("sm120patch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "sm120patch/cli/__init__.py" in names and "sm120patch/runner/remote/find_sglang.py" in names


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[containers.Podman]:
    reason = containers.missing()
    if reason:
        pytest.skip(reason)
    engine = containers.Podman(tmp_path_factory.mktemp("podman"))
    try:
        yield engine
    finally:
        engine.close()


def build_command(*extra: str) -> list[str]:
    """The documented command as podman runs it here: never pull, the host's CA for pip."""
    docker, build, *rest = BUILD_COMMAND.split()
    assert (docker, build) == ("docker", "build")
    return [build, "--pull=never", "--volume", containers.CA_MOUNT, *extra, *rest]


@pytest.mark.slow
def test_image_builds_from_the_repository_root_and_serves_only_while_patched(
    podman: containers.Podman, tmp_path: Path
) -> None:
    tag = default_tag()
    sglang = fetch_wheel(tag[1:].split("-")[0])
    flashinfer = fetch("flashinfer-python", containers.flashinfer_pin(sglang))
    base = containers.stand_in_image(podman, tag, sglang, flashinfer, tmp_path)
    packages = ["run", "--rm", "--entrypoint", "python3"]
    before = podman(*packages, base, "-m", "pip", "list", "--format=json").stdout

    podman(*build_command(), cwd=REPO)

    image = "sglang-sm120"
    # The image's own Python: the same packages as before, and no libcst.
    assert podman(*packages, image, "-m", "pip", "list", "--format=json").stdout == before
    libcst = podman(*packages, image, "-c", "import libcst", check=False)
    assert libcst.returncode == 1 and "No module named 'libcst'" in libcst.stderr
    # As a user types it in a running container: `sm120patch` on PATH, no flags, finds the
    # image's sglang (apply --strict ran at build time, on the editable checkout, with the
    # FlashInfer sglang pins).
    container = podman("run", "-d", "--entrypoint", "sleep", image, "600").stdout.strip()
    try:
        assert f"sm120patch {sm120patch.__version__} " in podman("exec", container, "sm120patch", "--version").stdout
        verify = podman("exec", container, "sm120patch", "verify", "--json", check=False)
        report = json.loads(verify.stdout)
        assert verify.returncode == 0 and report["ok"], report["headline"]
        assert report["sglang"]["install_kind"] == "editable"
        assert report["sglang"]["location"] == "/sgl-workspace/sglang/python/sglang"
        assert report["sglang"]["python"] == "/usr/bin/python3"
        assert report["sglang"]["flashinfer"] == containers.flashinfer_pin(sglang)
        assert report["warnings"] == []
        doctor = podman("exec", container, "sm120patch", "doctor", "--tp", "2", "--json", check=False)
        findings = {f["id"]: f for f in json.loads(doctor.stdout)["findings"]}
        assert doctor.returncode == 0 and findings["patch:communicator-flag"]["severity"] == "ok", doctor.stdout
        # No torch in the stand-in: bench refuses in one sentence, about the image's python.
        bench = podman("exec", container, "sm120patch", "bench", check=False)
        assert bench.returncode == 2 and "/usr/bin/python3" in bench.stderr and "Traceback" not in bench.stderr
    finally:
        podman("rm", "--force", container, check=False)

    # The entrypoint verifies the `python` it then runs sglang's server with.
    started = podman("run", "--rm", image, "--model-path", "m", check=False)
    # verify passed, then `python -m sglang.launch_server` ran (and stopped: no torch in the stand-in)
    assert started.returncode == 1 and "_run_module_as_main" in started.stderr, started.stderr[-2000:]
    assert "/sgl-workspace/sglang/python/sglang/__init__.py" in started.stderr
    reverted = podman(
        "run", "--rm", "--entrypoint", "sh", image, "-c",
        "sm120patch revert >/dev/null 2>&1"
        " && exec /usr/local/bin/sm120patch-entrypoint --model-path m",
        check=False,
    )  # fmt: skip
    assert reverted.returncode == 1
    assert "sm120patch apply" in reverted.stdout + reverted.stderr
    assert "_run_module_as_main" not in reverted.stderr  # the server never started


@pytest.mark.slow
def test_image_build_fails_when_the_fused_path_could_not_run(podman: containers.Podman, tmp_path: Path) -> None:
    """sglang 0.5.9 (it pins FlashInfer 0.6.3) and no FlashInfer in the image: apply alone would
    patch and warn; --strict fails the build and the image is not made."""
    tag = "sm120patch-test-0.5.9-without-flashinfer"
    containers.stand_in_image(podman, tag, fetch_wheel("0.5.9"), None, tmp_path)
    build = podman(
        *build_command("--build-arg", f"SGLANG_TAG={tag}", "-t", "sglang-sm120-refused"), cwd=REPO, check=False
    )
    assert build.returncode != 0
    assert "[strict] nothing was written: --strict refuses" in build.stdout + build.stderr
    assert "FlashInfer is not installed here; sglang 0.5.9 pins 0.6.3" in build.stdout + build.stderr
    assert podman("image", "exists", "sglang-sm120-refused", check=False).returncode == 1


def fake_python(bin_dir: Path, log: Path) -> None:
    """``python`` that records what it was asked to run (stands for sglang's server)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "python"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\n')
    script.chmod(0o755)


@pytest.mark.slow
def test_entrypoint_starts_the_server_only_while_patched(tmp_path: Path) -> None:
    package = copy_release("0.5.9", tmp_path / "site", hardlink=False)
    log = tmp_path / "server-args"
    fake_python(tmp_path / "bin", log)
    env = dict(os.environ, SM120PATCH_SGLANG_PATH=str(package), PATH=f"{tmp_path / 'bin'}:{BIN}:/usr/bin:/bin")
    entry = [str(DOCKER / "entrypoint.sh"), "--model-path", "m", "--tp", "2"]

    refused = subprocess.run(entry, capture_output=True, text=True, env=env)
    assert refused.returncode == 1 and "Run `sm120patch apply`" in refused.stderr
    assert not log.exists()  # the server never started

    assert subprocess.run([str(BIN / "sm120patch"), "apply"], env=env, capture_output=True).returncode == 0
    started = subprocess.run(entry, capture_output=True, text=True, env=env)
    assert started.returncode == 0, started.stderr
    assert log.read_text().split() == ["-m", "sglang.launch_server", "--model-path", "m", "--tp", "2"]


# --- the Ansible playbook ------------------------------------------------------------------

ANSIBLE = shutil.which("ansible-playbook") or str(BIN / "ansible-playbook")
needs_ansible = pytest.mark.skipif(
    not Path(ANSIBLE).exists(), reason="ansible-core is a test dependency: pip install -e '.[test]'"
)


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP: counters per host."""
    tail = output.rpartition("PLAY RECAP")[2]
    return {
        match.group(1): {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match.group(2))}
        for match in re.finditer(r"^(\S+)\s+:\s+(ok=.*)$", tail, re.M)
    }


def task_results(output: str, host: str) -> dict[str, str]:
    """Task name -> what it did on ``host`` (ok, changed, skipping, fatal), from the default output."""
    results = {}
    for block in re.split(r"^TASK \[", output, flags=re.M)[1:]:
        name = block.partition("]")[0]
        found = re.search(rf"^(ok|changed|skipping|fatal): \[{re.escape(host)}(?: -> \S+)?\]", block, re.M)
        if found:
            results[name] = found.group(1)
    return results


INSTALL = "Install sm120patch into its own venv"
APPLY = "Apply the patches to the serving environment's sglang"
NO_FLASHINFER = "FlashInfer is not installed here"


def snapshot(tmp_path: Path) -> Path:
    """The repository as its build context holds it: the playbook's default builds from it, so
    edits to the working tree made while the test runs cannot turn a rerun into a change."""
    root = tmp_path / "checkout"
    for rel in context_files(REPO, REPO / ".dockerignore"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, root / rel)
    return root


class Play:
    def __init__(self, checkout: Path, tmp_path: Path, inventory: str = "localhost,", **extra: str) -> None:
        self.command = [ANSIBLE, "-i", inventory, str(checkout / PLAYBOOK)]
        self.extra: dict[str, object] = {
            "sm120patch_venv_python": sys.executable,
            "sm120patch_build_dir": str(tmp_path / "wheels"),
            **extra,
        }
        self.tmp_path = tmp_path
        self.env = dict(
            os.environ,
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_HOME=str(tmp_path / "ansible-home"),
            ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
            ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-remote-tmp"),
        )

    def __call__(self, **more: object) -> subprocess.CompletedProcess[str]:
        command = [*self.command, "-e", json.dumps({**self.extra, **more})]
        return subprocess.run(command, capture_output=True, text=True, env=self.env, cwd=self.tmp_path)


def local_host(serving: Path, tool: Path) -> dict[str, str]:
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "sm120patch_python": str(serving),
        "sm120patch_venv": str(tool),
    }


def reinstall_sglang(serving: Path, version: str) -> None:
    """What `pip install -U sglang` does to the patched files (from the cached wheel, offline)."""
    command = [sys.executable, "-m", "pip", "--python", str(serving), "install", "--quiet", "--no-deps"]
    command += ["--force-reinstall", "--disable-pip-version-check", str(fetch_wheel(version))]
    subprocess.run(command, check=True)


@pytest.mark.slow
@needs_ansible
@pytest.mark.parametrize("form", ["checkout", "wheel", "index"])
def test_playbook_changed_then_ok_then_changed_after_a_reinstall(form: str, tmp_path: Path) -> None:
    """The package named as the default (this checkout, built into a wheel on the controller),
    as a wheel, or as a version on a private index: a rerun is ok, an sglang upgrade changes."""
    serving = serving_env(tmp_path / "serving", "0.5.9")  # no FlashInfer: apply patches and warns
    checkout = snapshot(tmp_path)
    play = Play(checkout, tmp_path, **local_host(serving, tmp_path / "tool"))
    package: dict[str, str] = {}
    with ExitStack() as stack:
        if form != "checkout":
            build = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist")]
            subprocess.run([*build, str(checkout)], check=True, capture_output=True)
            (wheel,) = (tmp_path / "dist").glob("sm120patch-*.whl")
            package["sm120patch_package"] = str(wheel)
        if form == "index":
            url, requested = stack.enter_context(simple_index(tmp_path / "index", wheel))
            package = {"sm120patch_package": f"sm120patch=={sm120patch.__version__}"}
            package["sm120patch_pip_args"] = f"--extra-index-url={url}"  # as the README shows it

        first = play(**package)
        assert recap(first.stdout)["localhost"]["failed"] == 0, first.stdout[-3000:]
        done = task_results(first.stdout, "localhost")
        assert done[INSTALL] == "changed" and done[APPLY] == "changed"
        assert recap(first.stdout)["localhost"]["ignored"] == 1 and NO_FLASHINFER in first.stdout  # the warning

        second = play(**package)
        assert recap(second.stdout)["localhost"]["changed"] == 0, second.stdout[-3000:]
        assert recap(second.stdout)["localhost"]["failed"] == 0

        reinstall_sglang(serving, "0.5.9")
        third = play(**package)
        assert recap(third.stdout)["localhost"]["changed"] == 1, third.stdout[-3000:]
        assert task_results(third.stdout, "localhost")[APPLY] == "changed"  # sm120patch wrote the files again
        if form == "index":
            assert [path for path in requested if path.endswith(".whl")] == [f"/simple/sm120patch/{wheel.name}"]

    verify = subprocess.run(
        [str(tmp_path / "tool" / "bin" / "sm120patch"), "verify", "--python", str(serving), "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert json.loads(verify.stdout)["ok"]


@pytest.mark.slow
@needs_ansible
def test_playbook_shows_which_hosts_cannot_run_the_fused_path_and_strict_fails_them(tmp_path: Path) -> None:
    """Three hosts: FlashInfer with the SM12x kernel, none, one without the kernel."""
    hosts = {
        "ready": serving_env(tmp_path / "ready", "0.5.20", "0.6.18"),
        "nofi": serving_env(tmp_path / "nofi", "0.5.9"),
        "oldfi": serving_env(tmp_path / "oldfi", "0.5.9", "0.6.3"),
    }
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        "".join(
            f"{name} " + " ".join(f"{k}={v}" for k, v in local_host(python, tmp_path / f"tool-{name}").items()) + "\n"
            for name, python in hosts.items()
        )
    )
    play = Play(snapshot(tmp_path), tmp_path, inventory=str(inventory))

    first = play()
    counts = recap(first.stdout)
    assert counts["ready"]["failed"] == 0 and counts["ready"]["ignored"] == 0 and counts["ready"]["changed"] >= 1
    assert counts["nofi"]["failed"] == 0 and counts["nofi"]["ignored"] == 1  # patched, and the warning shown
    assert counts["oldfi"]["failed"] == 1 and "refusing to patch, nothing was written" in first.stdout
    assert task_results(first.stdout, "oldfi")[INSTALL] == "changed"  # it got as far as apply
    assert len(re.findall(r"^ok: \[\w+ -> localhost\]", first.stdout.split("TASK [Build a wheel")[1], re.M)) == 1

    strict = play(sm120patch_strict=True)
    counts = recap(strict.stdout)
    assert (counts["ready"]["failed"], counts["ready"]["changed"], counts["ready"]["ignored"]) == (0, 0, 0)
    assert counts["nofi"]["failed"] == 1 and "[strict]: nothing was written: --strict refuses" in strict.stdout
    assert counts["oldfi"]["failed"] == 1


@pytest.mark.slow  # ansible-playbook: a second or more
@needs_ansible
def test_playbook_stops_on_a_path_that_names_nothing(tmp_path: Path) -> None:
    """Offline: the host fails before anything is installed, with a message that says why."""
    play = Play(REPO, tmp_path, **local_host(tmp_path / "python", tmp_path / "tool"))
    proc = play(sm120patch_package=str(tmp_path / "no-such-checkout"))
    assert recap(proc.stdout)["localhost"]["failed"] == 1
    assert "no such checkout or wheel on the controller" in proc.stdout
    assert not (tmp_path / "tool").exists()


@pytest.mark.slow  # builds the wheel (or the context) in full
def test_controller_wheel_is_the_same_bytes_every_time_and_the_checkout_stays_clean(tmp_path: Path) -> None:
    """Offline (setuptools from the test extras): what makes a rerun of the default "ok"."""
    checkout = snapshot(tmp_path)
    before = sorted(p.relative_to(checkout) for p in checkout.rglob("*"))
    script = checkout / "examples" / "ansible" / "build_wheel.py"
    wheels = []
    for out in ("a", "b"):
        proc = subprocess.run([sys.executable, str(script), str(checkout), str(tmp_path / out)], capture_output=True)
        assert proc.returncode == 0, proc.stderr
        wheels.append(Path(json.loads(proc.stdout)["wheel"]))
    assert wheels[0].name == f"sm120patch-{sm120patch.__version__}-py3-none-any.whl"
    assert wheels[0].read_bytes() == wheels[1].read_bytes()
    assert sorted(p.relative_to(checkout) for p in checkout.rglob("*")) == before


# --- a git checkout ------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return proc.stdout


@pytest.mark.slow
def test_checkout_stays_clean_and_knows_its_version(tmp_path: Path) -> None:
    """A tree laid out like sglang's repository (python/sglang, a pyproject whose version
    comes from the git tag), installed nowhere: the version comes from `git describe`."""
    repo = tmp_path / "sglang"
    package = copy_release("0.5.9", tmp_path / "site", hardlink=False)
    shutil.copytree(package, repo / "python" / "sglang")
    (repo / "python" / "sglang" / "_version.py").unlink()  # written by setuptools-scm at build, not tracked
    (repo / "python" / "pyproject.toml").write_text(
        '[project]\nname = "sglang"\ndynamic = ["version"]\n\n[tool.setuptools_scm]\nroot = ".."\n'
    )
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "sglang 0.5.9")
    git(repo, "tag", "v0.5.9")
    tool = [sys.executable, "-m", "sm120patch"]

    applied = subprocess.run(
        [*tool, "apply", "--sglang-path", str(repo / "python"), "--json"], capture_output=True, text=True
    )
    data = json.loads(applied.stdout)
    assert applied.returncode == 0, data["headline"]
    assert data["sglang"]["version"] == "0.5.9" and data["sglang"]["install_kind"] == "path"
    assert data["sglang"]["flashinfer_pinned"] == "0.6.3"
    assert any("sglang 0.5.9 pins 0.6.3" in w for w in data["warnings"])
    changed = sorted(line[3:] for line in git(repo, "status", "--porcelain").splitlines())
    assert changed == ["python/sglang/srt/layers/communicator.py", "python/sglang/srt/server_args.py"]

    (repo / "NOTES.md").write_text("local work\n")
    git(repo, "add", "NOTES.md")
    git(repo, "commit", "-q", "-m", "local work")  # a commit past the tag
    verify = subprocess.run(
        [*tool, "verify", "--sglang-path", str(repo / "python"), "--json"], capture_output=True, text=True
    )
    assert verify.returncode == 0
    version = json.loads(verify.stdout)["sglang"]["version"]
    assert re.fullmatch(r"0\.5\.9\+1\.g[0-9a-f]+", version)
    assert json.loads(verify.stdout)["sglang"]["flashinfer_pinned"] == "0.6.3"
    revert = subprocess.run([*tool, "revert", "--sglang-path", str(repo / "python")], capture_output=True, text=True)
    assert revert.returncode == 0, revert.stderr
    assert git(repo, "status", "--porcelain") == ""  # back to the commit, the state dir ignored

"""One daemon for everyone on a machine: the kernel says who is on the socket.

Run as root with real Unix accounts made here (CI runs as root: ROTA_REQUIRE_ROOT=1 makes
these fail rather than skip elsewhere). Other accounts run `rota` with Debian's
/usr/bin/python3.11 (the test venv's Python may live in root's 0700 home) and this checkout's
code and packages on PYTHONPATH.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rota_testing import DaemonProcess, kill_job_processes, unix_accounts, wait_until

ALICE, BOB = "rtu-alice", "rtu-bob"
SYSTEM_PYTHON = "/usr/bin/python3.11"
SRC = str(Path(__file__).resolve().parents[2] / "src")
SITE = sysconfig.get_paths()["purelib"]

if os.geteuid() != 0 or not Path(SYSTEM_PYTHON).exists():
    if os.environ.get("ROTA_REQUIRE_ROOT"):
        raise RuntimeError("the multi-user tests need root and /usr/bin/python3.11")
    pytest.skip("needs root (to make Unix accounts) and /usr/bin/python3.11",
                allow_module_level=True)


@pytest.fixture(scope="module")
def accounts() -> Iterator[dict[str, int]]:
    with unix_accounts(ALICE, BOB) as uids:
        as_other = subprocess.run(["runuser", "-u", BOB, "--", "test", "-r",
                                   f"{SRC}/rota/__init__.py"], check=False)
        assert as_other.returncode == 0, (f"{SRC} must be readable by other accounts for "
                                          "these tests (clone the repository where they can "
                                          "reach it)")
        yield uids


def _env_of(home: Path, **more: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "ROTA_HOME": str(home),
            "PYTHONPATH": f"{SRC}:{SITE}", "COLUMNS": "200", **more}


def rota_as(account: str, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`rota ARGS` run by ``account`` (no token: only the socket's peer credentials)."""
    return subprocess.run(["runuser", "-u", account, "--", "env", "-i",
                           *(f"{k}={v}" for k, v in _env_of(home, **env).items()),
                           SYSTEM_PYTHON, "-m", "rota", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def rota_json(account: str, home: Path, *args: str) -> dict[str, object]:
    r = rota_as(account, home, *args, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    out: dict[str, object] = json.loads(r.stdout)
    return out


@pytest.fixture
def shared_home() -> Iterator[Path]:
    """A home other accounts can reach the socket in (pytest's tmp_path is root's 0700)."""
    path = Path(tempfile.mkdtemp(prefix="rota-mu-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path / "home"
    kill_job_processes(path / "home")
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def root_daemon(accounts: dict[str, int], shared_home: Path) -> Iterator[DaemonProcess]:
    d = DaemonProcess(shared_home, extra_env={"ROTA_SHARED_ACCOUNT": "false"}).start()
    yield d
    d.stop()


def test_a_root_daemon_opens_its_socket_to_everyone_and_nothing_else(
        root_daemon: DaemonProcess) -> None:
    home = root_daemon.home
    assert home.stat().st_mode & 0o777 == 0o711  # traversable, not listable
    assert root_daemon.socket.stat().st_mode & 0o777 == 0o666
    for private in ("rota.db", "secrets.key"):
        if (home / private).exists():
            assert (home / private).stat().st_mode & 0o077 == 0, private
    r = subprocess.run(["runuser", "-u", ALICE, "--", "ls", str(home)], capture_output=True,
                       check=False)
    assert r.returncode != 0  # alice cannot list it
    r = subprocess.run(["runuser", "-u", ALICE, "--", "cat", str(home / "rota.db")],
                       capture_output=True, check=False)
    assert r.returncode != 0 and b"Permission denied" in r.stderr


def test_bob_uses_rota_through_the_socket_with_no_token_as_himself(
        root_daemon: DaemonProcess) -> None:
    home = root_daemon.home
    r = rota_as(BOB, home, "submit", "--hold", "--json", "--name", "bobs", "--", "true")
    assert r.returncode == 0, r.stdout + r.stderr
    job = json.loads(r.stdout)["jobs"][0]
    assert job["user"] == BOB
    queue = rota_json(BOB, home, "queue", "--all")
    assert [j["name"] for j in queue["jobs"] if j["user"] == BOB] == ["bobs"]  # type: ignore[index,union-attr]
    # created on first use, not an admin, its jobs under the account of its name
    with root_daemon.client() as c:
        users = {u["name"]: u for u in c.users()["users"]}
    assert users[BOB]["admin"] is False and users[BOB]["unix_account"] == BOB
    r = rota_as(BOB, home, "user", "list")
    assert r.returncode != 0 and "needs an admin" in r.stderr + r.stdout
    # alice is someone else: she may not cancel bob's job
    r = rota_as(ALICE, home, "cancel", "--yes", str(job["id"]))
    assert r.returncode != 0 and "belongs to rtu-bob" in r.stderr + r.stdout
    with root_daemon.client() as c:
        assert c.job(job["id"])["state"] == "held"


def test_an_admin_names_who_else_is_admin(root_daemon: DaemonProcess) -> None:
    with root_daemon.client() as c:
        c.add_user(ALICE, admin=True, unix_account=ALICE)
    me = rota_json(ALICE, root_daemon.home, "user", "list")
    assert {u["name"] for u in me["users"]} >= {ALICE}  # type: ignore[union-attr]


def test_a_socket_peer_cannot_pose_as_another_through_the_workers_header(
        root_daemon: DaemonProcess) -> None:
    """The header an API worker sets on what it forwards makes the request need a token;
    it never makes a local account the daemon's owner."""
    code = ("import http.client,socket,sys,json\n"
            "class C(http.client.HTTPConnection):\n"
            "    def connect(self):\n"
            "        self.sock=socket.socket(socket.AF_UNIX); self.sock.connect(sys.argv[1])\n"
            "c=C('localhost'); c.request('GET','/v1/users',headers={'x-rota-via':'tcp'})\n"
            "print(c.getresponse().status)\n"
            "c=C('localhost'); c.request('GET','/v1/whoami')\n"
            "print(c.getresponse().read().decode())\n")
    r = subprocess.run(["runuser", "-u", ALICE, "--", SYSTEM_PYTHON, "-c", code,
                        str(root_daemon.socket)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    status, whoami = r.stdout.splitlines()
    assert status == "401"
    assert json.loads(whoami) == {"user": ALICE, "admin": False, "via": "socket"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _daemon_as(account: str, home: Path, port: int, **env: str) -> subprocess.Popen[bytes]:
    home.mkdir()
    shutil.chown(home, account, account)
    proc = subprocess.Popen(
        ["runuser", "-u", account, "--", "env", "-i",
         *(f"{k}={v}" for k, v in _env_of(home, **env).items()),
         SYSTEM_PYTHON, "-m", "rota", "server", "--simulate", "2x24G",
         "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_until(lambda: (home / "rota.pid").exists(), timeout=60, what="bob's daemon")
    return proc


@pytest.mark.parametrize("shared", [False, True])
def test_a_daemon_not_run_as_root_refuses_another_users_jobs(
        accounts: dict[str, int], shared_home: Path, shared: bool) -> None:
    port = _free_port()
    proc = _daemon_as(BOB, shared_home, port, ROTA_SHARED_ACCOUNT=str(shared).lower())
    try:
        rota_json(BOB, shared_home, "user", "add", "carol")
        token = rota_json(BOB, shared_home, "token", "create", "--user", "carol")["token"]
        with httpx.Client(base_url=f"http://127.0.0.1:{port}",
                          headers={"Authorization": f"Bearer {token}"}, timeout=30) as c:
            r = c.post("/v1/jobs", json={"jobs": [{"command": ["true"], "hold": True}]})
            if shared:
                assert r.status_code == 201, r.text
            else:
                assert r.status_code == 403, r.text
                assert ("this daemon runs as rtu-bob, not root, so it runs rtu-bob's jobs "
                        "only") in r.json()["detail"]
                assert c.get("/v1/jobs").json()["jobs"] == []  # nothing was stored
        # bob's own jobs are his daemon's: always accepted
        r2 = rota_as(BOB, shared_home, "submit", "--hold", "--json", "--", "true")
        assert r2.returncode == 0, r2.stderr
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _wait_end(d: DaemonProcess, job_id: int) -> dict[str, object]:
    def ended() -> bool:
        with d.client() as c:
            return bool(c.job(job_id)["state"] in ("completed", "failed", "cancelled"))
    wait_until(ended, timeout=60, what=f"job {job_id} to end")
    with d.client() as c:
        return dict(c.job(job_id))


def _log(d: DaemonProcess, job_id: int) -> str:
    return (d.home / "logs" / f"{job_id}.log").read_text()


PROBE = r"""
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G) umask=$(umask)"
echo "home=$HOME user=$USER logname=$LOGNAME"
echo "daemon-env=${ROTA_SHARED_ACCOUNT:-none}"
for f in "$RH/rota.db" "$RH/secrets.key"; do
  if cat "$f" >/dev/null 2>&1; then echo "READ $f"; else echo "denied $f"; fi
done
for d in "$RH" "$RH/logs" "$RH/status"; do
  if ls "$d" >/dev/null 2>&1; then echo "READ $d"; else echo "denied $d"; fi
done
echo made > "$HOME/made-by-job"
"""
WHOAMI = ("import http.client,socket,sys\n"
          "class C(http.client.HTTPConnection):\n"
          "    def connect(self):\n"
          "        self.sock=socket.socket(socket.AF_UNIX); self.sock.connect(sys.argv[1])\n"
          "c=C('localhost'); c.request('GET','/v1/whoami')\n"
          "print('whoami', c.getresponse().read().decode())\n")


def test_a_users_job_runs_as_that_user_and_reaches_nothing_of_the_daemons(
        root_daemon: DaemonProcess, accounts: dict[str, int]) -> None:
    home = root_daemon.home
    # bob keeps a secret; alice's job must never see it
    r = subprocess.run(["runuser", "-u", BOB, "--", "env", "-i",
                        *(f"{k}={v}" for k, v in _env_of(home).items()),
                        SYSTEM_PYTHON, "-m", "rota", "secret", "set", "HF_TOKEN"],
                       input="hf_bobs_secret_value\n", capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    r = rota_as(BOB, home, "submit", "--json", "--secret", "HF_TOKEN", "--", "sh", "-c",
                "echo bob-ran")
    assert r.returncode == 0, r.stderr
    bobs = json.loads(r.stdout)["jobs"][0]["id"]
    assert _wait_end(root_daemon, bobs)["state"] == "completed"

    r = rota_as(ALICE, home, "submit", "--json", "--env", f"RH={home}", "--", "sh", "-c",
                PROBE + f"cat {home}/logs/{bobs}.log || echo denied-bobs-log; "
                        "env | grep hf_ || true")
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["jobs"][0]["id"]
    out = _wait_for_log(root_daemon, job_id)
    uid = accounts[ALICE]
    assert f"uid={uid} gid={uid}" in out, out
    assert "umask=0077" in out, out
    assert f"home=/home/{ALICE} user={ALICE} logname={ALICE}" in out, out
    assert "daemon-env=none" in out, out  # the root daemon's environment did not leak
    assert "READ" not in out, out
    assert out.count("denied ") == 5, out
    assert "denied-bobs-log" in out and "bob-ran" not in out, out
    assert "hf_bobs_secret_value" not in out
    made = Path(f"/home/{ALICE}/made-by-job")
    assert made.stat().st_uid == uid and made.stat().st_mode & 0o077 == 0
    log = home / "logs" / f"{job_id}.log"
    assert log.stat().st_uid == uid and log.stat().st_mode & 0o777 == 0o600


def _wait_for_log(d: DaemonProcess, job_id: int) -> str:
    job = _wait_end(d, job_id)
    out = _log(d, job_id)
    assert job["state"] == "completed", out
    return out


def test_a_users_job_is_that_user_on_the_daemons_socket(
        root_daemon: DaemonProcess, accounts: dict[str, int]) -> None:
    r = rota_as(ALICE, root_daemon.home, "submit", "--json", "--env", f"W={WHOAMI}", "--",
                "sh", "-c", f"{SYSTEM_PYTHON} -c \"$W\" {root_daemon.socket}")
    assert r.returncode == 0, r.stderr
    out = _wait_for_log(root_daemon, json.loads(r.stdout)["jobs"][0]["id"])
    assert 'whoami {"user":"rtu-alice","admin":false,"via":"socket"}' in out, out


def test_a_place_that_cannot_run_a_job_as_its_owner_refuses_it_at_submit(
        accounts: dict[str, int], shared_home: Path) -> None:
    shared_home.mkdir()
    (shared_home / "rota.toml").write_text(  # never reached: refused before
        '[pools.rc]\nengine = "ray"\nshared_workspaces = true\naddress = "http://127.0.0.1:9"\n')
    d = DaemonProcess(shared_home, extra_env={"ROTA_SHARED_ACCOUNT": "false"}).start()
    try:
        r = rota_as(BOB, d.home, "submit", "--pool", "rc", "--", "true")
    finally:
        d.stop()
    assert r.returncode != 0
    assert "pool rc (ray) cannot start a job as another Unix account yet" in r.stderr, \
        r.stderr
    assert "this job would run as rtu-bob" in r.stderr


@pytest.fixture
def system_python_daemon(accounts: dict[str, int], shared_home: Path
                         ) -> Iterator[DaemonProcess]:
    """A root daemon run by a Python every account may run (its shims run as the job's
    owner in their tmux sessions), with this checkout's code, as a system install has."""
    server = f"rota-mu-{os.getpid()}"
    d = DaemonProcess(shared_home, python=SYSTEM_PYTHON,
                      extra_env={"ROTA_SHARED_ACCOUNT": "false", "ROTA_TMUX_SOCKET": server,
                                 "PYTHONPATH": f"{SRC}:{SITE}"}).start(timeout=60)
    yield d
    d.stop()
    for name in (ALICE, BOB):
        subprocess.run(["runuser", "-u", name, "--", "tmux", "-L", server, "kill-server"],
                       capture_output=True, check=False)


SESSION_PROBE = PROBE + 'echo "tmux=$TMUX sty=$STY"\n'


@pytest.mark.parametrize("session", ["tmux", "screen"])
def test_a_users_session_job_runs_as_that_user_in_that_users_server(
        system_python_daemon: DaemonProcess, accounts: dict[str, int], session: str) -> None:
    if shutil.which(session) is None and not os.environ.get("ROTA_REQUIRE_ROOT"):
        pytest.skip(f"{session} is not installed")
    d = system_python_daemon
    home, uid = d.home, accounts[ALICE]
    r = rota_as(ALICE, home, "submit", "--json", "--session", session, "--env", f"RH={home}",
                "--", "sh", "-c", SESSION_PROBE)
    assert r.returncode == 0, r.stdout + r.stderr
    job_id = json.loads(r.stdout)["jobs"][0]["id"]
    out = _wait_for_log(d, job_id)
    assert f"uid={uid} gid={uid}" in out and "umask=0077" in out, out
    assert f"home=/home/{ALICE} user={ALICE} logname={ALICE}" in out, out
    assert "daemon-env=none" in out, out
    assert "READ" not in out and out.count("denied ") == 5, out
    if session == "tmux":  # alice's own tmux server: she attaches
        assert f"tmux=/tmp/tmux-{uid}/" in out, out
    else:
        assert re.search(rf"sty=\d+\.rota-{job_id}-", out), out
    made = Path(f"/home/{ALICE}/made-by-job")
    assert made.stat().st_uid == uid and made.stat().st_mode & 0o077 == 0
    log = home / "logs" / f"{job_id}.log"
    assert log.stat().st_uid == uid and log.stat().st_mode & 0o777 == 0o600
    status = home / "status"
    assert not [p.name for p in status.glob("*.job.json")]  # the job file, with its env, gone
    for p in status.glob(f"{job_id}-*"):  # the status and events files: alice's alone
        assert p.stat().st_uid in (0, uid) and p.stat().st_mode & 0o077 == 0, p

    # `rota attach` gives alice an argv for her own server: its session is there
    r = rota_as(ALICE, home, "submit", "--json", "--session", session, "--", "sleep", "60")
    assert r.returncode == 0, r.stderr
    sleeper = json.loads(r.stdout)["jobs"][0]["id"]

    def running() -> bool:
        with d.client() as c:
            return bool(c.job(sleeper)["state"] == "running")
    wait_until(running, timeout=60, what=f"alice's {session} job to run")
    with d.client() as c:
        argv = c.attach_argv(sleeper)
    if session == "tmux":
        assert argv[:4] == ["tmux", "-L", d.env["ROTA_TMUX_SOCKET"], "attach"], argv
        r = subprocess.run(["runuser", "-u", ALICE, "--", *argv[:3], "has-session", *argv[4:]],
                           capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stderr
    else:
        name = argv[2].split(".", 1)[1]
        assert name.startswith(f"rota-{sleeper}-"), argv
        assert argv == ["screen", "-r", f"{_screen_pid(ALICE, name)}.{name}"]
    assert rota_as(ALICE, home, "cancel", "--yes", str(sleeper)).returncode == 0


def _screen_pid(account: str, name: str) -> str:
    """The pid of ``account``'s screen session called ``name`` (from its own `screen -ls`:
    the session is in that account's screen folder; the name ends in the daemon home's tag,
    so a dead session of an earlier daemon's job of the same number is not it)."""
    r = subprocess.run(["runuser", "-u", account, "--", "screen", "-ls"], capture_output=True,
                       text=True, check=False)
    found = [line.split()[0].split(".")[0] for line in r.stdout.splitlines()
             if line.split() and line.split()[0].split(".", 1)[-1] == name]
    assert len(found) == 1, r.stdout
    return found[0]


def test_a_pipeline_of_another_account_is_refused_saying_why(
        root_daemon: DaemonProcess, shared_home: Path) -> None:
    """A round's folder is in the daemon's home, which bob's jobs cannot reach: his
    pipeline is refused at add, with the way out, and nothing is stored."""
    f = shared_home.parent / "p.yaml"
    f.write_text("version: 1\nname: bobs\nmodel_repo: /m\ndatasets: [{name: /d.jsonl, "
                 "field_instruction: q, field_output: a}]\n")
    f.chmod(0o644)
    r = rota_as(BOB, root_daemon.home, "pipeline", "add", str(f))
    assert r.returncode != 0
    assert "pipelines run only as the daemon's own account for now" in r.stderr, r.stderr
    assert "would run rtu-bob's jobs as rtu-bob" in r.stderr
    with root_daemon.client() as c:
        assert c.pipelines()["pipelines"] == []


def test_a_users_outputs_are_read_with_that_users_rights_and_its_workspace_is_its_own(
        root_daemon: DaemonProcess, accounts: dict[str, int]) -> None:
    """A root daemon reads alice's outputs as alice: what she can read is saved; a folder
    only root can read saves nothing but a note. Her workspace is hers alone, and bob
    cannot list her artifacts."""
    home = root_daemon.home
    secret = Path(tempfile.mkdtemp(prefix="rota-mu-root-only-", dir="/tmp"))  # 0700 root
    (secret / "key").write_text("root's own")
    work = Path(f"/home/{ALICE}/outputs-test")
    subprocess.run(["runuser", "-u", ALICE, "--", "mkdir", "-p", str(work)], check=True)
    script = ("import os; os.makedirs('out', exist_ok=True); "
              "open('out/result.txt', 'w').write('alice was here'); "
              "open(os.path.join(os.environ['ROTA_WORKSPACE'], 'cache'), 'w').write('x'); "
              "print('workspace', os.environ['ROTA_WORKSPACE'])")
    try:
        r = rota_as(ALICE, home, "submit", "--json", "--cwd", str(work), "--output", "out",
                    "--output", str(secret), "--", SYSTEM_PYTHON, "-c", script)
        assert r.returncode == 0, r.stderr
        job_id = json.loads(r.stdout)["jobs"][0]["id"]
        out = _wait_for_log(root_daemon, job_id)
        ws = home / "workspaces" / ALICE / "default"
        assert f"workspace {ws}" in out, out
        assert ws.stat().st_uid == accounts[ALICE] and ws.stat().st_mode & 0o777 == 0o700
        assert (ws / "cache").stat().st_uid == accounts[ALICE]

        def saved() -> dict[str, object]:
            return rota_json(ALICE, home, "artifacts", str(job_id))

        wait_until(lambda: saved()["state"] != "pending", timeout=60, what="the save")
        got = saved()
        assert got["state"] == "saved", got
        assert [f["path"] for f in got["files"]] == [  # type: ignore[attr-defined]
            "out/result.txt", "rota-card/card.html", "rota-card/card.md"]
        notes = " ".join(got["notes"])  # type: ignore[arg-type]
        assert secret.name in notes and "Permission denied" in notes, notes
        r = rota_as(BOB, home, "artifacts", str(job_id))
        assert r.returncode != 0 and "only its owner or an admin" in r.stderr, r.stderr
    finally:
        shutil.rmtree(secret, ignore_errors=True)
        subprocess.run(["rm", "-rf", str(work)], check=False)


# --- datasets: a private one is its owner's, a shared one everyone's ----------------------

ALICES_NOTES = "alice's private notes: the launch code is 0000\n"
SHARED_CORPUS = "a corpus every user may read\n"


def _dataset_folders(base: Path, owner: str, **folders: dict[str, str]) -> dict[str, Path]:
    """Folders of files the owner's `rota dataset add` reads (root's tmp_path is 0700)."""
    out = {}
    for name, files in folders.items():
        for rel, text in files.items():
            (base / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / name / rel).write_text(text)
        out[name] = base / name
    subprocess.run(["chown", "-R", f"{owner}:{owner}", str(base)], check=True)
    return out


@pytest.fixture
def dataset_base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rota-mu-data-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_private_dataset_is_its_owners_alone_and_a_shared_one_everyones(
        root_daemon: DaemonProcess, accounts: dict[str, int], dataset_base: Path) -> None:
    """Alice adds a private dataset and a shared one. Bob does not see the private one and
    cannot name it; his job reads the shared one. On this root daemon the cached copy of
    the private one is alice's, 0500, and bob's job cannot read it even by its path."""
    home = root_daemon.home
    folders = _dataset_folders(dataset_base, ALICE,
                               notes={"notes.txt": ALICES_NOTES, "sub/more.txt": "more\n"},
                               corpus={"train.txt": SHARED_CORPUS})
    notes = rota_json(ALICE, home, "dataset", "add", "notes", str(folders["notes"]))
    assert notes["made"] is True
    private = notes["version"]
    assert private["ref"] == f"{ALICE}/notes:v1" and private["shared"] is False  # type: ignore[index]
    shared = rota_json(ALICE, home, "dataset", "add", "corpus", str(folders["corpus"]),
                       "--shared")["version"]
    assert shared["shared"] is True  # type: ignore[index]

    # bob: the private one is not listed, not shown, and not his to name
    listed = rota_json(BOB, home, "dataset", "list")["datasets"]
    assert [(d["owner"], d["name"]) for d in listed] == [(ALICE, "corpus")]  # type: ignore[index,union-attr]
    assert [d["name"] for d in rota_json(ALICE, home, "dataset", "list")["datasets"]] == [  # type: ignore[index,union-attr]
        "corpus", "notes"]
    r = rota_as(BOB, home, "dataset", "show", f"{ALICE}/notes")
    assert r.returncode != 0 and "no dataset" in r.stderr, r.stderr
    for given in ("notes", f"{ALICE}/notes", f"{ALICE}/notes:v1"):
        r = rota_as(BOB, home, "submit", "--gpus", "0", "--dataset", given, "--", "true")
        assert r.returncode == 2, (given, r.stdout, r.stderr)
        assert f"no dataset {given.partition(':')[0]!r} you may read" in r.stderr, r.stderr
    r = rota_as(BOB, home, "dataset", "rm", f"{ALICE}/corpus")
    assert r.returncode != 0 and "only they or an admin" in r.stderr, r.stderr
    with root_daemon.client() as c:
        assert c.jobs(user=BOB) == []  # nothing queued

    # alice's job reads her private one: now it is in the cache, hers alone
    r = rota_as(ALICE, home, "submit", "--json", "--gpus", "0", "--dataset", "notes", "--",
                "sh", "-c", 'id -u; cat "$ROTA_DATASET_NOTES/notes.txt"; '
                'echo "at $ROTA_DATASET_NOTES"')
    assert r.returncode == 0, r.stderr
    out = _wait_for_log(root_daemon, json.loads(r.stdout)["jobs"][0]["id"])
    # a private copy is cached apart from the same content's others: its name is the
    # digest and its owner's uid, hashed (rota.server.storage.datasets.Datasets._slot)
    slot = hashlib.sha256(f"{private['digest']}:{accounts[ALICE]}".encode()).hexdigest()  # type: ignore[index]
    cached = home / "dataset-cache" / slot
    assert ALICES_NOTES in out and f"at {cached}" in out, out
    st = cached.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (
        accounts[ALICE], accounts[ALICE], 0o500)
    for f in ("notes.txt", "sub/more.txt"):
        fst = (cached / f).stat()
        assert (fst.st_uid, fst.st_mode & 0o777) == (accounts[ALICE], 0o400), f
    assert (cached / "sub").stat().st_mode & 0o777 == 0o500

    # bob's job reads the shared one, and not alice's private copy though it knows where
    r = rota_as(BOB, home, "submit", "--json", "--gpus", "0", "--dataset", "corpus",
                "--env", f"PRIVATE={cached}", "--", "sh", "-c",
                'id -u; cat "$ROTA_DATASET_CORPUS/train.txt"; '
                'if cat "$PRIVATE/notes.txt"; then echo READ-PRIVATE; '
                'else echo denied-private; fi; ls "$PRIVATE" || echo denied-list')
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)["jobs"][0]["id"]
    out = _wait_for_log(root_daemon, job)
    assert f"{accounts[BOB]}\n" in out and SHARED_CORPUS in out, out
    assert "denied-private" in out and "denied-list" in out, out
    assert "READ-PRIVATE" not in out and "launch code" not in out, out
    with root_daemon.client() as c:
        assert c.job(job)["spec"]["datasets"] == [f"{ALICE}/corpus:v1"]
    public = home / "dataset-cache" / str(shared["digest"])  # type: ignore[index]
    assert (public.stat().st_uid, public.stat().st_mode & 0o777) == (0, 0o555)
    assert (public / "train.txt").stat().st_mode & 0o777 == 0o444


def test_two_users_private_datasets_of_the_same_content_are_each_readable_by_its_owner(
        root_daemon: DaemonProcess, accounts: dict[str, int], dataset_base: Path) -> None:
    home = root_daemon.home
    for user in (ALICE, BOB):
        folder = _dataset_folders(dataset_base / user, user,
                                  corpus={"train.txt": SHARED_CORPUS})["corpus"]
        added = rota_json(user, home, "dataset", "add", "corpus", str(folder))
        assert added["version"]["ref"] == f"{user}/corpus:v1"  # type: ignore[index]
    outs = []
    for user in (ALICE, BOB):
        r = rota_as(user, home, "submit", "--json", "--gpus", "0", "--dataset", "corpus",
                    "--", "sh", "-c", 'cat "$ROTA_DATASET_CORPUS/train.txt"')
        assert r.returncode == 0, r.stderr
        job = json.loads(r.stdout)["jobs"][0]["id"]
        state = _wait_end(root_daemon, job)["state"]
        outs.append((user, state, _log(root_daemon, job)))
    assert all(state == "completed" and SHARED_CORPUS in out for _, state, out in outs), outs

"""The contract every process backend keeps (local, tmux, screen), run against each."""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from rota.backends.base import Backend, Handle
from rota.backends.common import KILLED, pid_alive
from rota.backends.registry import make_backend
from rota.errors import BackendError

from .conftest import PY, Env, py, wait_exit, wait_for, wait_text

# A job that says it is ready once its SIGTERM handler is in place, then waits.
WAIT_FOR_TERM = """
import signal, sys, time
mode = sys.argv[1]
if mode == "trap":
    def bye(*_):
        print("cleanup done", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
time.sleep(60)
"""


def test_true_exits_zero(env: Env, backend: Backend) -> None:
    h = env.launch(backend, env.req(["true"]))
    info = wait_exit(backend, h)
    assert (info.exit_code, info.signal, info.success) == (0, None, True)
    assert info.ended_at is not None
    assert h.backend == backend.name
    assert not backend.is_alive(h)


@pytest.mark.parametrize("argv,shell", [(["sh", "-c", "exit 3"], False), (["exit 3"], True)])
def test_failure_exit_code_recorded(env: Env, backend: Backend, argv: list[str],
                                    shell: bool) -> None:
    """The real code, also in screen, which the original tool reported as success."""
    info = wait_exit(backend, env.launch(backend, env.req(argv, shell=shell)))
    assert (info.exit_code, info.signal, info.success) == (3, None, False)


def test_output_lands_in_log(env: Env, backend: Backend) -> None:
    req = env.req(py("import sys; print('to stdout', flush=True); "
                     "sys.stderr.write('to stderr\\n')"))
    wait_exit(backend, env.launch(backend, req))
    assert req.log_path.read_text() == "to stdout\nto stderr\n"


def test_log_is_appended(env: Env, backend: Backend) -> None:
    req = env.req(["echo", "second"])
    req.log_path.parent.mkdir(parents=True)
    req.log_path.write_text("first\n")
    wait_exit(backend, env.launch(backend, req))
    assert req.log_path.read_text() == "first\nsecond\n"


def test_env_reaches_job(env: Env, backend_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job sees the daemon's environment (as it was when the backend was made)."""
    monkeypatch.setenv("ROTA_TEST_FROM_DAEMON", "inherited")
    backend = env.backend(backend_name)
    out = env.tmp / "env.json"
    keys = ["CUDA_VISIBLE_DEVICES", "WEIRD", "ROTA_TEST_FROM_DAEMON"]
    req = env.req(py("import json, os, sys; json.dump({k: os.environ.get(k) for k in "
                     "sys.argv[2:]}, open(sys.argv[1], 'w'))", str(out), *keys),
                  env={"CUDA_VISIBLE_DEVICES": "1,3", "WEIRD": "a b;$(x)'\"\n"})
    assert wait_exit(backend, env.launch(backend, req)).exit_code == 0
    assert json.loads(out.read_text()) == {"CUDA_VISIBLE_DEVICES": "1,3",
                                           "WEIRD": "a b;$(x)'\"\n",
                                           "ROTA_TEST_FROM_DAEMON": "inherited"}


def test_cwd_honoured(env: Env, backend: Backend) -> None:
    work = env.tmp / "work dir; x"
    work.mkdir()
    req = env.req(py("import os; open('here.txt', 'w').write(os.getcwd())"), cwd=str(work))
    assert wait_exit(backend, env.launch(backend, req)).exit_code == 0
    assert (work / "here.txt").read_text() == str(work)


def test_sigterm_to_group_recorded(env: Env, backend: Backend) -> None:
    req = env.req(py(WAIT_FOR_TERM, "plain"))
    h = env.launch(backend, req)
    wait_text(req.log_path, "ready")
    assert backend.is_alive(h)
    assert backend.collect(h) is None
    backend.signal(h, signal.SIGTERM)
    info = wait_exit(backend, h)
    assert (info.exit_code, info.signal) == (None, signal.SIGTERM)  # shim exits 128+15 = 143
    assert info.ended_at is not None


def test_job_that_traps_sigterm_records_its_own_code(env: Env, backend: Backend) -> None:
    req = env.req(py(WAIT_FOR_TERM, "trap"))
    h = env.launch(backend, req)
    wait_text(req.log_path, "ready")
    backend.signal(h, signal.SIGTERM)
    info = wait_exit(backend, h)
    assert (info.exit_code, info.signal) == (0, None)
    assert "cleanup done" in req.log_path.read_text()


def test_sigkill_reported_as_killed(env: Env, backend: Backend) -> None:
    req = env.req(py(WAIT_FOR_TERM, "plain"))
    h = env.launch(backend, req)
    wait_text(req.log_path, "ready")
    backend.signal(h, signal.SIGKILL)
    info = wait_exit(backend, h)  # the local runner outlives the group: it saw when
    assert (info.exit_code, info.signal) == (KILLED.exit_code, KILLED.signal)
    assert not backend.is_alive(h)
    backend.signal(h, signal.SIGTERM)  # a group already gone is not an error


def test_signal_reaches_grandchildren(env: Env, backend: Backend) -> None:
    """The job's own children are in the group too: nothing is left behind."""
    pidfile = env.tmp / "grandchild.pid"
    req = env.req([f"sleep 60 & echo $! > '{pidfile}'; echo ready; wait"], shell=True)
    h = env.launch(backend, req)
    wait_text(req.log_path, "ready")
    grandchild = int(pidfile.read_text())
    assert pid_alive(grandchild)
    backend.signal(h, signal.SIGKILL)
    wait_exit(backend, h)
    wait_for(lambda: not pid_alive(grandchild), what="the grandchild to die")


def test_sigkill_reaches_children_in_sessions_of_their_own(env: Env, backend: Backend) -> None:
    """Launchers like torchrun put each worker in a new session: SIGKILL must not orphan
    them (they would keep their GPUs)."""
    pidfile = env.tmp / "worker.pid"
    launcher = (
        "import subprocess, sys, time\n"
        "w = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        f"open({str(pidfile)!r}, 'w').write(str(w.pid))\n"
        "print('ready', flush=True)\n"
        "w.wait()\n")
    req = env.req(py(launcher))
    h = env.launch(backend, req)
    wait_text(req.log_path, "ready")
    worker = int(pidfile.read_text())
    assert os.getpgid(worker) != h.pid and pid_alive(worker)
    backend.signal(h, signal.SIGKILL)
    wait_exit(backend, h)
    wait_for(lambda: not pid_alive(worker), what="the worker in its own session to die")


def test_process_group_is_the_shims(env: Env, backend: Backend) -> None:
    req = env.req(py(WAIT_FOR_TERM, "plain"))
    h = env.launch(backend, req)
    wait_text(req.log_path, "ready")
    status = backend.read_status(req.status_path)
    assert status is not None
    assert status["shim_pid"] == h.pid == status["pgid"] == os.getpgid(h.pid)
    shim = psutil.Process(h.pid)  # the local runner starts the job itself: no shim
    job = [p for p in [shim, *shim.children(recursive=True)] if "ready" in " ".join(p.cmdline())]
    assert job and all(os.getpgid(p.pid) == h.pid for p in job)
    backend.signal(h, signal.SIGKILL)


def test_job_survives_its_launcher_and_is_adopted(env: Env, backend_name: str) -> None:
    """Launched by a Python process that then exits (a daemon crash); a new backend
    instance, built from the stored handle JSON, finds it running and then its status."""
    go = env.tmp / "go"
    req = env.req(py("import os, sys, time\nwhile not os.path.exists(sys.argv[1]): "
                     "time.sleep(0.02)\nsys.exit(7)", str(go)))
    launcher = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from rota.backends.base import LaunchRequest\n"
        "from rota.backends.registry import make_backend\n"
        "a = json.loads(sys.argv[1])\n"
        "req = LaunchRequest(**{**a, 'log_path': Path(a['log_path']), "
        "'status_path': Path(a['status_path'])})\n"
        "runner = Path(sys.argv[4]) / 'runner.sock' if sys.argv[2] == 'local' else None\n"
        "b = make_backend(sys.argv[2].removesuffix('-shim'), tmux_socket=sys.argv[3],\n"
        "                 screendir=sys.argv[4], runner_socket=runner)\n"
        "print(json.dumps(b.launch(req).to_json()))\n"
    )
    args = {"job_id": req.job_id, "attempt": 1, "argv": req.argv, "shell": False, "env": {},
            "cwd": None, "conda": None, "log_path": str(req.log_path),
            "status_path": str(req.status_path), "session_name": req.session_name}
    r = subprocess.run([PY, "-c", launcher, json.dumps(args), backend_name, env.tmux_socket,
                        env.screendir], capture_output=True, text=True, timeout=30, check=True)
    h = Handle.from_json(json.loads(r.stdout))
    env.handles.append(h)
    gc.collect()
    fresh = env.backend(backend_name)
    assert fresh.is_alive(h)
    assert fresh.collect(h) is None
    go.touch()
    info = wait_exit(fresh, h)
    assert (info.exit_code, info.signal) == (7, None)


def test_locate_after_a_restart(env: Env, backend_name: str) -> None:
    """What recovery asks a fresh backend: the attempt's process from the stored handle or,
    where the daemon died before storing one, from the backend's own records; whether it
    still runs; how it ended; and nothing where no launch happened."""
    launcher = env.backend(backend_name)
    go = env.tmp / "go"
    req = env.req(py(f"import os, time\nwhile not os.path.exists({str(go)!r}): "
                     "time.sleep(0.02)\nraise SystemExit(5)"))
    started = time.time()
    h = env.launch(launcher, req)
    fresh = env.backend(backend_name)
    wait_for(lambda: fresh.locate(None, h.status_path, started).handle is not None,
             what="the attempt in the backend's records")
    found = fresh.locate(None, h.status_path, started)
    assert found.handle is not None and found.handle.pid == h.pid and found.ended is None
    assert fresh.locate(h, h.status_path, started).ended is None
    go.touch()
    wait_exit(fresh, h)
    ended = fresh.locate(h, h.status_path, started).ended
    assert ended is not None and (ended.exit_code, ended.signal) == (5, None)
    nothing = env.req(["true"])
    assert fresh.locate(None, str(nothing.status_path), started).handle is None


def test_handle_survives_json(env: Env, backend: Backend) -> None:
    h = env.launch(backend, env.req(["true"]))
    again = Handle.from_json(json.loads(json.dumps(h.to_json())))
    assert again == h
    assert wait_exit(backend, again).exit_code == 0


def test_program_not_found(env: Env, backend: Backend) -> None:
    req = env.req(["rota-no-such-program-xyz", "arg"])
    info = wait_exit(backend, env.launch(backend, req))
    assert (info.exit_code, info.signal) == (127, None)
    log = req.log_path.read_text()
    assert "rota: cannot run 'rota-no-such-program-xyz'" in log
    assert "Traceback" not in log


def test_program_not_executable(env: Env, backend: Backend) -> None:
    script = env.tmp / "not-executable.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    req = env.req([str(script)])
    info = wait_exit(backend, env.launch(backend, req))
    assert info.exit_code == 126
    assert "Permission denied" in req.log_path.read_text()


NASTY = ["a b", "it's", 'say "hi"', "x; touch PWNED1", "$(touch PWNED2)", "`touch PWNED3`",
         "a,b,c", "x;", ";", "\\;", "&&", "|", "> out", "#{pane_id}", "$HOME", "~", "*",
         "", "-e", "--", "line\nbreak", "tab\there", "ünïcödé"]


def test_arguments_reach_program_unchanged(env: Env, backend: Backend) -> None:
    """No shell, and no tmux/screen command parsing, sits between argv and the program."""
    out = env.tmp / "argv.json"
    req = env.req(py("import json, sys; json.dump(sys.argv[2:], open(sys.argv[1], 'w'))",
                     str(out), *NASTY), cwd=str(env.tmp))
    assert wait_exit(backend, env.launch(backend, req)).exit_code == 0
    assert json.loads(out.read_text()) == NASTY
    assert not list(env.tmp.glob("PWNED*"))
    assert not (env.tmp / "out").exists()


def test_shell_job_uses_shell(env: Env, backend: Backend) -> None:
    req = env.req(["echo \"$GREETING\" | tr a-z A-Z; exit 4"], shell=True,
                  env={"GREETING": "hello"})
    info = wait_exit(backend, env.launch(backend, req))
    assert info.exit_code == 4
    assert req.log_path.read_text() == "HELLO\n"


def test_conda_wraps_argv(env: Env, backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake conda records how it was called and runs the rest, like ``conda run``."""
    fake = env.tmp / "fake-conda"
    fake.write_text('#!/bin/sh\necho "conda $1 $2 $3 $4"\nshift 4\nexec "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("CONDA_EXE", str(fake))
    req = env.req(["echo", "in env"], conda="my env")
    assert wait_exit(backend, env.launch(backend, req)).exit_code == 0
    assert req.log_path.read_text() == "conda run -n my env --no-capture-output\nin env\n"


def test_check_rejects_missing_cwd(env: Env, backend: Backend) -> None:
    missing = str(env.tmp / "nope")
    with pytest.raises(BackendError, match="nope"):
        backend.check(env.req(["true"], cwd=missing))
    with pytest.raises(BackendError, match="nope"):
        backend.launch(env.req(["true"], cwd=missing))
    afile = env.tmp / "file"
    afile.write_text("")
    with pytest.raises(BackendError, match="is not a directory"):
        backend.check(env.req(["true"], cwd=str(afile)))


def test_check_rejects_missing_conda(env: Env, backend: Backend,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONDA_EXE", raising=False)
    empty = env.tmp / "empty-bin"
    empty.mkdir()
    # keep tmux/screen findable, hide any conda
    dirs = [str(Path(p).parent) for p in map(shutil.which, ("tmux", "screen")) if p]
    monkeypatch.setenv("PATH", os.pathsep.join([str(empty), *dirs]))
    req = env.req(["true"], conda="torch")
    with pytest.raises(BackendError, match="conda environment 'torch' requested but conda is "
                                           "not installed on this machine"):
        backend.check(req)


def test_status_file_of_a_previous_attempt_is_ignored(env: Env, backend: Backend) -> None:
    req = env.req(py(WAIT_FOR_TERM, "plain"))
    req.status_path.parent.mkdir(parents=True)
    req.status_path.write_text(json.dumps({"shim_pid": 1, "child_pid": 2, "started_at": 1.0,
                                           "exit_code": 0, "signal": None, "ended_at": 2.0}))
    h = env.launch(backend, req)
    assert h.pid != 1
    assert backend.collect(h) is None
    backend.signal(h, signal.SIGKILL)


def test_registry() -> None:
    assert make_backend("none").name == "local"
    assert make_backend("local").name == "local"
    assert make_backend("tmux", tmux_socket="s").name == "tmux"
    assert make_backend("screen").name == "screen"
    with pytest.raises(BackendError, match="local, none, tmux, screen"):
        make_backend("docker-swarm")
    assert make_backend("tmux").capabilities.attachable
    assert not make_backend("local").capabilities.attachable


def test_a_runner_that_cannot_start_leaves_the_shell_shim(env: Env) -> None:
    """A socket path longer than a Unix socket's limit: the jobs still run, each through
    a shell shim."""
    deep = env.tmp / ("d" * 120)
    deep.mkdir()
    backend = make_backend("local", runner_socket=deep / "runner.sock")
    req = env.req(["sh", "-c", "echo ran; exit 3"])
    h = env.launch(backend, req)
    assert "runner" not in h.extra
    assert wait_exit(backend, h).exit_code == 3
    assert "ran" in req.log_path.read_text()


def test_a_runner_whose_log_cannot_be_opened_leaves_the_shell_shim(env: Env) -> None:
    """Any OSError on the way to a runner (here its log is a directory) is the backend's
    error, and the jobs run through a shell shim: never an error out of the launch."""
    where = env.tmp / "r"
    (where / "runner.log").mkdir(parents=True)
    backend = make_backend("local", runner_socket=where / "runner.sock")
    req = env.req(["sh", "-c", "echo ran; exit 4"])
    h = env.launch(backend, req)
    assert "runner" not in h.extra
    assert wait_exit(backend, h).exit_code == 4
    assert "ran" in req.log_path.read_text()

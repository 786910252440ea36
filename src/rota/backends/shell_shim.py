"""The fast shim: a fixed POSIX sh script that runs a job and records its exit status.

The local backend starts every job through it as ``/bin/sh -c SCRIPT rota-shim STATUS LOG
HEADER DIR ARGV...``: the job's argv arrives as positional parameters and is run with ``exec "$@"``
in a subshell, so it is never parsed as shell text, and a program named like a shell
builtin (``echo``, ``exit``) is the program on PATH, as with ``execvp``. Starting ``sh``
costs well under a millisecond, against about 50 ms for the Python shim
(``rota.backends.shim``), which the tmux/screen backends keep because they need its tee
of the output to the terminal and the log.

The status file is JSON lines, appended: ``{"shim_pid", "pgid"}`` when the shim starts and
``{"shim_pid", "exit_status"}`` when the job has ended; ``common.read_status`` merges them.
Each line is one small ``write`` with O_APPEND, so a reader sees whole lines or none.

A shell reports a job killed by signal N as exit status 128+N, the convention shells,
Docker and Kubernetes share; ``read_status`` reads it back that way, so a program that
really calls ``exit(137)`` is recorded as killed by signal 9.
"""

from __future__ import annotations

from pathlib import Path

#: $0 of the shim: names it in error messages and lets recovery find it by its argv.
MARK = "rota-shim"

SHELL = "/bin/sh"

#: $1 status file, $2 log file, $3 a line for the log, $4 working directory ('' for the
#: daemon's), then the job's argv. The shim opens (creates) the log itself, off the
#: daemon's path; ``true`` first, because a failed redirection of ``exec`` would end the
#: shell without a record. The shim survives HUP/INT/TERM with a handler (an ignored
#: signal would be inherited by the job): the job, in the same process group, gets them too
#: and decides; the shim stays to record how it ended. A trap runs only after the
#: foreground job has ended.
SCRIPT = r"""trap : HUP INT TERM
st=$1 log=$2 dir=$4
printf '{"shim_pid": %d, "pgid": %d}\n' $$ $$ >>"$st"
end() { printf '{"shim_pid": %d, "exit_status": %d}\n' $$ "$1" >>"$st"; exit "$1"; }
true 2>/dev/null >>"$log" || end 126
exec >>"$log" 2>&1
[ -z "$3" ] || printf '%s\n' "$3"
shift 4
if [ -n "$dir" ] && ! cd -- "$dir"; then
  printf "rota: cannot enter the working directory '%s'\n" "$dir" >&2; end 126
fi
if ! command -v -- "$1" >/dev/null 2>&1; then
  printf "rota: cannot run '%s': command not found\n" "$1" >&2; end 127
fi
(exec "$@")
end $?
"""


def shell_shim_argv(status_path: Path, log_path: Path, header: str, cwd: str | None,
                    job_argv: list[str]) -> list[str]:
    """The argv that runs ``job_argv`` under the shim; values only ever as parameters."""
    return [SHELL, "-c", SCRIPT, MARK, str(status_path), str(log_path), header, cwd or "",
            *job_argv]


def status_from_exit_status(status: int) -> tuple[int | None, int | None]:
    """(exit_code, signal) from a shell's exit status (128+N: killed by signal N)."""
    if 128 < status < 128 + 65:
        return None, status - 128
    return status, None

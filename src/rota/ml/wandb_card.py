"""A job's card added to its Weights & Biases run, in a process of its own.

The daemon never imports wandb (``wandb.init`` keeps global state, starts a service
process and hooks the console): when a ``--wandb`` job ends for good it runs this module
(rota.server.tracking.trackers), as the job's own account under a root daemon, with only W&B's
environment: the run id Rota gave the job, its project and entity, the API key from the
user's stored secret and the job's own ``WANDB_*`` (``WANDB_MODE``, ``WANDB_BASE_URL``).
It continues the run (``resume="allow"``), saves ``CARD_DIR/rota/*`` as the run's files
``rota/card.md``..., and finishes it with the job's outcome.

Offline, W&B writes a second run folder for the same run id beside the job's own (same
``WANDB_DIR``), so one ``wandb sync`` of that ``wandb/`` folder uploads both.

Only the standard library and wandb are used: the daemon runs this file's source with
``python -I -c``, with an interpreter that need not have Rota. By hand:
``python -m rota.ml.wandb_card CARD_DIR``. Exit status 0, with the run's folder on stdout;
else one line on stderr: 2 for a bad call, 3 when wandb is not installed, 1 when W&B
failed.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from collections.abc import Mapping

#: the folder in CARD_DIR, and in the run's files, that holds the card
FOLDER = "rota"
#: what the daemon waits for the whole attachment before it kills it
TIMEOUT_S = 120.0
#: the job's own W&B settings that the card's run does not take (its own are set here)
_NOT_TAKEN = frozenset({"WANDB_DIR", "WANDB_CONSOLE", "WANDB_SILENT", "WANDB_RESUME"})
#: what the failure line starts with (the daemon looks for it among wandb's own lines)
SAID = "rota-wandb-card: "


def is_offline(env: Mapping[str, str]) -> bool:
    return env.get("WANDB_MODE", "").lower() in ("offline", "dryrun")


def is_disabled(env: Mapping[str, str]) -> bool:
    """W&B switched off in the job: it has no run to add to."""
    return env.get("WANDB_MODE", "").lower() == "disabled" \
        or env.get("WANDB_DISABLED", "").lower() in ("1", "true", "yes")


def wandb_dir(env: Mapping[str, str], *, offline_dir: str | None, cwd: str | None,
              private: str) -> str:
    """The card run's ``WANDB_DIR``: offline, the folder holding the ``wandb/`` folder of
    the job's run (the one its "wandb sync DIR" hint named, else the job's own WANDB_DIR,
    else its cwd: where wandb writes by default), so both runs sit side by side; online,
    ``private`` (a temporary folder, removed afterwards)."""
    if not is_offline(env):
        return private
    base = cwd or "/"
    if offline_dir:
        return os.path.dirname(os.path.dirname(os.path.join(base, offline_dir)))
    return os.path.join(base, env.get("WANDB_DIR") or ".")


def environment(job_env: Mapping[str, str], rota_env: Mapping[str, str], *,
                offline_dir: str | None, cwd: str | None, private: str, home: str,
                path: str) -> dict[str, str]:
    """The process's whole environment (nothing of the daemon's own): the job's
    ``WANDB_*``, Rota's over them (as at the job's launch), offline when the job's output
    named its offline run (whatever set that mode), HOME, PATH and the ``WANDB_DIR`` that
    ``wandb_dir`` chooses."""
    env = {k: v for k, v in job_env.items() if k.startswith("WANDB_") and k not in _NOT_TAKEN}
    env.update({k: v for k, v in rota_env.items() if k.startswith("WANDB_")})
    if offline_dir:
        env["WANDB_MODE"] = "offline"
    # (the job's own WANDB_DIR says where its offline run went when its output did not)
    directory = wandb_dir({**job_env, **env}, offline_dir=offline_dir, cwd=cwd,
                          private=private)
    env.update(HOME=home, PATH=path, LC_ALL="C.UTF-8", WANDB_DIR=directory,
               WANDB_SILENT="true")
    return env


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rota.ml.wandb_card",
                                description="Add a Rota job's card to its W&B run.")
    p.add_argument("card_dir", help="folder whose rota/ folder holds the card's files")
    p.add_argument("--exit-code", type=int, default=0,
                   help="the run's exit code when finished (non-zero: the job failed)")
    return p.parse_args(argv)


def _fail(status: int, why: str) -> int:
    print(SAID + " ".join(why.split()), file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    card_dir = os.path.abspath(args.card_dir)
    files = sorted(glob.glob(os.path.join(glob.escape(card_dir), FOLDER, "*")))
    if not files:
        return _fail(2, f"no card files in {os.path.join(card_dir, FOLDER)}")
    run_id = os.environ.get("WANDB_RUN_ID")
    if not run_id:
        return _fail(2, "WANDB_RUN_ID is not set: no run to add the card to")
    try:
        import wandb
    except ImportError:
        return _fail(3, f"wandb is not installed for {sys.executable}")
    try:
        run = wandb.init(id=run_id, resume="allow", settings=wandb.Settings(
            console="off", symlink=False, silent=True, save_code=False, disable_git=True,
            x_disable_stats=True, x_disable_meta=True, x_save_requirements=False))
        # copied (symlink=False): CARD_DIR goes once this ends, an offline run stays
        run.save(os.path.join(card_dir, FOLDER, "*"), base_path=card_dir,
                 policy="now")
        sync_dir = run.settings.sync_dir
        run.finish(exit_code=args.exit_code)
    except Exception as e:  # one line, whatever wandb raised
        return _fail(1, f"W&B: {type(e).__name__}: {e}")
    print(sync_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How an engine's answer about an ended job becomes the attempt's end (exit_info)."""

from rota.backends.engine import EngineState, EngineStatus
from rota.backends.engine_backend import exit_info
from rota.core.outcome import Exited


def _how(status: EngineStatus) -> str:
    info = exit_info(status)
    assert info is not None
    return Exited(info.exit_code, info.signal, why=info.why).how


def test_a_job_cancelled_in_its_engine_reads_as_the_engine_said() -> None:
    # sacct/Ray/Kubernetes answer a job cancelled there with no exit code and no signal
    status = EngineStatus("41", EngineState.ENDED, reason="CANCELLED by 0", ended_at=5.0)
    assert _how(status) == "its engine ended it: CANCELLED by 0"
    assert "None" not in _how(EngineStatus("41", EngineState.ENDED))


def test_an_exit_code_or_signal_is_told_as_such() -> None:
    assert _how(EngineStatus("1", EngineState.ENDED, reason="FAILED", exit_code=3)) \
        == "exit code 3"
    assert _how(EngineStatus("1", EngineState.ENDED, signal=9)) == "killed by signal 9"
    assert exit_info(EngineStatus("1", EngineState.RUNNING)) is None

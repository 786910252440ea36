"""How an attempt's end reads (rota.core.outcome.Exited.how)."""

from rota.core.outcome import Exited


def test_an_end_with_neither_code_nor_signal_does_not_claim_a_signal() -> None:
    assert Exited(None, None).how == "ended with no exit code or signal recorded"
    assert "None" not in Exited(None, None).how
    assert Exited(None, 9).how == "killed by signal 9"
    assert Exited(3, None).how == "exit code 3"

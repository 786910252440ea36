"""The SDK over TCP (`rota server --listen`) with bearer tokens."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from sdk_helpers import Sdk, held, printer

import rota
from rota import JobState
from rota.errors import Forbidden, Unauthorized

Unique = Callable[[str], str]


def test_a_token_is_needed_and_names_the_user(sdk: Sdk, unique: Unique) -> None:
    with rota.Client(url=sdk.url) as anon, pytest.raises(Unauthorized) as caught:
        anon.list()
    assert "rota token create" in str(caught.value)
    with rota.Client(url=sdk.url, token="rota_not-a-real-token") as bad, \
            pytest.raises(Unauthorized, match="unknown or revoked"):
        bad.whoami()

    user = unique("ada").replace("-", "")
    token = sdk.token_for(user)
    with rota.Client(url=sdk.url, token=token) as c:
        me = c.whoami()
        assert (me.user, me.admin, me.via) == (user, False, "tcp")
        job = c.submit(command=printer("over tcp"), gpus=0, name=unique("tcp"))
        assert job.user == user  # recorded from the token
        assert c.wait(job.id, timeout=60).state is JobState.COMPLETED
        assert "over tcp\n" in "".join(c.logs(job.id, follow=True))
        assert job.id in {j.id for j in c.list(user=user).items}


def test_url_and_token_come_from_the_environment(sdk: Sdk, unique: Unique,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    user = unique("env").replace("-", "")
    monkeypatch.setenv("ROTA_URL", sdk.url)
    monkeypatch.setenv("ROTA_TOKEN", sdk.token_for(user))
    with rota.Client() as c:
        assert c.endpoint.socket_path is None and c.whoami().user == user

    async def main() -> str:
        async with rota.AsyncClient() as ac:
            return (await ac.whoami()).user

    assert asyncio.run(main()) == user


def test_a_user_cannot_touch_another_users_job(sdk: Sdk, unique: Unique) -> None:
    alice, bob = unique("alice").replace("-", ""), unique("bob").replace("-", "")
    with rota.Client(url=sdk.url, token=sdk.token_for(alice)) as a, \
            rota.Client(url=sdk.url, token=sdk.token_for(bob)) as b:
        job = a.submit(held(unique("hers")))
        assert b.get(job.id).user == alice  # the queue is visible to all
        for act in (b.cancel, b.hold, b.release, b.requeue):
            with pytest.raises(Forbidden, match=f"belongs to {alice}"):
                act(job.id)
        with pytest.raises(Forbidden):
            list(b.logs(job.id))
        with pytest.raises(Forbidden, match="needs an admin"):
            b.pause_gpu(0)
        assert a.cancel(job.id).state is JobState.CANCELLED

    async def as_bob() -> None:
        async with rota.AsyncClient(url=sdk.url, token=sdk.token_for(f"{bob}x")) as ab:
            other = await ab.submit(held(unique("his")))
            async with rota.AsyncClient(url=sdk.url, token=sdk.token_for(f"{alice}x")) as aa:
                with pytest.raises(Forbidden):
                    await aa.cancel(other.id)
            await ab.cancel(other.id)

    asyncio.run(as_bob())

"""The limits an evaluation config may set for its harness (``harness.limits``): what
the config checks against each harness's declaration, and what the harnesses read. Its own
module, so that the harnesses need not import the config that validates against them."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_instances: int | None = Field(default=None, ge=1, description="examples per task "
                                      "at most (all: none given)")
    num_fewshot: int | None = Field(default=None, ge=0)
    batch_size: int = Field(default=8, ge=1, le=4096)
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    max_length: int | None = Field(default=None, ge=16, description="tokens per example")

    #: each limit as a refusal names it (``the helm harness does not take a batch size``)
    NOUNS: ClassVar[dict[str, str]] = {
        "max_instances": "a maximum number of instances", "num_fewshot": "a few-shot count",
        "batch_size": "a batch size", "dtype": "a dtype", "max_length": "a maximum length"}

    def asked(self) -> list[str]:
        """The limits the config sets: written in it, and neither null nor ``auto`` (which
        leave the choice to the harness)."""
        return [name for name in type(self).model_fields if name in self.model_fields_set
                and getattr(self, name) not in (None, "auto")]

"""Whether a job can ever run on this machine as it is now, and if not, why in words.

One pure function, used where a job is submitted (a job that can never run is refused
unless forced) and by the scheduler for a job that waits anyway (its `rota why`), so the
two say the same thing. The machine is given as its GPUs' total memory by index: what is
free now does not matter here, only what exists.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping

from rota.core.snapshot import MILLI
from rota.units import format_gpu_set, format_memory


def need_text(gpus_milli: int, gpu_mem: int | None) -> str:
    """What a job asks for, as a person says it: '2 whole GPUs with 40.0 GiB free memory
    each', '0.5 of a GPU'."""
    if gpus_milli < MILLI:
        text = f"{gpus_milli / MILLI:g} of a GPU"
    else:
        n = gpus_milli // MILLI
        text = f"{n} whole GPU{'s' if n != 1 else ''}"
    if gpu_mem:
        text += f" with {format_memory(gpu_mem)} free memory each"
    return text


def never_runnable(gpus_milli: int, gpu_mem: int | None, allowed: Collection[int] | None,
                   memory_totals: Mapping[int, int],
                   node_of: Mapping[int, int] | None = None) -> str | None:
    """Why a job asking for ``gpus_milli`` thousandths of GPUs (0: CPU only) with
    ``gpu_mem`` bytes on each, on ``allowed`` GPUs (None: any), can never start on GPUs
    of these total memories (by index); None when it can. ``node_of`` (GPU index -> node;
    None: one machine) keeps a job of k whole GPUs to k GPUs of one node."""
    if gpus_milli <= 0:
        return None
    scope = sorted(allowed) if allowed is not None else sorted(memory_totals)
    present = [i for i in scope if i in memory_totals]
    shown = format_gpu_set(frozenset(allowed)) if allowed else ""
    where = f"allowed GPUs {{{shown}}}" if allowed else "GPUs"
    need = need_text(gpus_milli, gpu_mem)
    whole = gpus_milli // MILLI
    if not present and allowed is None:
        return f"needs {need} but this machine has no GPUs"
    if not present:
        return f"needs {need} but none of its allowed GPUs {{{shown}}} exist on this machine"
    if whole > len(present):
        return f"needs {need} but only {len(present)} {where} exist"
    if node_of is not None and whole > 1:
        return _never_on_a_node(need, whole, gpu_mem, present, memory_totals, node_of, where)
    if not gpu_mem:
        return None
    roomy = sum(1 for i in present if memory_totals[i] >= gpu_mem)
    if roomy >= max(1, whole):
        return None
    if roomy == 0:
        biggest = max(memory_totals[i] for i in present)
        return (f"needs {format_memory(gpu_mem)} per GPU but the largest of its {where} has "
                f"{format_memory(biggest)}")
    return (f"needs {need} but only {roomy} of its {where} "
            f"{'has' if roomy == 1 else 'have'} {format_memory(gpu_mem)}")


def _never_on_a_node(need: str, whole: int, gpu_mem: int | None, present: list[int],
                     memory_totals: Mapping[int, int], node_of: Mapping[int, int],
                     where: str) -> str | None:
    """never_runnable's answer on several nodes, for a job of ``whole`` > 1 GPUs."""
    per_node = Counter(node_of[i] for i in present
                       if not gpu_mem or memory_totals[i] >= gpu_mem)
    most = max(per_node.values(), default=0)
    if most >= whole:
        return None
    roomy = f" with {format_memory(gpu_mem)}" if gpu_mem else ""
    return (f"needs {need} on one node but no node has {whole} {where}{roomy} "
            f"(the most on one node is {most})")


def most_memory(node_memory: Iterable[tuple[int, int]]) -> list[int]:
    """From (node, total memory) per GPU: entry k-1 is the most memory that k GPUs of one
    node all have (the largest k-th largest over the nodes), so a job of k whole GPUs with
    ``gpu_mem`` each fits some node iff k <= len and gpu_mem <= entry k-1. On one node it
    is the GPUs' memory, largest first."""
    by_node: dict[int, list[int]] = {}
    for node, memory in node_memory:
        by_node.setdefault(node, []).append(memory)
    best: list[int] = []
    for memories in by_node.values():
        memories.sort(reverse=True)
        for k, m in enumerate(memories):
            if k == len(best):
                best.append(m)
            elif m > best[k]:
                best[k] = m
    return best


# --- a GPU type on this machine ---------------------------------------------------------

def typed_gpus(gpu_type: str, names: Mapping[int, str]) -> frozenset[int]:
    """The GPUs (by index) of a type: those whose name holds it, in any case ("a100" is an
    "NVIDIA A100-SXM4-80GB")."""
    want = gpu_type.casefold()
    return frozenset(i for i, name in names.items() if want in name.casefold())


def machine_text(names: Mapping[int, str]) -> str:
    """This machine's GPUs as a person counts them: '2 x NVIDIA A100-SXM4-80GB, 1 x Tesla
    T4' (in index order), or 'no GPUs'."""
    counts = Counter(names[i] for i in sorted(names))
    return ", ".join(f"{n} x {name}" for name, n in counts.items()) or "no GPUs"


def type_scope(gpu_type: str, allowed: Collection[int] | None,
               names: Mapping[int, str]) -> frozenset[int]:
    """The GPUs a job asking for ``gpu_type`` may use: those of the type among ``allowed``
    (None: any)."""
    typed = typed_gpus(gpu_type, names)
    return typed if allowed is None else typed & frozenset(allowed)


def never_typed(gpu_type: str, gpus_milli: int, allowed: Collection[int] | None,
                names: Mapping[int, str]) -> str | None:
    """Why a job asking for ``gpus_milli`` thousandths of GPUs of ``gpu_type`` (on
    ``allowed`` GPUs, None: any) can never start on GPUs of these names (by index), in a
    sentence that names the GPUs there are; None when enough of them are of the type."""
    typed = typed_gpus(gpu_type, names)
    if not typed:
        return (f"no GPU here is of type {gpu_type} (a part of the GPU's name, any case): "
                f"this machine has {machine_text(names)}")
    scope = type_scope(gpu_type, allowed, names)
    these = "GPU" if len(typed) == 1 else "GPUs"
    if not scope:
        shown = format_gpu_set(frozenset(allowed or ()))
        return (f"none of its allowed GPUs {{{shown}}} is of type {gpu_type}: {these} "
                f"{{{format_gpu_set(typed)}}} {'is' if len(typed) == 1 else 'are'} "
                f"({machine_text({i: names[i] for i in typed})})")
    whole = gpus_milli // MILLI
    if whole > len(scope):
        among = " of its allowed GPUs" if allowed is not None else " here"
        return (f"needs {need_text(gpus_milli, None)} of type {gpu_type} but only "
                f"{len(scope)}{among} {'is' if len(scope) == 1 else 'are'} of that type "
                f"(GPU{'s' if len(scope) != 1 else ''} {format_gpu_set(scope)})")
    return None

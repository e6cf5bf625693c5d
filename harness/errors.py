"""Exceptions that carry meaning across the harness: each maps to one verdict or to a usage error.

Kept apart from the protocol so backends, case loading and user case files can raise them without import cycles.
"""

from __future__ import annotations


class CaseError(ValueError):
    """A case definition is malformed (missing field, wrong type, unknown verdict, non-tensor input).

    The message always names the case and the field; the CLI turns it into exit code 2.
    """

    def __init__(self, case: str, field: str, problem: str) -> None:
        self.case = case
        self.field = field
        super().__init__(f"case {case!r}: field {field!r}: {problem}")


class CaptureError(RuntimeError):
    """Graph capture or instantiation failed for a reason other than a host sync (verdict `capture_error`)."""


class CaptureSyncError(CaptureError):
    """A host synchronization or data-dependent shape happened under capture (verdict `capture_sync`).

    Real capture fails the same way: `.item()` gives cudaErrorStreamCaptureUnsupported on CUDA and
    hipErrorStreamCaptureUnsupported on ROCm (aiter#5831).
    """


class OutputTypeError(TypeError):
    """An op returned something the harness cannot compare (None, a non-tensor, a sparse or nested tensor).

    A mistake in the case definition or a limit of the harness, never a verdict on the op: the protocol turns
    it into a CaseError naming the field `op`.
    """


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run here (`--backend gpu` without a GPU): a run-level error (exit code 2)."""


class FallbackEager(RuntimeError):
    """Raised by an op (or its executor) at capture time when a fail-closed probe disabled graphs.

    The harness then checks eager execution alone and gives `fallback_eager` when eager is right.
    """


# Exceptions an op raises to refuse its inputs by name (verdict `refused`). torch's TORCH_CHECK_VALUE,
# TORCH_CHECK_TYPE and TORCH_CHECK_NOT_IMPLEMENTED raise exactly these, and pybind11 maps
# std::invalid_argument to ValueError; a bare RuntimeError is not a refusal.
REFUSAL_ERRORS: tuple[type[BaseException], ...] = (ValueError, TypeError, NotImplementedError)

# Causes followed from one exception: enough for any wrapping the harness or torch's dispatcher adds (3 at most
# seen), and a bound where a chain is very long.
MAX_CHAIN = 16


def exception_chain(exc: BaseException, *, contexts: bool = True) -> list[BaseException]:
    """The exception and its causes (and, with `contexts`, the exceptions they were raised during), outermost
    first, each once: `raise err from err` makes a chain that points at itself, so a walk must stop at the
    first exception it has already seen."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and not any(current is seen for seen in chain) and len(chain) < MAX_CHAIN:
        chain.append(current)
        current = current.__cause__ or (current.__context__ if contexts else None)
    return chain

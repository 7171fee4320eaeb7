"""The kwok provider now ships with the product: ``hybridgpu.cloud.kwok``. These names stay
for tests that import them from here."""

from hybridgpu.cloud.kwok import (
    INTERRUPTION_ANNOTATION,
    PROVIDER_PREFIX,
    KwokProvider,
    kwok_node,
)

INTERRUPT_ANNOTATION = INTERRUPTION_ANNOTATION

__all__ = ["INTERRUPT_ANNOTATION", "PROVIDER_PREFIX", "KwokProvider", "kwok_node"]

"""Pure decision logic: data in, plan out. No I/O, no clock, no Kubernetes or cloud clients."""

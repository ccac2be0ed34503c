"""A stand-in `uccl` package whose `uccl.p2p` is ferry.p2p, so that UCCL's own
tests and benchmarks run against ferry unchanged (scripts/uccl_conformance.sh)."""

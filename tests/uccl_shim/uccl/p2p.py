"""uccl.p2p for UCCL's tests: everything ferry.p2p exports."""
from ferry.p2p import *  # noqa: F401,F403

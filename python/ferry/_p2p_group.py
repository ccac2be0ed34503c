"""The seed's rendezvous calls of ferry.p2p.Endpoint: join_group,
conn_id_of_rank and Endpoint.CreateAndJoin (a mixin of Endpoint).

UCCL publishes each member in Redis and fully connects the group. ferry's
engine already publishes itself in a directory (redis:// or etcd://, see
docs/directory.md) when it is created with one, so a member's engine is
(re)started under the name "GROUP.RANK" and every pair of members connects
once: the lower rank dials the higher one by name, and the hello carries the
dialler's rank, so each side learns which connection is which rank.
"""

from __future__ import annotations

import time
from typing import Optional

import ferry

from ._p2p_types import NO_ID


def _error(code: ferry.Code, message: str) -> ferry.FerryError:
    return ferry.Status(code, message).exception()


def member_name(group_name: str, rank: int) -> str:
    return f"{group_name}.{rank}"


class GroupCalls:
    """join_group, conn_id_of_rank, CreateAndJoin of Endpoint."""

    def join_group(self, discovery_uri: str, group_name: str, world_size: int, my_rank: int,
                   remote_gpu_idx: int, *, timeout: Optional[float] = None) -> bool:
        """Publishes this endpoint as member `my_rank` of `group_name` in the
        directory at `discovery_uri`, waits for the `world_size` members and
        connects to each; blocks up to `timeout` seconds (default
        FERRY_P2P_CONNECT_TIMEOUT). Then conn_id_of_rank(r) names each peer.
        `remote_gpu_idx` is accepted and unused: members are found by name.

        The engine restarts under the directory unless it already runs there
        with this name, so the endpoint must not hold connections or
        registrations yet (or use CreateAndJoin); its port changes.
        """
        for value, what in ((world_size, "world_size"), (my_rank, "my_rank"), (remote_gpu_idx, "remote_gpu_idx")):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{what} must be an int, not {type(value).__name__}")
        deadline = time.monotonic() + self._connect_budget(timeout)
        try:
            if not 0 <= my_rank < world_size:
                raise _error(ferry.Code.INVALID_ARGUMENT, f"join_group: rank {my_rank} is not in [0, {world_size})")
            self._publish_as(discovery_uri, member_name(group_name, my_rank))
            for rank in range(my_rank + 1, world_size):
                conn = self._dial(member_name(group_name, rank), "group", max(0.0, deadline - time.monotonic()),
                                  rank=my_rank, retry=(ferry.NotFound, ferry.Unavailable))
                self._register_conn(conn)
                with self._lock:
                    self._ranks[rank] = conn.id
            for rank in range(my_rank):
                conn, hello = self._acceptor().take("group", max(0.0, deadline - time.monotonic()), rank=rank)
                self._register_conn(conn, hello)
        except ferry.FerryError as e:
            self._fail(f"join_group {group_name!r} as rank {my_rank}", e)
            return False
        return True

    def _publish_as(self, discovery_uri: str, name: str) -> None:
        options = self.engine.options
        if options.directory == discovery_uri and options.name == name:
            return
        with self._lock:
            busy = self._conns or self._regions or self._implicit or self._pending or self._acceptor_instance
            if busy:
                raise _error(ferry.Code.INVALID_ARGUMENT,
                             "join_group restarts the endpoint's engine in the directory, so it needs an endpoint "
                             "with no connections, registrations or accepts yet (or use Endpoint.CreateAndJoin)")
            self.engine.close()
            self._start_engine(None, directory=discovery_uri, name=name)

    def conn_id_of_rank(self, rank: int) -> int:
        """The connection to group member `rank`, or UINT64_MAX if there is none."""
        return self._ranks.get(rank, NO_ID)

    @classmethod
    def CreateAndJoin(cls, discovery_uri: str, group_name: str, world_size: int, my_rank: int,
                      local_gpu_idx: int, num_cpus: int, remote_gpu_idx: int):
        """Endpoint(local_gpu_idx, num_cpus) that has joined the group
        (join_group); RuntimeError carrying the reason if it could not."""
        endpoint = cls(local_gpu_idx, num_cpus)
        if not endpoint.join_group(discovery_uri, group_name, world_size, my_rank, remote_gpu_idx):
            error = endpoint.last_error
            endpoint.close()
            raise RuntimeError(f"CreateAndJoin: {error}")
        return endpoint
